"""`driftbus up` (what `make up` runs): the whole pipeline, the example bundle Ready, and
Ctrl-C stopping every process it started."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import nats

from services.cli import user
from services.common.kube import KubeClient
from services.controlplane import servers

from ..gitrepo import git


async def test_up_reconciles_the_example_and_stops_cleanly(tmp_path: Path) -> None:
    workdir = tmp_path / "up"
    ui_port = servers.free_port()
    repo = tmp_path / "repo"  # `up --git`: a local repository followed into bundle "fromgit"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-git\ndata:\n  v: '1'\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "up", "--workdir", str(workdir), "-o", "json",
        "--ui-port", str(ui_port),
        "--git", str(repo), "--path", "deploy", "-n", "default", "--git-bundle", "fromgit",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=240))
        assert set(info["services"]) == {
            *("watcher", "planner", "applier-0", "applier-1", "ui", "source")
        }
        assert info["ui"] == f"http://127.0.0.1:{ui_port}/"
        nc = await nats.connect(info["nats_url"])
        try:
            (hello,) = await user.bundle_statuses(nc.jetstream(), "local", "hello")
            assert str(hello.phase) == "Ready"
            assert hello.counts.ready == hello.counts.total == 9
            for _ in range(300):
                got = await user.bundle_statuses(nc.jetstream(), "local", "fromgit")
                if got and got[0].revision == head and str(got[0].phase) == "Ready":
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"the followed repository never became Ready: {got}")
        finally:
            await nc.close()
        async with await KubeClient.from_kubeconfig(info["kubeconfig"]) as kube:
            cr = await kube.discovery.resource("example.driftbus.dev/v1", "Greeting")
            assert (await kube.get(cr, "world", "hello"))["spec"]["text"] == "hello, world"
        pids = [info["pid"], *info["services"].values()]
        assert all(servers.pid_alive(p) for p in pids)
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
    assert servers.orphans(str(workdir)) == []
    assert not [p for p in pids if servers.pid_alive(p)]


async def test_detach_leaves_it_running_and_down_stops_it(
    tmp_path: Path, stack: servers.Stack
) -> None:
    workdir = tmp_path / "detached"

    async def driftbus(*args: str) -> tuple[int, str]:
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", *args, "--workdir", str(workdir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        out, _ = await asyncio.wait_for(p.communicate(), timeout=240)
        assert p.returncode is not None
        return p.returncode, out.decode()

    # --kubeconfig: an existing cluster instead of a local control plane
    kubeconfig = str(stack.cluster.kubeconfig)
    code, out = await driftbus(
        "up",
        "--detach",
        "--no-example",
        "--kubeconfig",
        kubeconfig,
        "-o",
        "json",
        "--ui-port",
        "0",
    )
    assert code == 0, out
    info = json.loads(out.strip().splitlines()[-1])
    assert info["kubeconfig"] == kubeconfig
    pids = [info["pid"], *info["services"].values()]
    assert all(servers.pid_alive(p) for p in pids)
    code, out = await driftbus("up", "--detach", "--no-example", "--ui-port", "0")
    assert code == 1
    assert "already running" in out
    code, out = await driftbus("down")
    assert code == 0, out
    assert not [p for p in pids if servers.pid_alive(p)]
    assert servers.orphans(str(workdir)) == []
