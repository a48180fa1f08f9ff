"""Running the real pipeline (tests and benchmarks): services as subprocesses, bundles, status,
write counts.

Each test gets its own nats-server (streams start empty) and shares the session's API server.
Services run as real ``driftbus watcher|planner|applier`` processes so tests can SIGKILL them.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from harness.warm import WarmProcess
from schemas.codec import decision_records
from schemas.decision import DecisionAction, DecisionRecord
from schemas.messages import (
    BundleOptions,
    BundlePhase,
    BundleStatus,
    Health,
    ObjectPhase,
    ObjectStatus,
    SourceStatus,
)
from schemas.subjects import cluster_filter
from services.common import bus
from services.controlplane import servers
from services.revisions import watch as statuswatch
from services.revisions.publish import publish_bundle

# Writes the API server makes to itself (leases, APF config) are not driftbus's.
_SYSTEM_RESOURCES = {
    "leases",
    "flowschemas",
    "prioritylevelconfigurations",
    "events",
    "ipaddresses",  # the Service ClusterIP allocator records each IP it hands out
}
_WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION"}
_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def _requests(api: servers.KubeAPIServer) -> Iterator[tuple[dict[str, str], int]]:
    """(labels, count) of each ``apiserver_request_total`` series, less what the API server does
    for itself (leases, events, APF configuration, ClusterIP allocation)."""
    for line in api.metrics().splitlines():
        if (m := _METRIC.match(line)) is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        if labels.get("resource") not in _SYSTEM_RESOURCES:
            yield labels, int(float(m["value"]))


def write_requests(api: servers.KubeAPIServer) -> collections.Counter[tuple[str, str, str]]:
    """(verb, resource, HTTP code) → count of write requests the API server served so far, failed
    ones included (a 404 on a namespace not created yet is load too). Writes to a ``status``
    subresource are not counted: driftbus never makes them (the API server's own controllers do,
    late under load: a CRD's Established condition, and tests do)."""
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for labels, n in _requests(api):
        if labels.get("verb") not in _WRITE_VERBS or labels.get("dry_run"):
            continue
        if labels.get("subresource") == "status":
            continue
        counts[(labels["verb"], labels.get("resource", ""), labels.get("code", ""))] += n
    return counts


def requests_served(api: servers.KubeAPIServer) -> int:
    """Requests the API server has served so far, reads and writes of all clients (not watches,
    which are long-lived, nor what it does for itself)."""
    return sum(n for labels, n in _requests(api) if labels.get("verb") not in ("WATCH", "CONNECT"))


def write_counts(api: servers.KubeAPIServer) -> collections.Counter[tuple[str, str]]:
    """(verb, resource) → count of write requests the API server served so far (``write_requests``
    without the codes)."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for (verb, resource, _), n in write_requests(api).items():
        counts[(verb, resource)] += n
    return counts


def writes_since(
    api: servers.KubeAPIServer,
    before: collections.Counter[Any],
    resources: Collection[str] | None = None,
) -> int:
    """Writes since ``before``; only to ``resources`` when given (an API server started moments
    ago is still writing its own bootstrap roles and priority classes)."""
    delta = write_counts(api) - before
    return sum(v for (_, res), v in delta.items() if resources is None or res in resources)


FAST_HEARTBEATS = {
    "DRIFTBUS_HEARTBEAT_INTERVAL": "0.5",
    "DRIFTBUS_HEARTBEAT_TIMEOUT": "3",
    "DRIFTBUS_CHECKPOINT_INTERVAL": "1",
}
"""Planner environment for tests: a planner looks around for two heartbeat intervals before it
claims anything, and writes a cluster's checkpoint a second after a burst of facts, so that a
restart or a take-over in a test starts from one (the defaults are exercised by the
benchmarks, their smoke tests and ``up``)."""


class Pipeline:
    warm = False
    """Services forked warm (``harness.warm``) instead of started cold: the test suite turns
    it on (``tests/conftest.py``); benchmarks leave it off, since they measure starts too."""

    def __init__(
        self, *, stack: servers.Stack, nats: servers.NatsServer, cluster: str, workdir: Path
    ) -> None:
        self.stack = stack
        self.nats = nats
        self.cluster = cluster
        self.workdir = workdir
        self.procs: dict[str, servers.Process] = {}
        self.log_level = "DEBUG"  # benchmarks run at INFO
        self.extra_env: dict[str, str] = {}
        """Environment for every service (e.g. NATS TLS settings)."""
        self.role_env: dict[str, dict[str, str]] = {}
        """Environment per role (``watcher`` …): identities for the locked-down tests."""
        self.planner_env: dict[str, str] = {}
        """Planner settings on top (tests shorten the heartbeats; benchmarks keep defaults)."""

    @property
    def api(self) -> servers.KubeAPIServer:
        return self.stack.cluster.apiserver

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "NATS_URL": self.nats.client_url,
            "KUBECONFIG": str(self.stack.cluster.kubeconfig),
            "DRIFTBUS_LOG_LEVEL": self.log_level,
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }

    def start(self, role: str, name: str | None = None, *args: str) -> servers.Process:
        name = name or role
        argv = [sys.executable, "-m", "services.cli.main", role, *args]
        if role in ("watcher", "applier"):
            argv += ["--cluster", self.cluster]
        if role == "planner" and "--planner-id" not in args:
            # a stable identity, like a pod's: a restarted planner takes its claims back at
            # once instead of waiting out the heartbeat timeout of its previous life
            argv += ["--planner-id", name]
        env = self.env() | self.role_env.get(role, {})
        if role == "planner":
            env |= self.planner_env
        started = WarmProcess if self.warm else servers.Process
        proc = started(name, argv, self.workdir, env=env)
        proc.start()
        self.procs[name] = proc
        return proc

    def start_all(self, appliers: int = 1) -> None:
        self.start("watcher")
        self.start("planner")
        for i in range(appliers):
            self.start("applier", f"applier-{i}")

    def kill(self, name: str) -> None:
        self.procs[name].kill()

    def stop_all(self) -> None:
        # told all at once, so they stop (and drain) side by side instead of one after another
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            p.stop(timeout=10)

    def logs(self) -> str:
        return "\n".join(
            f"--- {n} ---\n{servers.log_tail(p.log_path, 30)}" for n, p in self.procs.items()
        )

    def all_logs_text(self) -> str:
        return "\n".join(
            p.log_path.read_text(errors="replace")
            for p in self.procs.values()
            if p.log_path.exists()
        )

    async def publish(
        self,
        js: bus.JetStream,
        bundle: str,
        manifests: list[dict[str, Any]],
        *,
        revision: str = "r1",
        as_user: bool = False,
        **options: Any,
    ) -> None:
        """Publish a bundle as ``driftbus publish`` does (``bundles.publish_bundle``), creating
        the streams first; ``as_user`` waits for the planner's streams instead, as a user of a
        locked-down bus must."""
        await publish_bundle(
            js,
            cluster=self.cluster,
            bundle=bundle,
            revision=revision,
            manifests=manifests,
            options=BundleOptions(**options),
            manage_streams=not as_user,
            within=60,
        )


async def planner_ready(js: bus.JetStream, planner_id: str = "planner") -> bool:
    """Whether the planner has completed a claim round (its heartbeat says so): from then on it
    claims a cluster as soon as the cluster's first bundle appears."""
    try:
        entry = await bus.kv_get(js, bus.SHARDS_BUCKET, bus.heartbeat_key(planner_id))
    except bus.BucketMissing:
        return False
    return entry is not None and bool(msgspec.json.decode(entry.value or b"{}").get("ready"))


async def until_planner_ready(
    js: bus.JetStream, within: float = 60.0, *, planner_id: str = "planner"
) -> None:
    deadline = time.monotonic() + within
    while not await planner_ready(js, planner_id):
        if time.monotonic() > deadline:
            raise TimeoutError("the planner never completed a claim round")
        await asyncio.sleep(0.1)


E = TypeVar("E")


class StatusWatch(statuswatch.StatusWatch):
    """Every status event of one bundle (object, bundle and Git source) as a user would see
    them (``services.revisions.watch``); a wait that runs out fails the test with what it
    saw."""

    async def until(
        self,
        pred: Callable[[BundleStatus], bool],
        within: float,
        logs: Callable[[], str] = lambda: "",
    ) -> BundleStatus:
        """The bundle's latest status, once it matches ``pred``."""
        async for _ in self.each(self.bundles, within):
            if pred(latest := self.bundles[-1]):
                return latest
        last = self.bundles[-1] if self.bundles else None
        raise AssertionError(
            f"bundle status never matched; last: {last}\n{self._objects_summary()}\n{logs()}"
        )

    def _objects_summary(self, shown: int = 20) -> str:
        """Each object's latest phase and health, counted, and the first few of the rest: a
        failure report stays short enough that the service logs after it are still read."""
        latest = {str(o.key): o for o in self.objects}
        counts = collections.Counter(f"{o.phase}/{o.health}" for o in latest.values())
        behind = [
            f"  {k}: {o.phase} ({o.health}) {o.message}"
            for k, o in sorted(latest.items())
            if (o.phase, o.health) != (ObjectPhase.APPLIED, Health.READY)
        ]
        more = f"\n  … {len(behind) - shown} more" if len(behind) > shown else ""
        return (
            f"objects by latest phase/health: {dict(counts)}\n" + "\n".join(behind[:shown]) + more
        )

    async def object_status(
        self,
        pred: Callable[[ObjectStatus], bool],
        within: float,
        logs: Callable[[], str] = lambda: "",
    ) -> ObjectStatus:
        """The first object event matching `pred`, waiting up to `within` seconds for it."""
        return await self._expect(self.objects, pred, within, logs)

    async def source_status(
        self,
        pred: Callable[[SourceStatus], bool],
        within: float,
        logs: Callable[[], str] = lambda: "",
    ) -> SourceStatus:
        """The first Git source event matching `pred`, waiting up to `within` seconds."""
        return await self._expect(self.sources, pred, within, logs)

    async def _expect(
        self, events: list[E], pred: Callable[[E], bool], within: float, logs: Callable[[], str]
    ) -> E:
        found = await self.first(events, pred, within)
        if found is None:
            lines = "\n".join(f"  {e}" for e in events)
            raise AssertionError(f"no status event matched; events:\n{lines}\n{logs()}")
        return found

    async def ready(
        self, revision: str, within: float = 60.0, logs: Callable[[], str] = lambda: ""
    ) -> BundleStatus:
        return await self.until(
            lambda s: s.revision == revision and s.phase is BundlePhase.READY, within, logs
        )


class DecisionLog:
    """Every decision record of a cluster since ``start``, as ``driftbus why`` reads them."""

    def __init__(self) -> None:
        self.records: list[DecisionRecord] = []

    async def start(self, nc: bus.Connection, cluster: str) -> None:
        async def on_msg(msg: Any) -> None:
            self.records.extend(decision_records(msg.subject, msg.data))

        await bus.subscribe(nc, cluster_filter("decision", cluster), on_msg)

    def reasons(self, name: str) -> list[str]:
        """``action:reason`` of every decision about objects called ``name``."""
        return [f"{r.action}:{r.reason}" for r in self.records if r.key.name == name]

    def applies(self, kind: str, name: str) -> list[str]:
        """The reasons of driftbus's apply decisions for the ``kind`` objects called ``name``."""
        return [
            str(r.reason)
            for r in self.records
            if r.key.kind == kind and r.key.name == name and r.action is DecisionAction.APPLY
        ]

    async def until_hits(self, count: int, *, since: int = 0, within: float = 60) -> int:
        """Hit decisions from record ``since`` on, once there are ``count`` (or ``within``
        seconds passed)."""
        deadline = time.monotonic() + within
        while True:
            hits = sum(1 for r in self.records[since:] if r.action is DecisionAction.HIT)
            if hits >= count or time.monotonic() > deadline:
                return hits
            await asyncio.sleep(0.2)

    def writes(self, since: int = 0) -> list[str]:
        """``key: action reason`` of every write decision (apply, delete) from record ``since``
        on: what driftbus wrote, whoever else writes to the same API server."""
        return [
            f"{r.key}: {r.action} {r.reason}"
            for r in self.records[since:]
            if r.action in (DecisionAction.APPLY, DecisionAction.DELETE)
        ]


async def settle(seconds: float = 1.5) -> None:
    """Let in-flight events drain (used only before counting writes that must stay zero)."""
    await asyncio.sleep(seconds)


__all__ = ["Pipeline", "StatusWatch", "bus", "settle", "write_counts", "writes_since"]
