"""Simulated clusters for ``python -m bench fleet-sim``: each cluster's watcher and applier as bus
members, with an in-memory API server (``SimKube``) in place of Kubernetes.

``python -m bench.fleetsim_members --nats URL --first I --count N --objects M --stats PATH``
simulates the clusters ``sim-<I>`` … ``sim-<I+N-1>`` in one asyncio process. The bus side of
each cluster is the real services' own code, unchanged:

* **applier**: a real ``services.applier.service.Applier`` (default settings: 16 intents in
  flight, ack wait 10 s, fence read every second) — its fence (the claim read at start and
  followed), its heartbeat, its intent consumer (``consumer.consume``: fetch up to the free
  slots, again once a quarter of them are free), the namespace gate, the supersession read only
  for an intent that waited or was redelivered, the "already carried out" check only for a
  redelivery (the applier's own memory of its reports), ``verbs.apply`` / ``verbs.delete``
  against ``SimKube``, and ``report.Reporter``: the applied fact in the applier's next report
  (``reports.AppliedReports``: one ``AppliedFacts`` message and one ``ObjectRows`` per bundle
  for what finishes within 10 ms), then ``ack`` without a round trip;
* **watcher**: registers the cluster in the registry (``clusters.registry.register``), heartbeats
  (``clusters.members.announce``, synced), follows the cluster's bundles (``bus.Follower`` on
  its BUNDLES subjects, an ordered consumer as the real watcher's) and, for each object
  ``SimKube`` stores or deletes, hands the watch event it makes to a real
  ``services.watcher.watch.Watcher`` through the real watcher's ``bursts`` (what arrives
  together is one burst) and ``Watcher.handle_burst`` (the fact only when SHA or health
  changed, one ``ServerFacts`` message per burst), as the API server's watch stream would.
  Objects of the clusters told to fail carry a ``Stalled=True`` condition, so their health is
  ``Failed``; the others are ``Ready``.

``SimKube`` answers ``resource_for``, ``discovery.resource``, ``apply``, ``get`` and ``delete``
from a dict per cluster (resourceVersions count up per cluster; no latency, no managed fields,
so no adoption patch). Not simulated: the API server itself, the watcher's seeding from SERVER
at start (the streams are empty when the members start), its discovery and relists. One NATS
connection serves all clusters of a process (real members hold one each).

Counters, written as JSON to ``--stats`` on SIGTERM: the appliers' own (``applied``,
``superseded``, ``fenced``, ``failed``, ``redelivered_done``), ``handler_errors``, the server facts
published, and ``objects_applied``: the distinct (cluster, object) pairs whose object in
``SimKube`` holds the expected manifest (the ``data`` of ``configmaps(objects)``) and whose
applied fact was published with the SHA of that very manifest. ``python -m bench fleet-sim``
fails unless ``objects_applied`` = clusters × objects.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import hashlib
import itertools
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import nats
import orjson

from schemas.codec import WireError, decode
from schemas.messages import ApplyIntent, Bundle, DeleteIntent
from schemas.subjects import ObjectKey, cluster_filter
from services.applier.consumer import Claim
from services.applier.report import Reporter
from services.applier.service import Applier
from services.applier.settings import ApplierSettings
from services.applier.verbs import Outcome
from services.clusters import members
from services.clusters.registry import register
from services.common import bus, heap
from services.core.sha import manifest_sha
from services.kube import NotFound, Resource, WatchEvent
from services.watcher.bursts import bursts
from services.watcher.settings import WatcherSettings
from services.watcher.watch import Watcher

APP_LABEL = "fleetsim"


def _copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a JSON object: what the API server sends is its own bytes, decoded. Via
    orjson, a sixth of ``copy.deepcopy``'s time (which was a tenth of a member process's CPU)."""
    return dict(orjson.loads(orjson.dumps(obj)))


def cluster_name(i: int) -> str:
    return f"sim-{i:04d}"


def configmaps(n: int) -> list[dict[str, Any]]:
    """The fleet bundle's manifests: ``n`` ConfigMaps in ``default``."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": "default", "labels": {"app": APP_LABEL}},
            "data": {"index": str(i), "payload": f"value-{i}-" + "x" * 64},
        }
        for i in range(n)
    ]


def fails(cluster: str, share: float) -> bool:
    """Whether ``cluster`` reports its objects Failed (a stable pick of ``share`` of them)."""
    h = int.from_bytes(hashlib.sha256(cluster.encode()).digest()[:4], "big")
    return h / 2**32 < share


def objects_applied(
    live: Mapping[ObjectKey, Mapping[str, Any]],
    applied: Mapping[ObjectKey, str],
    reported: Mapping[ObjectKey, str],
    expected: Mapping[tuple[str, str], Mapping[str, Any]],
) -> int:
    """Objects of one cluster that reached the expected manifest (pure): held by the simulated
    API server with the expected ``data``, and named in an applied fact the applier published
    with the SHA of the very manifest the API server got. ``applied``: key → SHA of the
    manifest last applied; ``reported``: key → manifest SHA of the last applied fact."""
    n = 0
    for key, obj in live.items():
        want = expected.get((key.namespace, key.name))
        if want is None or obj.get("data") != want.get("data"):
            continue
        if key in applied and reported.get(key) == applied[key]:
            n += 1
    return n


class _Discovery:
    async def resource(self, api_version: str, kind: str) -> Resource:
        group, _, version = api_version.rpartition("/")
        return Resource(group, version, kind, kind.lower() + "s", namespaced=kind != "Namespace")


class SimKube:
    """An in-memory API server for one cluster: what the applier's verbs call, and a watch
    event to the cluster's watcher for every stored or deleted object."""

    def __init__(self, watcher: Watcher, *, failing: bool) -> None:
        self.discovery = _Discovery()
        self.watcher = watcher
        self.failing = failing
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.applied: dict[ObjectKey, str] = {}
        """key → SHA of the manifest last applied (as the planner hashes manifests)"""
        self.rv = itertools.count(1000)
        self.events: asyncio.Queue[WatchEvent] = asyncio.Queue()
        """The watch stream: an event for every object stored or deleted, in order."""
        self.errors = 0
        """Facts a publish failure lost (a real watcher would relist and publish again)."""

    async def resource_for(self, obj: Mapping[str, Any]) -> Resource:
        return await self.discovery.resource(str(obj["apiVersion"]), str(obj["kind"]))

    def impersonating(self, user: str, groups: Any = ()) -> SimKube:
        return self

    async def apply(
        self, obj: Mapping[str, Any], *, field_manager: str = "", force: bool = False,
        dry_run: bool = False, resource: Resource | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        live = _copy(obj)
        key = ObjectKey.of(live)
        old = self.objects.get(key)
        live["metadata"]["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        if self.failing:
            cond = {"type": "Stalled", "status": "True", "message": "simulated failure"}
            live["status"] = {"conditions": [cond]}
        if old is not None:
            live["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            if live == old:
                # a server-side apply that changes nothing is no write: the API server keeps
                # the resourceVersion and sends no watch event (an intent applied again, its
                # first report's ack lost, must not look newer than the live object's fact)
                return _copy(old)
        live["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[key] = live
        self.applied[key] = manifest_sha(obj).hex()
        self.events.put_nowait(WatchEvent("MODIFIED" if old else "ADDED", _copy(live)))
        return live

    async def get(self, res: Resource, name: str, namespace: str = "") -> dict[str, Any]:
        for key, obj in self.objects.items():
            if (key.kind, key.namespace, key.name) == (res.kind, namespace, name):
                return _copy(obj)
        raise NotFound(f"{res.kind}/{namespace}/{name}", 404, "NotFound", "not found")

    async def delete(
        self, res: Resource, name: str, namespace: str = "", *, resource_version: str | None = None,
        uid: str | None = None, propagation: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        live = await self.get(res, name, namespace)
        key = ObjectKey.of(live)
        del self.objects[key]
        self.applied.pop(key, None)
        rv = str(next(self.rv))
        live["metadata"]["resourceVersion"] = rv
        self.events.put_nowait(WatchEvent("DELETED", _copy(live)))
        return live

    async def stream(self) -> AsyncIterator[WatchEvent]:
        """The watch stream of every object this cluster stores or deletes."""
        while True:
            yield await self.events.get()

    async def watch(self) -> None:
        """The real watcher's handling of its watch stream: bursts, one message each."""
        async for burst in bursts(self.stream()):
            try:
                await self.watcher.handle_burst(burst)
            except Exception:  # noqa: BLE001 - a real watcher would relist and publish again
                self.errors += len(burst)


class CountingReporter(Reporter):
    """The applier's reporter, remembering the manifest SHA of each applied fact it published."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.reported: dict[ObjectKey, str] = {}

    async def final(self, intent: ApplyIntent | DeleteIntent, claim: Claim, o: Outcome) -> None:
        await super().final(intent, claim, o)
        if o.applied is not None:
            if o.applied.deleted:
                self.reported.pop(intent.key, None)
            else:
                self.reported[intent.key] = o.applied.manifest_sha


class SimCluster:
    """One cluster's watcher and applier, as the bus sees them."""

    def __init__(
        self, nc: bus.Connection, js: bus.JetStream, pub: bus.Publisher, name: str, *,
        failing: bool,
    ) -> None:  # fmt: skip
        self.js = js
        self.pub = pub
        self.name = name
        self.watcher = Watcher(
            settings=WatcherSettings(cluster=name, watcher_id=f"{name}-watcher"),
            js=js,
            kube=None,  # type: ignore[arg-type]  # the watcher's watches are SimKube's events
            publisher=pub,
        )
        self.watcher.ready.set()
        self.kube = SimKube(self.watcher, failing=failing)
        self.applier = Applier(
            settings=ApplierSettings(cluster=name, applier_id=f"{name}-applier"),
            nc=nc,
            js=js,
            kube=self.kube,  # type: ignore[arg-type]
            publisher=pub,
        )
        self.reporter = CountingReporter(
            publisher=pub, js=js, applier_id=f"{name}-applier", cluster=name
        )
        self.applier.report = self.reporter
        self.handler_errors = 0

    async def serve(self, stopping: asyncio.Event) -> list[asyncio.Task[None]]:
        self.applier.stopping = stopping
        return [
            asyncio.create_task(self.applier.run()),
            asyncio.create_task(
                members.announce(
                    self.pub,
                    cluster=self.name,
                    role="watcher",
                    member_id=f"{self.name}-watcher",
                    state=self.watcher.synced,
                )
            ),
            asyncio.create_task(self._follow_bundles()),
            asyncio.create_task(self.kube.watch()),
        ]

    async def _follow_bundles(self) -> None:
        """The watcher's follower of the cluster's bundles (``Watcher.run``); a simulated
        cluster has no kinds to start watching, so it only reads them."""
        follower = bus.Follower(
            self.js,
            bus.BUNDLES,
            cluster_filter("bundle", self.name),
            idle_heartbeat=bus.QUIET_HEARTBEAT,
        )
        async for msg in follower.messages():
            try:
                decode(msg.data, Bundle)
            except WireError:
                continue

    def counters(self, expected: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, int]:
        a = self.applier
        return {
            "applied": a.applied,
            "superseded": a.superseded,
            "fenced": a.fenced,
            "failed": a.failed,
            "redelivered_done": a.redelivered_done,
            "server_facts": self.watcher.published,
            "watcher_errors": self.kube.errors,
            "objects_applied": objects_applied(
                self.kube.objects, self.kube.applied, self.reporter.reported, expected
            ),
        }


def _heartbeats_on(beats: bus.Publisher) -> None:
    """Every heartbeat of this process (watchers' and appliers', ``members.announce``) goes out
    through ``beats``: a real member has a connection of its own, so its heartbeat never waits
    behind another cluster's facts; here 500 clusters share one publisher, and at 1,000
    clusters their heartbeats queued 20-30 s behind the facts — stale, as if nobody served
    the clusters (measured with a subscriber on ``driftbus.member.>``, 2026-11-29)."""
    announce = members.announce

    async def on_own_connection(_: bus.Publisher, **kwargs: Any) -> None:
        await announce(beats, **kwargs)

    members.announce = on_own_connection  # type: ignore[assignment]


FREEZE_EVERY = 2.0
"""Seconds between two freezes of the simulator's heap (``_one_heap_of_many``)."""


async def _one_heap_of_many(stopping: asyncio.Event) -> None:
    """What this process holds is kept out of the garbage collector's full walks, every
    ``FREEZE_EVERY`` seconds (after a young collection, so fresh cycles are not kept).

    A real member's heap is one cluster's; this one is 500 clusters' (their simulated API
    servers' objects, their appliers and watchers), so each full collection walked 500 members'
    heaps at once: measured on 2026-11-30 with ``gc.callbacks``, collections took about as
    long as the process's whole CPU time in a 1,000-cluster rollout (wall clock, on a
    saturated machine) — the bench measured the simulator's collector, not driftbus."""
    while not stopping.is_set():
        gc.collect(1)
        gc.freeze()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), FREEZE_EVERY)


async def main(args: argparse.Namespace) -> None:
    nc = await nats.connect(args.nats, max_reconnect_attempts=-1, pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    pub = bus.Publisher(js, max_inflight=2048)
    beats_nc = await nats.connect(args.nats, max_reconnect_attempts=-1)
    _heartbeats_on(bus.Publisher(beats_nc.jetstream(), max_inflight=2048))
    names = [cluster_name(i) for i in range(args.first, args.first + args.count)]
    sims = [SimCluster(nc, js, pub, n, failing=fails(n, args.fail_share)) for n in names]
    for i, sim in enumerate(sims):
        labels = {"sim": "true", "zone": f"z{(args.first + i) % 3}"}
        for attempt in range(5):  # a JetStream API busy with thousands of members: ask again
            try:
                await register(
                    js, sim.name, labels=labels, kube_version="v1.36.3-sim", by="fleetsim"
                )
                break
            except (TimeoutError, nats.errors.TimeoutError):
                if attempt == 4:
                    raise
                await asyncio.sleep(1.0)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    tasks = list(
        itertools.chain.from_iterable(await asyncio.gather(*(s.serve(stopping) for s in sims)))
    )
    tasks.append(asyncio.create_task(_one_heap_of_many(stopping)))
    await asyncio.gather(*(s.applier.bound.wait() for s in sims))
    print("ready", flush=True)
    await stopping.wait()
    await asyncio.sleep(0)  # the consumers see ``stopping`` and finish what they started
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    expected = {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m for m in configmaps(args.objects)
    }
    total: collections.Counter[str] = collections.Counter()
    for s in sims:
        total.update(s.counters(expected))
    total["publish_errors"] = pub.errors
    await asyncio.to_thread(Path(args.stats).write_text, json.dumps(dict(total)))
    await nc.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleetsim_members")
    p.add_argument("--nats", required=True)
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--objects", type=int, required=True, help="ConfigMaps the bundle holds")
    p.add_argument("--fail-share", type=float, default=0.0)
    p.add_argument("--stats", required=True, help="where the counters go (JSON) on SIGTERM")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    heap.collect_young_rarely()  # as the real watcher and applier do (``cli.run.start``)
    asyncio.run(main(parse(sys.argv[1:])))
