"""A fleet for the fleet tests: three clusters with controllers (etcd, kube-apiserver,
kube-controller-manager, scheduler, kwok), each with its watcher (registering the cluster with its
labels) and an applier, two planner replicas (either can drive the rollouts) and one NATS.

Started once per test module and shared: tests isolate by bundle and namespace names, and a test
that relabels a cluster puts the labels back.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client as NATS

from harness.fleet import clusters
from harness.pipeline import DecisionLog, Pipeline
from schemas.codec import decode
from schemas.fleet import RolloutEvent, RolloutState
from schemas.messages import Bundle
from schemas.subjects import bundle_subject, family_filter, rollout_key
from services.common import bus
from services.controlplane import servers
from services.kube import KubeClient
from services.kube.discovery import Resource

CM = Resource("", "v1", "ConfigMap", "configmaps", True)
EXIT_FILE_HOOK = "DRIFTBUS_TEST_DRIVER_EXIT_FILE"
"""The driver's test hook (``services.fleet.driver.drive.EXIT_FILE_HOOK``)."""
INTERVAL, TIMEOUT = 0.5, 3.0
"""Planner heartbeats (and so the rollout driver's lease): a take-over within a few seconds."""
T = TypeVar("T")


class Site:
    """One cluster of the fleet: its pipeline (watcher, applier), client and decision log."""

    def __init__(self, name: str, labels: dict[str, str], pipeline: Pipeline) -> None:
        self.name = name
        self.labels = labels
        self.pipeline = pipeline
        self.kube: KubeClient | None = None
        self.decisions = DecisionLog()

    def start(self) -> None:
        args = ["--cluster-labels", ",".join(f"{k}={v}" for k, v in self.labels.items())]
        self.pipeline.start("watcher", "watcher", *args)
        self.pipeline.start("applier", "applier")

    async def configmaps(self, namespace: str) -> dict[str, dict[str, str]]:
        assert self.kube is not None
        try:
            items, _ = await self.kube.list(CM, namespace=namespace)
        except Exception:  # noqa: BLE001 - the namespace is not there (yet)
            return {}
        return {
            o["metadata"]["name"]: o.get("data", {})
            for o in items
            if o["metadata"]["name"] != "kube-root-ca.crt"
        }


class FleetStack:
    def __init__(self, workdir: Path, clusters: list[servers.Cluster], nats: servers.NatsServer):
        self.nats = nats
        self.workdir = workdir
        labels = [
            {"env": "canary", "region": "eu"},
            {"env": "prod", "region": "eu"},
            {"env": "prod"},
        ]
        self.sites: dict[str, Site] = {}
        for cluster, lab in zip(clusters, labels, strict=True):
            p = Pipeline(
                stack=servers.Stack(workdir, cluster, nats),
                nats=nats,
                cluster=cluster.name,
                workdir=workdir / cluster.name,
            )
            p.workdir.mkdir(parents=True, exist_ok=True)
            p.log_level = "INFO"
            self.sites[cluster.name] = Site(cluster.name, lab, p)
        self.home = next(iter(self.sites.values())).pipeline
        self.exit_file = workdir / "driver-exit"
        """The driver's test hook: the lease holder kills itself after its next state write
        that places anything, once, when this file exists (``services.fleet.driver.drive``)."""
        self.home.planner_env[EXIT_FILE_HOOK] = str(self.exit_file)
        # checkpoints a second after a burst, not ten: what the plan tests read, sooner
        self.home.planner_env["DRIFTBUS_CHECKPOINT_INTERVAL"] = "1"

    def start(self) -> None:
        for name in ("planner-a", "planner-b"):
            self.start_planner(name)
        for site in self.sites.values():
            site.start()

    def start_planner(self, name: str) -> servers.Process:
        return self.home.start(
            "planner",
            name,
            "--heartbeat-interval",
            str(INTERVAL),
            "--heartbeat-timeout",
            str(TIMEOUT),
        )

    def stop(self) -> None:
        for site in self.sites.values():
            site.pipeline.stop_all()
        self.home.stop_all()

    def logs(self) -> str:
        return "\n".join(s.pipeline.logs() for s in self.sites.values())

    def names(self) -> list[str]:
        return list(self.sites)

    def cli_env(self) -> dict[str, str]:
        return {**self.home.env(), "NATS_URL": self.nats.client_url}


@contextlib.contextmanager
def fleet_stack(root: Path, names: list[str]) -> Iterator[FleetStack]:
    """A running fleet of clusters ``names`` (with controllers), one NATS, two planners."""
    nats_server = servers.NatsServer(root / "nats")
    nats_server.start()
    try:
        with clusters(root, len(names), names=names, controllers=True) as started:
            fleet = FleetStack(root, started, nats_server)
            fleet.start()
            try:
                yield fleet
            finally:
                fleet.stop()
    finally:
        nats_server.stop()


async def driftbus(fleet: FleetStack, *args: str, limit: float = 180) -> tuple[int, str, str]:
    """``driftbus ARGS`` against the fleet's bus: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=fleet.cli_env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=limit)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def until(
    what: str, probe: Callable[[], Awaitable[T | None]], within: float, logs: Callable[[], str]
) -> T:
    deadline = time.monotonic() + within
    while True:
        got = await probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within:g}s\n{logs()}")
        await asyncio.sleep(0.3)


async def rollout_state(nc: NATS, bundle: str) -> RolloutState | None:
    try:
        kv = await nc.jetstream().key_value(bus.ROLLOUTS_BUCKET)
        entry = await kv.get(rollout_key(bundle))
    except Exception:  # noqa: BLE001 - not there yet
        return None
    return msgspec.json.decode(entry.value or b"", type=RolloutState)


class EventLog:
    """Every rollout event on the bus since ``start``."""

    def __init__(self) -> None:
        self.events: list[RolloutEvent] = []

    async def start(self, nc: NATS) -> None:
        async def on_msg(msg: Any) -> None:
            self.events.append(decode(msg.data, RolloutEvent))

        await nc.subscribe(family_filter("rollout"), cb=on_msg)

    def of(self, bundle: str) -> list[RolloutEvent]:
        return [e for e in self.events if e.bundle == bundle]


async def placed_revisions(nc: NATS, cluster: str, bundle: str) -> list[str]:
    """The revisions the bundle subject of ``cluster`` holds (what the driver placed there)."""
    out = []
    follower = bus.Follower(
        nc.jetstream(), bus.BUNDLES, bundle_subject(cluster, bundle), history=True
    )
    with contextlib.suppress(Exception):
        async for m in follower.snapshot(timeout=5):
            b = decode(m.data, Bundle)
            out.append("delete" if b.delete else b.revision)
    return out
