"""The user's commands against the running pipeline: publish --wait, status, why, bad input."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from nats.aio.client import Client as NATS

from schemas.subjects import bundle_subject
from services.common import bus

from .pipeline import Pipeline


async def driftbus(pipeline: Pipeline, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**pipeline.env(), "NATS_URL": pipeline.nats.client_url},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def write_bundle(root: Path, ns: str, n: int = 5) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    docs = [
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cli-{i}\n  namespace: {ns}\n"
        f"data:\n  i: '{i}'\n"
        for i in range(n)
    ]
    (root / "configmaps.yaml").write_text("---\n".join(docs))
    return root


async def test_publish_wait_status_and_why(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    pipeline.start_all()
    src = write_bundle(tmp_path / "src", namespace)
    c = pipeline.cluster
    code, out, err = await driftbus(
        pipeline,
        "publish",
        str(src),
        "--cluster",
        c,
        "--bundle",
        "cli",
        "--wait",
        "--timeout",
        "90",
    )
    assert code == 0, err + out + pipeline.logs()
    assert "Ready" in out
    assert "published cli@sha256:" in err

    # republishing the same content answers at once, with the same revision and zero writes
    code, out, err = await driftbus(
        pipeline,
        "publish",
        str(src),
        "--cluster",
        c,
        "--bundle",
        "cli",
        "--wait",
        "--timeout",
        "30",
    )
    assert code == 0, err + out

    code, out, _ = await driftbus(pipeline, "status", "--cluster", c, "-o", "json")
    assert code == 0
    (row,) = json.loads(out)
    assert row["bundle"] == "cli"
    assert row["phase"] == "Ready"
    assert row["applied"] == "5/5"

    code, out, _ = await driftbus(pipeline, "status", "--cluster", c, "--bundle", "cli")
    assert code == 0
    assert "cli-3" in out
    assert "Applied" in out
    assert "Ready" in out

    code, out, _ = await driftbus(pipeline, "why", f"ConfigMap/{namespace}/cli-2", "--cluster", c)
    assert code == 0, out
    assert "apply" in out
    assert "new" in out
    assert "hit" in out  # the republish was a cache hit, and the log says so


async def test_bad_input_is_one_clear_line_and_nothing_is_published(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    src = write_bundle(tmp_path / "src", namespace)
    (src / "broken.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x\n")
    code, _, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", pipeline.cluster, "--bundle", "bad"
    )
    assert code == 1
    assert err.count("\n") == 1, err  # one line, no traceback
    assert re.search(r"broken\.yaml:\d+: invalid YAML", err), err
    assert "Traceback" not in err
    js = pnc.jetstream()
    await bus.ensure_streams(js)
    info = await js.stream_info(
        bus.BUNDLES, subjects_filter=bundle_subject(pipeline.cluster, "bad")
    )
    assert info.state.messages == 0
