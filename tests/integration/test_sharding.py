"""Scale-out on the real stack: three clusters, planner replicas sharing them through KV claims,
take-over of a killed replica, rebalance to a new one, fencing of a deposed one, and two
watchers per cluster. Every write is counted by the clusters' own API servers."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.fleet import Fleet
from harness.pipeline import StatusWatch, settle, until_planner_ready, write_counts, writes_since
from schemas.codec import decode, encode
from schemas.messages import ApplyIntent, DeleteIntent, Intent, IntentBatch, ObjectPhase, Queued
from schemas.subjects import bundle_subject, encode_token, object_subject
from services.common import bus
from services.common.bus import Claim
from services.controlplane import servers
from services.kube import KubeClient
from services.kube.discovery import Resource
from services.planner.sharding.bucket import ShardBucket
from services.planner.sharding.claims import CLAIMS_AT_ONCE, Coordinator

from ..conftest import unique_name
from .test_cli import driftbus

pytestmark = [pytest.mark.scale, pytest.mark.timeout(420)]

INTERVAL, TIMEOUT = 0.5, 3.0
"""Heartbeat settings of these tests' planners: a take-over must come within 3 × TIMEOUT."""
APPLIER_CONCURRENCY = 16
CM = Resource("", "v1", "ConfigMap", "configmaps", True)


def configmaps(ns: str, n: int, value: str, *, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": ns},
            "data": {"value": value},
        }
        for i in range(start, start + n)
    ]


class Site:
    """One cluster of the fleet as a test sees it: its name, client, namespace and status."""

    def __init__(self, name: str, cluster: servers.Cluster, kube: KubeClient) -> None:
        self.name = name
        self.cluster = cluster
        self.kube = kube
        self.namespace = ""
        self.bundle = unique_name("app")
        """Unique per test: the clusters are shared, and a bundle prunes what carries its name."""
        self.watch = StatusWatch()

    @property
    def api(self) -> servers.KubeAPIServer:
        return self.cluster.apiserver

    async def values(self) -> dict[str, str]:
        items, _ = await self.kube.list(CM, namespace=self.namespace)
        return {
            o["metadata"]["name"]: o.get("data", {}).get("value", "")
            for o in items
            if o["metadata"]["name"].startswith("cm-")
        }


@pytest.fixture
async def fleet(
    stack: servers.Stack,
    second_cluster: servers.Cluster,
    third_cluster: servers.Cluster,
    tmp_path: Path,
) -> AsyncIterator[tuple[Fleet, list[Site], NATS]]:
    clusters = [stack.cluster, second_cluster, third_cluster]
    names = [unique_name(f"k{i}") for i in range(3)]
    nats_server = servers.NatsServer(tmp_path / "nats")
    nats_server.start()
    f = Fleet(
        clusters=clusters,
        names=names,
        nats=nats_server,
        workdir=tmp_path,
        heartbeat_interval=INTERVAL,
        heartbeat_timeout=TIMEOUT,
    )
    f.set_log_level("INFO")
    sites = []
    nc = await nats.connect(nats_server.client_url)
    try:
        for name, cluster in zip(names, clusters, strict=True):
            kube = await KubeClient.from_kubeconfig(str(cluster.kubeconfig))
            site = Site(name, cluster, kube)
            site.namespace = unique_name("shard")
            await kube.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": site.namespace}},
                field_manager="driftbus-tests",
            )
            await site.watch.start(nc, name, site.bundle)
            sites.append(site)
        yield f, sites, nc
    finally:
        f.stop_all()
        await nc.drain()
        for s in sites:
            await s.kube.close()
        nats_server.stop()


def cm_writes(api: servers.KubeAPIServer, before: collections.Counter[Any]) -> int:
    """ConfigMap writes only: the third API server is fresh when the first test runs."""
    return writes_since(api, before, {"configmaps"})


def _intent(data: bytes) -> ApplyIntent | DeleteIntent:
    return decode(data, Intent)  # type: ignore[arg-type]


async def until_claims(
    f: Fleet,
    nc: NATS,
    pred: Callable[[dict[str, Claim]], bool],
    within: float,
) -> dict[str, Claim]:
    deadline = time.monotonic() + within
    while True:
        claims = await f.claims(nc.jetstream())
        if pred(claims):
            return claims
        assert time.monotonic() < deadline, f"claims never matched: {claims}\n{f.logs()}"
        await asyncio.sleep(0.1)


def loads(claims: dict[str, Claim]) -> collections.Counter[str]:
    return collections.Counter(c.holder for c in claims.values() if c.holder)


async def publish_all(
    f: Fleet, sites: list[Site], nc: NATS, n: int, revision: str
) -> dict[str, collections.Counter[Any]]:
    before = {s.name: write_counts(s.api) for s in sites}
    for s in sites:
        await f.pipelines[s.name].publish(
            nc.jetstream(), s.bundle, configmaps(s.namespace, n, revision), revision=revision
        )
    return before


async def test_planners_share_clusters_evenly_and_take_over_a_killed_one(
    fleet: tuple[Fleet, list[Site], NATS], measured: Any
) -> None:
    f, sites, nc = fleet
    n = 400
    f.start_cluster_services()
    planners = ["planner-a", "planner-b", "planner-c"]
    for p in planners:
        f.start_planner(p)
    before = await publish_all(f, sites, nc, n, "r1")
    for s in sites:
        await s.watch.ready("r1", 120, f.logs)
    claims = await until_claims(f, nc, lambda c: len(c) == 3, 10)
    # evenly: one cluster per replica, every replica has one
    assert sorted(loads(claims).values()) == [1, 1, 1], claims
    await settle()
    for s in sites:
        assert cm_writes(s.api, before[s.name]) == n, s.name

    # A new revision everywhere; the replica planning the first cluster dies while it is
    # being applied there.
    victim_site = sites[0]
    victim = claims[victim_site.name].holder
    before = await publish_all(f, sites, nc, n, "r2")
    deadline = time.monotonic() + 60
    while not any(
        o.revision == "r2" and o.phase is ObjectPhase.APPLIED for o in victim_site.watch.objects
    ):
        assert time.monotonic() < deadline, f"r2 never started applying\n{f.logs()}"
        await asyncio.sleep(0.01)
    f.planners[victim].kill()
    killed = time.monotonic()
    at_kill = sum(
        1
        for o in victim_site.watch.objects
        if o.revision == "r2" and o.phase is ObjectPhase.APPLIED
    )
    # and a change made while nobody plans that cluster: it waits in the stream
    await f.pipelines[victim_site.name].publish(
        nc.jetstream(),
        victim_site.bundle,
        configmaps(victim_site.namespace, n, "r3"),
        revision="r3",
    )
    taken = await until_claims(
        f,
        nc,
        lambda c: c[victim_site.name].holder not in ("", victim),
        3 * TIMEOUT,
    )
    took = time.monotonic() - killed
    await victim_site.watch.ready("r3", 120, f.logs)
    for s in sites[1:]:
        await s.watch.ready("r2", 120, f.logs)
    ready = time.monotonic() - killed
    # nothing lost: every object carries the last revision of its cluster
    assert await victim_site.values() == {f"cm-{i}": "r3" for i in range(n)}
    for s in sites[1:]:
        assert await s.values() == {f"cm-{i}": "r2" for i in range(n)}, s.name
    await settle()
    writes = {s.name: cm_writes(s.api, before[s.name]) for s in sites}
    # the surviving replicas' clusters: exactly one write per change
    assert [writes[s.name] for s in sites[1:]] == [n, n], writes
    # the victim's cluster: at most one write per object per revision (an r2 intent still
    # queued is superseded by r3, or fenced), plus what its applier had in flight when the
    # claim moved (the documented bound)
    victim_writes = writes[victim_site.name]
    assert n <= victim_writes <= 2 * n + APPLIER_CONCURRENCY, writes
    assert sorted(loads(taken).values()) == [1, 2]
    for p in planners:
        if p != victim:
            assert f.planners[p].alive(), f"{p} died\n{f.logs()}"
    measured(
        f"sharding: 3 clusters x {n} objects, 3 planners 1/1/1; planner SIGKILLed mid-revision "
        f"(r2 at {at_kill}/{n} applied), r3 published while its cluster had no planner: claim "
        f"taken over {took:.1f}s after the kill (bound 3 x {TIMEOUT:.0f}s), r3 Ready "
        f"{ready:.1f}s after it, lost 0, {victim_writes} writes for r2+r3 in its cluster "
        f"(bound {2 * n + APPLIER_CONCURRENCY}), exactly {n} in each other cluster"
    )


async def test_a_new_planner_takes_its_share_without_restarting_the_others(
    fleet: tuple[Fleet, list[Site], NATS], measured: Any
) -> None:
    f, sites, nc = fleet
    n = 100
    f.start_cluster_services()
    for p in ("planner-a", "planner-b"):
        f.start_planner(p)
    await publish_all(f, sites, nc, n, "r1")
    for s in sites:
        await s.watch.ready("r1", 120, f.logs)
    claims = await until_claims(f, nc, lambda c: sorted(loads(c).values()) == [1, 2], 10)
    pids = {p: proc.pid for p, proc in f.planners.items()}
    await settle()
    before = {s.name: write_counts(s.api) for s in sites}

    f.start_planner("planner-c")
    started = time.monotonic()
    rebalanced = await until_claims(
        f, nc, lambda c: loads(c) == {"planner-a": 1, "planner-b": 1, "planner-c": 1}, 30
    )
    took = time.monotonic() - started
    # what an operator sees: the same claims, with their fencing tokens
    code, out, err = await driftbus(f.pipelines[sites[0].name], "shards", "-o", "json")
    assert code == 0, err
    shown = orjson.loads(out)
    assert {r["planner"] for r in shown["planners"]} == {"planner-a", "planner-b", "planner-c"}
    assert {r["cluster"]: (r["planner"], r["fencing_token"]) for r in shown["clusters"]} == {
        c: (cl.holder, cl.revision) for c, cl in rebalanced.items()
    }
    code, table, _ = await driftbus(f.pipelines[sites[0].name], "shards")
    assert code == 0
    assert "FENCING_TOKEN" in table
    assert "planner-c" in table
    moved = [c for c in claims if claims[c].holder != rebalanced[c].holder]
    assert len(moved) == 1, (claims, rebalanced)  # only the new replica's share moved
    for p in ("planner-a", "planner-b"):
        assert f.planners[p].alive(), f"{p} died"
        assert f.planners[p].pid == pids[p], f"{p} restarted"
    # the new owner rebuilt from the streams: all hits, no write anywhere
    await settle(3)
    for s in sites:
        assert cm_writes(s.api, before[s.name]) == 0, s.name
    # and it plans: a new revision of the moved cluster is applied exactly once per object
    site = next(s for s in sites if s.name == moved[0])
    before_r2 = write_counts(site.api)
    await f.pipelines[site.name].publish(
        nc.jetstream(), site.bundle, configmaps(site.namespace, n, "r2"), revision="r2"
    )
    await site.watch.ready("r2", 120, f.logs)
    await settle()
    assert cm_writes(site.api, before_r2) == n
    measured(
        f"sharding: a third planner joined 2 (loads 2/1): rebalanced to 1/1/1 in {took:.1f}s, "
        "1 cluster moved, no replica restarted, 0 writes; its next revision applied by the "
        "new replica with exactly 1 write per object"
    )


async def test_a_deposed_planners_late_intents_are_rejected(
    fleet: tuple[Fleet, list[Site], NATS], measured: Any
) -> None:
    f, sites, nc = fleet
    site = sites[0]
    n = 20
    pipeline = f.pipelines[site.name]
    pipeline.start("watcher")
    pipeline.start("applier")
    sent: list[bytes] = []

    async def on_intent(msg: Any) -> None:
        queued = decode(msg.data, Queued)  # type: ignore[var-annotated,arg-type]
        if isinstance(queued, IntentBatch):  # each intent of a batch, as it would be alone
            sent.extend(encode(i) for i in queued.intents)
        else:
            sent.append(msg.data)

    await nc.subscribe(f"driftbus.intent.{encode_token(site.name)}.>", cb=on_intent)
    first = f.start_planner("planner-a")
    await pipeline.publish(
        nc.jetstream(), site.bundle, configmaps(site.namespace, n, "r1"), revision="r1"
    )
    await site.watch.ready("r1", 60, f.logs)
    f.start_planner("planner-b")  # a stand-by: one cluster, so planner-a keeps it
    # up and heartbeating before planner-a freezes: the bound below is on the take-over, not on
    # a Python process starting on a busy machine (CI's full run took longer than the bound)
    await until_planner_ready(nc.jetstream(), planner_id="planner-b")
    old = [i for i in map(_intent, sent) if i.planner == "planner-a"]
    assert len(old) == n
    assert all(i.fencing_token > 0 for i in old)

    # planner-a freezes (a long GC pause, a partition): planner-b takes the cluster over
    os.kill(first.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        taken = await until_claims(f, nc, lambda c: c[site.name].holder == "planner-b", 3 * TIMEOUT)
        took = time.monotonic() - stopped
        assert taken[site.name].revision > old[0].fencing_token
        await pipeline.publish(
            nc.jetstream(), site.bundle, configmaps(site.namespace, n, "r2"), revision="r2"
        )
        await site.watch.ready("r2", 60, f.logs)
        await settle()
    finally:
        woke = len(sent)
        os.kill(first.pid, signal.SIGCONT)  # it wakes up with r2 in its buffers
    before = write_counts(site.api)
    # its intents of r1, arriving late: each would put r1 back
    late = [d for d in sent if _intent(d).planner == "planner-a"]
    assert len(late) == n
    for i, data in enumerate(late):
        intent = _intent(data)
        await nc.jetstream().publish(
            object_subject("intent", intent.cluster, intent.key),
            data,
            headers={"Nats-Msg-Id": f"late-{i}"},
        )
    await settle(3 * INTERVAL + 2.0)
    assert cm_writes(site.api, before) == 0
    assert await site.values() == {f"cm-{i}": "r2" for i in range(n)}
    applier_log = pipeline.procs["applier"].log_path.read_text()
    dropped = applier_log.count("dropping intent")
    # what planner-a itself sent after waking (its self-fence should hold it back) and the late
    # intents: the applier dropped every one
    after_wake = sum(
        1 for i in map(_intent, sent[woke:]) if i.planner == "planner-a" and i.revision == "r2"
    )
    assert dropped == n + after_wake, applier_log[-3000:]
    assert first.alive(), "the deposed planner must carry on (as a stand-by), not crash"
    planner_a_log = first.log_path.read_text()
    assert "deposed" in planner_a_log or "no longer" in planner_a_log, planner_a_log[-3000:]
    measured(
        f"sharding: planner SIGSTOPped, claim taken over in {took:.1f}s; {n} late intents of "
        f"the deposed planner (+{after_wake} it sent on waking) dropped by the applier "
        "(fencing token), 0 writes"
    )


async def test_two_watchers_per_cluster_make_exactly_the_writes_of_one(
    fleet: tuple[Fleet, list[Site], NATS], measured: Any
) -> None:
    f, sites, nc = fleet
    one, two = sites[0], sites[1]
    n = 100
    for site, watchers in ((one, 1), (two, 2)):
        p = f.pipelines[site.name]
        for i in range(watchers):
            p.start("watcher", f"watcher-{i}")
        p.start("applier")
    f.start_planner("planner-a")
    pair = [one, two]
    before = {s.name: write_counts(s.api) for s in pair}
    for s in pair:
        await f.pipelines[s.name].publish(
            nc.jetstream(),
            s.bundle,
            configmaps(s.namespace, n, "r1"),
            revision="r1",
            force=True,  # the intruder below takes field ownership; force takes it back
        )
    for s in pair:
        await s.watch.ready("r1", 120, f.logs)
    # out of band: 5 objects changed, 5 deleted, in both clusters (10 writes of the test's own)
    for s in pair:
        for i in range(5):
            await s.kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": f"cm-{i}", "namespace": s.namespace},
                    "data": {"value": "tampered"},
                },
                field_manager="intruder",
                force=True,
            )
            await s.kube.delete(CM, f"cm-{50 + i}", s.namespace)
    for s in pair:
        deadline = time.monotonic() + 60
        while await s.values() != {f"cm-{i}": "r1" for i in range(n)}:
            assert time.monotonic() < deadline, f"{s.name} never restored\n{f.logs()}"
            await asyncio.sleep(0.2)
    # r2: 10 objects changed, the last 10 removed (pruned)
    for s in pair:
        manifests = configmaps(s.namespace, n - 10, "r1")
        for m in manifests[:10]:
            m["data"]["value"] = "r2"
        await f.pipelines[s.name].publish(
            nc.jetstream(), s.bundle, manifests, revision="r2", force=True
        )
    for s in pair:
        await s.watch.ready("r2", 120, f.logs)
    await settle(3)
    writes = {s.name: cm_writes(s.api, before[s.name]) for s in pair}
    expected = n + 10 + 10 + 10 + 10  # r1, corrections, r2 changes, prunes, the test's own
    assert writes[one.name] == writes[two.name] == expected, writes
    measured(
        f"active-active watchers: {n} objects, 10 drifted, r2 with 10 changed + 10 pruned: "
        f"{writes[one.name]} API writes with 1 watcher, {writes[two.name]} with 2 "
        f"(expected {expected})"
    )


async def test_both_planners_killed_at_once_serve_every_cluster_again(
    fleet: tuple[Fleet, list[Site], NATS],
) -> None:
    """One replica holds every claim (the other died); then both are killed at once and
    restarted under their names. The first back finds its previous run's claims: it runs its
    share and must free the rest, or the other live replica may never take them
    (``rules.orphaned``): on the loaded CI machine a cluster stayed unplanned for 8 minutes."""
    f, sites, nc = fleet
    f.start_cluster_services()
    for p in ("planner-a", "planner-b"):
        f.start_planner(p)
    await publish_all(f, sites, nc, 3, "r0")  # the clusters are known by their bundles
    await until_claims(f, nc, lambda c: len(loads(c)) == 2 and len(c) == 3, 60)
    f.planners["planner-b"].kill()
    await until_claims(f, nc, lambda c: loads(c) == {"planner-a": 3}, 30)
    f.planners["planner-a"].kill()
    for p in ("planner-a", "planner-b"):
        await asyncio.to_thread(f.planners[p].proc.wait, 30)
        f.start_planner(p)
    claims = await until_claims(
        f, nc, lambda c: len(loads(c)) == 2 and sum(loads(c).values()) == 3, 30
    )
    assert sorted(loads(claims).values()) == [1, 2], claims
    await publish_all(f, sites, nc, 3, "r1")
    for s in sites:
        await s.watch.ready("r1", 60, f.logs)


async def test_a_replica_claims_many_clusters_with_several_claims_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims one after the other were the time a fleet took to be claimed (a round trip each:
    1,500 clusters a replica took two minutes in fleet-sim, after a restart as on a rollout).
    A replica with 100 clusters to claim has several claims in flight at once, never more
    than ``CLAIMS_AT_ONCE``, and claims every one of them."""
    server = servers.NatsServer(tmp_path / "nats")  # its own: it claims every cluster it sees
    server.start()
    nc = await nats.connect(server.client_url)
    in_flight = most = 0
    real_claim = ShardBucket.claim

    async def counted(self: ShardBucket, cluster: str, *, last: int | None) -> int | None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            return await real_claim(self, cluster, last=last)
        finally:
            in_flight -= 1

    monkeypatch.setattr(ShardBucket, "claim", counted)
    started: dict[str, int] = {}

    async def start(cluster: str, token: int) -> None:
        started[cluster] = token

    async def stop(cluster: str) -> None:
        pass  # the replica's own leaving, at the end

    try:
        js = nc.jetstream()
        await bus.ensure_streams(js)
        names = [f"many-{i:03d}" for i in range(100)]
        for name in names:
            await js.publish(bundle_subject(name, "app"), b"{}")
        coordinator = Coordinator(
            js=js, planner_id="p0", interval=INTERVAL, timeout=TIMEOUT, start=start, stop=stop
        )
        task = asyncio.create_task(coordinator.run())
        try:
            async with asyncio.timeout(60):
                while len(started) < len(names):  # noqa: ASYNC110 - started by callbacks
                    await asyncio.sleep(0.1)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert sorted(started) == names
        assert 1 < most <= CLAIMS_AT_ONCE, f"{most} claims in flight at most"
    finally:
        await nc.close()
        server.stop()
