"""`driftbus up` (what `make up` runs) starts a reachable stack and Ctrl-C stops all of it."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import nats

from services.common.kube import KubeClient
from services.controlplane import servers


async def test_up_prints_how_to_reach_the_stack_and_stops_cleanly(tmp_path: Path) -> None:
    workdir = tmp_path / "up"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "up",
        "--workdir",
        str(workdir),
        "-o",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        info = json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=180))
        async with await KubeClient.from_kubeconfig(info["kubeconfig"]) as kube:
            ns = await kube.discovery.resource("v1", "Namespace")
            assert (await kube.get(ns, "default"))["metadata"]["name"] == "default"
        nc = await nats.connect(info["nats_url"])
        account = await nc.jetstream().account_info()
        assert account.limits is not None
        await nc.close()
        assert servers.orphans(str(workdir)) != []
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    assert servers.orphans(str(workdir)) == []
