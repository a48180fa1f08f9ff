"""Hostile and careless input, against the real CLI, services and servers (issue 30, items 4, 5
and part of 7): each is refused in one line before anything expands, renders or is published,
and ``driftbus source`` carries on with its other repositories when one of them is hostile."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import SourcePhase
from services.common import binaries, bus
from services.controlplane import servers

from ..conftest import unique_name
from ..gitrepo import git
from ..unit.test_input_limits import aliased_list, nested_json
from .test_trust_cli import ROOT, bundles_on_stream, write

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: '{v}'\n"
ADDRESS_SPACE = 3 * 1024**3
"""What a publish may map: the refusal needs a few hundred MiB at most; expanding needs ~18 GB."""


async def publish(
    pipeline: Pipeline, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """``driftbus publish ARGS`` under an address-space limit: (exit code, stderr)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "services.cli.main", "publish", "--cluster", pipeline.cluster, *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**pipeline.env(), "PYTHONPATH": str(ROOT), **(env or {})},
        preexec_fn=limit,  # no threads start before the exec
    )
    try:
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, "no answer within 120 s"
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def refusal(err: str) -> str:
    """The one line a refused publish prints (no traceback)."""
    assert "Traceback" not in err, err
    (line,) = err.strip().splitlines()
    return line


async def test_a_small_file_that_expands_to_18_gb_is_refused_in_one_line(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path
) -> None:
    await bus.ensure_streams(pnc.jetstream())
    path = tmp_path / "amp.yaml"
    path.write_text(aliased_list(20_000, 900_000))  # ~2.3 MB; 20,000 x 900 kB expanded
    assert path.stat().st_size < 3_000_000
    code, err = await publish(pipeline, str(path), "-n", "default", "--bundle", "amp")
    assert code == 1, err
    line = refusal(err)
    assert f"{path}#0: List expands to over 33,554,432 bytes as JSON" in line, line
    assert "DRIFTBUS_MAX_DOCUMENT_BYTES" in line
    assert await bundles_on_stream(pnc, pipeline.cluster, "amp") == []


async def test_a_document_nested_deeper_than_json_allows_is_refused_in_one_line(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path
) -> None:
    await bus.ensure_streams(pnc.jetstream())
    (tmp_path / "deep.json").write_text(nested_json(300))
    code, err = await publish(pipeline, str(tmp_path), "-n", "default", "--bundle", "deep")
    assert code == 1, err
    line = refusal(err)
    assert "deep.json#0: ConfigMap/deep is nested over 100 levels deep (DRIFTBUS_MAX_DEPTH)" in line
    assert await bundles_on_stream(pnc, pipeline.cluster, "deep") == []


@pytest.mark.parametrize("target", ["file", "directory"])
async def test_a_symlink_out_of_a_published_directory_is_refused_naming_it(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path, target: str
) -> None:
    await bus.ensure_streams(pnc.jetstream())
    write(tmp_path, "outside/secret.yaml", CM.format(name="outside", v=1))
    root = tmp_path / "deploy"
    write(root, "a.yaml", CM.format(name="a", v=1))
    link = root / "link.yaml" if target == "file" else root / "more"
    link.symlink_to(tmp_path / "outside" / ("secret.yaml" if target == "file" else ""))
    bundle = unique_name("links")
    code, err = await publish(pipeline, str(root), "-n", "default", "--bundle", bundle)
    assert code == 1, err
    assert f"{link}: a symbolic link out of {root}" in refusal(err)
    assert await bundles_on_stream(pnc, pipeline.cluster, bundle) == []
    link.unlink()
    (root / "inside.yaml").symlink_to("a.yaml")  # inside is fine (a duplicate here: renamed)
    (root / "inside.yaml").unlink()
    (root / "sub").symlink_to(root)  # a directory link inside: fine, and not followed
    code, err = await publish(pipeline, str(root), "-n", "default", "--bundle", bundle)
    assert code == 0, err
    (msg,) = await bundles_on_stream(pnc, pipeline.cluster, bundle)
    assert [m["metadata"]["name"] for m in msg.manifests] == ["a"]


def kustomize_base(tmp_path: Path) -> Path:
    """A Git repository holding a kustomize base: what a remote base URL points at."""
    repo = tmp_path / "bases"
    write(repo, "base/cm.yaml", CM.format(name="remote", v=1))
    write(repo, "base/kustomization.yaml", "resources:\n- cm.yaml\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return repo


def evil_upload_pack(tmp_path: Path) -> tuple[Path, Path]:
    """A program that leaves a mark when run, then does what git-upload-pack does."""
    mark = tmp_path / "PWNED"
    evil = tmp_path / "evil.sh"
    evil.write_text(f'#!/bin/sh\ntouch {mark}\nexec git-upload-pack "$@"\n')
    evil.chmod(0o755)
    return evil, mark


async def test_a_kustomize_ref_cannot_run_a_program_on_the_rendering_host(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path
) -> None:
    await bus.ensure_streams(pnc.jetstream())
    bases = kustomize_base(tmp_path)
    evil, mark = evil_upload_pack(tmp_path)
    overlay = tmp_path / "overlay"
    write(
        overlay,
        "kustomization.yaml",
        f"resources:\n- file://{bases}//base?ref=--upload-pack={evil}\n",
    )
    bundle = unique_name("remote")
    for allow in ((), ("--allow-remote-bases",)):  # a ref that is an option: never
        code, err = await publish(
            pipeline, str(overlay), "-n", "default", "--bundle", bundle, *allow
        )
        assert code == 1, err
        assert "is not a valid remote base" in refusal(err)
    assert not mark.exists(), "git ran a program named by the kustomization"
    assert await bundles_on_stream(pnc, pipeline.cluster, bundle) == []

    # a remote base with an ordinary ref: allowed when asked for, and only then
    write(overlay, "kustomization.yaml", f"resources:\n- file://{bases}//base?ref=main\n")
    code, err = await publish(pipeline, str(overlay), "-n", "default", "--bundle", bundle)
    assert code == 1, err
    assert "is a remote base, fetched when rendering" in refusal(err)
    assert "(--allow-remote-bases allows it)" in err
    code, err = await publish(
        pipeline, str(overlay), "-n", "default", "--bundle", bundle, "--allow-remote-bases"
    )
    assert code == 0, err
    (msg,) = await bundles_on_stream(pnc, pipeline.cluster, bundle)
    assert [m["metadata"]["name"] for m in msg.manifests] == ["remote"]


async def test_helm_lookup_gets_no_cluster_and_chart_credentials_are_never_shown(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path
) -> None:
    helm = binaries.require("helm")  # `make test` builds it (assets); missing is a failure
    await bus.ensure_streams(pnc.jetstream())
    chart = tmp_path / "peek"
    write(chart, "Chart.yaml", "apiVersion: v2\nname: peek\nversion: 0.1.0\n")
    write(
        chart,
        "templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: peek\ndata:\n"
        '  found: {{ lookup "v1" "Namespace" "" "kube-system" | toJson | quote }}\n',
    )
    bundle = unique_name("peek")
    # the publishing shell has a kubeconfig with cluster-admin rights (the pipeline's)
    code, err = await publish(pipeline, "--helm", str(chart), "-n", "default", "--bundle", bundle)
    assert code == 0, err
    (msg,) = await bundles_on_stream(pnc, pipeline.cluster, bundle)
    assert msg.manifests[0]["data"] == {"found": "{}"}, "lookup reached the cluster"

    port = servers.free_port()  # nothing listens yet: helm fails and says where it looked
    url = f"http://chart-user:s3cret-token@127.0.0.1:{port}/peek-0.1.0.tgz"
    code, err = await publish(pipeline, "--helm", url, "-n", "default", "--bundle", bundle)
    assert code == 1, err
    assert "s3cret-token" not in err, err
    assert f"http://127.0.0.1:{port}/peek-0.1.0.tgz" in refusal(err)

    # served (the server ignores who asks): the revision's source names it without them
    served = tmp_path / "served"
    served.mkdir()
    pack = await asyncio.create_subprocess_exec(str(helm), "package", str(chart), "-d", str(served))
    assert await pack.wait() == 0
    server = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"), cwd=served
    )
    try:
        await asyncio.sleep(1)
        code, err = await publish(pipeline, "--helm", url, "-n", "default", "--bundle", bundle)
    finally:
        server.terminate()
        await server.wait()
    assert code == 0, err
    assert "s3cret-token" not in err, err
    newest = (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1]
    assert newest.source.startswith(f"http://127.0.0.1:{port}/peek-0.1.0.tgz ["), newest.source


def outward_address() -> str | None:
    """This host's address on its default route (not loopback), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            addr: str = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def repository(tmp_path: Path, name: str, files: dict[str, str]) -> tuple[Path, str]:
    repo = tmp_path / name
    for rel, text in files.items():
        write(repo, rel, text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "first")
    return repo, git(repo, "rev-parse", "HEAD")


async def test_one_hostile_repository_does_not_stop_driftbus_source(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path
) -> None:
    bases = kustomize_base(tmp_path)
    evil, mark = evil_upload_pack(tmp_path)
    bomb, bomb_at = repository(tmp_path, "bomb", {"deploy/amp.yaml": aliased_list(20_000, 900_000)})
    ref = f"file://{bases}//base?ref=--upload-pack={evil}"
    sneaky, sneaky_at = repository(
        tmp_path, "sneaky", {"deploy/kustomization.yaml": f"resources:\n- {ref}\n"}
    )
    good, first = repository(tmp_path, "good", {"deploy/a.yaml": CM.format(name="a", v=1)})
    names = {n: unique_name(n) for n in ("bomb", "sneaky", "good")}
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        "".join(
            f"- {{cluster: {pipeline.cluster}, bundle: {names[n]}, git: 'file://{r}', "
            f"path: deploy, namespace: {namespace}}}\n"
            for n, r in (("bomb", bomb), ("sneaky", sneaky), ("good", good))
        )
    )
    watches = {n: StatusWatch() for n in names}
    for n, w in watches.items():
        await w.start(pnc, pipeline.cluster, names[n])
    pipeline.start_all()
    port = servers.free_port()
    source = pipeline.start(
        "source",
        None,
        "--sources",
        str(sources),
        "--interval",
        "600",
        "--webhook",
        f"0.0.0.0:{port}",
    )

    await watches["good"].ready(first, 90, pipeline.logs)
    failed = await watches["bomb"].source_status(lambda s: s.commit == bomb_at, 90, pipeline.logs)
    assert failed.phase is SourcePhase.FAILED, failed
    assert "deploy/amp.yaml#0: List expands to over 33,554,432 bytes as JSON" in failed.message
    refused = await watches["sneaky"].source_status(
        lambda s: s.commit == sneaky_at, 60, pipeline.logs
    )
    assert refused.phase is SourcePhase.FAILED, refused
    assert "is not a valid remote base" in refused.message, refused
    assert not mark.exists(), "git ran a program named by a followed repository"

    # the process lives on, and the good source carries on: a new commit is published
    assert source.proc is not None, pipeline.logs()
    assert source.proc.poll() is None, pipeline.logs()
    write(good, "deploy/a.yaml", CM.format(name="a", v=2))
    git(good, "commit", "-qam", "two")
    second = git(good, "rev-parse", "HEAD")
    async with aiohttp.ClientSession() as s:
        async with s.post(f"http://127.0.0.1:{port}/hook/{names['good']}", data=b"{}") as resp:
            assert resp.status == 202, await resp.text()  # no secret: loopback may ask
        outward = outward_address()
        if outward is not None:
            async with s.post(f"http://{outward}:{port}/hook", data=b"{}") as resp:
                assert resp.status == 403, await resp.text()
    await watches["good"].ready(second, 60, pipeline.logs)
    assert "WEBHOOK WITHOUT A SECRET listening beyond loopback" in pipeline.logs()


def test_git_refs_that_are_options_never_reach_git(tmp_path: Path) -> None:
    repo, _ = repository(tmp_path, "r", {"a.yaml": CM.format(name="a", v=1)})
    evil, mark = evil_upload_pack(tmp_path)
    res = subprocess.run(
        [
            *(sys.executable, "-m", "services.cli.main", "plan", "--cluster", "c"),
            *("--bundle", "b", "--git", f"file://{repo}", f"--ref=--upload-pack={evil}"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": "nats://127.0.0.1:1"},
        timeout=120,
        check=False,
    )
    assert res.returncode == 1, res.stderr
    assert "--ref '--upload-pack=" in res.stderr, res.stderr
    assert "not a valid Git ref" in res.stderr
    assert not mark.exists()
