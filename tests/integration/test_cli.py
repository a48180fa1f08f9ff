"""The user's commands against the running pipeline: publish --wait, status, why, bad input."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from pathlib import Path

from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, write_counts, writes_since
from schemas.subjects import bundle_subject
from services.common import bus

from ..conftest import unique_name
from ..gitrepo import git


async def driftbus(pipeline: Pipeline, *args: str) -> tuple[int, str, str]:
    """``driftbus ARGS`` run to completion: exit code, stdout, stderr."""
    proc = await started(pipeline, *args)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def started(pipeline: Pipeline, *args: str) -> asyncio.subprocess.Process:
    """``driftbus ARGS`` running (``status -f``), its stdout and stderr piped."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**pipeline.env(), "NATS_URL": pipeline.nats.client_url},
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    return proc


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
    # not a terminal: progress as plain lines, the first at once, the last the end
    lines = [x for x in err.splitlines() if x.startswith("cli@sha256:")]
    assert lines[0].endswith("waiting for the planner …"), err
    assert lines[-1].endswith("Ready applied 5/5  ready 5/5"), err
    assert "\r" not in err

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

    code, out, err = await driftbus(pipeline, "status", "--cluster", c, "-o", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["bundle"] == "cli"
    assert row["phase"] == "Ready"
    assert (row["applied"], row["objects"]) == (5, 5)

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


async def test_plan_explains_changes_with_diffs_and_writes_nothing(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    pipeline.start_all()
    src = write_bundle(tmp_path / "v1", namespace)
    kept = (
        (src / "configmaps.yaml")
        .read_text()
        .replace(  # cli-3 opts out of prune
            "name: cli-3\n", "name: cli-3\n  annotations:\n    driftbus.dev/prune: disabled\n"
        )
    )
    (src / "configmaps.yaml").write_text(kept)
    (src / "secret.yaml").write_text(
        f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: {namespace}\n"
        "stringData:\n  password: old-pass-1234\n"
    )
    c = pipeline.cluster
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", c, "--bundle", "p", "--wait", "--timeout", "90"
    )
    assert code == 0, err + out
    await asyncio.sleep(1.5)

    v2 = write_bundle(tmp_path / "v2", namespace, n=6)  # cli-5 is new
    text = (v2 / "configmaps.yaml").read_text().replace("i: '2'", "i: 'two'")  # cli-2 changes
    docs = [d for d in text.split("---\n") if not {"cli-3", "cli-4"} & set(d.split())]
    (v2 / "configmaps.yaml").write_text("---\n".join(docs))
    (v2 / "secret.yaml").write_text(
        (src / "secret.yaml").read_text().replace("old-pass-1234", "new-pass-5678")
    )
    before = write_counts(pipeline.api)
    code, out, err = await driftbus(
        pipeline, "plan", str(v2), "--cluster", c, "--bundle", "p", "-o", "json"
    )
    assert code == 0, err + out
    rows = {r["name"]: r for r in json.loads(out)["objects"]}
    assert rows["cli-2"]["action"] == "apply"
    assert rows["cli-2"]["reason"] == "manifest"
    assert rows["cli-2"]["api_version"] == "v1"
    assert rows["cli-2"]["changes"] == [
        {"op": "change", "path": "data.i", "old": "2", "new": "two"}
    ]
    assert rows["cli-5"]["action"] == "apply"
    assert rows["cli-5"]["reason"] == "new (create)"
    assert rows["cli-4"]["action"] == "delete"
    assert (rows["cli-3"]["action"], rows["cli-3"]["reason"]) == ("keep", "annotation")
    assert rows["cli-0"]["action"] == "unchanged"
    assert rows["creds"]["changes"] == [
        {"op": "change", "path": "data.password", "old": "***", "new": "***"}
    ]
    for value in ("old-pass-1234", "new-pass-5678"):
        assert value not in out
        assert base64.b64encode(value.encode()).decode() not in out
    assert writes_since(pipeline.api, before) == 0  # dry-run only: nothing written


async def test_status_follow_shows_current_state_then_live_changes(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    import signal

    pipeline.start_all()
    src = write_bundle(tmp_path / "src", namespace, n=2)
    c = pipeline.cluster
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", c, "--bundle", "f", "--wait", "--timeout", "90"
    )
    assert code == 0, err + out
    follow = await started(pipeline, "status", "--cluster", c, "--bundle", "f", "--follow")
    assert follow.stdout is not None
    lines: list[str] = []

    async def read_until(text: str) -> None:
        while not any(text in line for line in lines):
            lines.append((await follow.stdout.readline()).decode())  # type: ignore[union-attr]

    await asyncio.wait_for(read_until("cli-1"), timeout=30)  # the current state first
    (src / "configmaps.yaml").write_text(
        (src / "configmaps.yaml").read_text().replace("i: '1'", "i: 'one'")
    )
    code, out, err = await driftbus(pipeline, "publish", str(src), "--cluster", c, "--bundle", "f")
    assert code == 0, err
    await asyncio.wait_for(read_until("cli-1: Applied applied (manifest)"), timeout=30)
    follow.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(follow.wait(), timeout=10) == 0
    await follow.stdout.read()  # drain to EOF so the pipe transports close now, not at GC
    await follow.stderr.read()  # type: ignore[union-attr]


async def test_status_follow_of_one_tenant_shows_only_its_bundles(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    """`status --tenant T -f` follows T's bundles, not every tenant's and the platform's."""
    import signal

    pipeline.start_all()
    c, tenant = pipeline.cluster, unique_name("tq")
    follow = await started(pipeline, "status", "--cluster", c, "--tenant", tenant, "--follow")
    assert follow.stdout is not None
    await asyncio.sleep(2)  # subscribed before anything below is published
    src = write_bundle(tmp_path / "src", namespace, n=1)
    platform = unique_name("plat")
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", c, "--bundle", platform, "--wait"
    )
    assert code == 0, err + out
    # a bundle of a tenant no policy defines: refused, on the tenant's own status subject
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", c, "--bundle", f"{tenant}/web"
    )
    assert code == 0, err + out
    lines: list[str] = []
    while not any(f"{tenant}/web@" in line for line in lines):
        line = await asyncio.wait_for(follow.stdout.readline(), timeout=30)
        if not line:  # it ended: say why
            assert follow.stderr is not None
            raise AssertionError(f"status -f ended: {(await follow.stderr.read()).decode()}")
        lines.append(line.decode())
    follow.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(follow.wait(), timeout=10) == 0
    lines += (await follow.stdout.read()).decode().splitlines()
    await follow.stderr.read()  # type: ignore[union-attr]
    assert not [line for line in lines if platform in line], lines


async def test_publish_wait_fails_with_the_failed_objects_listed(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    pipeline.start_all()
    src = write_bundle(tmp_path / "src", namespace, n=2)
    (src / "bad.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_Valid\n  namespace: {namespace}\n"
    )
    code, out, err = await driftbus(
        pipeline,
        "publish",
        str(src),
        "--cluster",
        pipeline.cluster,
        "--bundle",
        "failing",
        "--wait",
        "--timeout",
        "90",
    )
    assert code == 1, err + out
    assert "Failed" in out
    assert "ConfigMap/" in out
    assert "Not_Valid" in out
    assert "Invalid (422)" in out


async def test_git_revisions_apply_only_what_changed(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    write_bundle(repo / "deploy", namespace, n=5)

    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    first = git(repo, "rev-parse", "HEAD")
    f = repo / "deploy" / "configmaps.yaml"
    f.write_text(f.read_text().replace("i: '3'", "i: 'three'"))
    git(repo, "commit", "-qam", "second")
    second = git(repo, "rev-parse", "HEAD")

    pipeline.start_all()
    c = pipeline.cluster

    async def publish_ref(ref: str) -> tuple[int, str, str]:
        return await driftbus(
            pipeline,
            *("publish", "--git", str(repo), "--ref", ref, "--path", "deploy"),
            *("--cluster", c, "--bundle", "g", "--wait", "--timeout", "90"),
        )

    code, out, err = await publish_ref(first)
    assert code == 0, err + out
    assert f"g@{first}" in err
    await asyncio.sleep(1.5)
    before = write_counts(pipeline.api)
    code, out, err = await publish_ref(second)
    assert code == 0, err + out
    await asyncio.sleep(1.5)
    assert writes_since(pipeline.api, before) == 1
    code, out, _ = await driftbus(pipeline, "status", "--cluster", c, "-o", "json")
    assert json.loads(out)[0]["revision"] == second
