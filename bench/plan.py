"""Scenario `plan`: how fast ``driftbus plan`` answers from the bus (issue 45).

A real nats-server is seeded with the recorded state a fleet would have written — the cluster
registry (``registry.register``, as each watcher does), one watcher heartbeat per cluster, and
per object the applied fact and the watcher's server fact (``AppliedEvent`` / ``ServerEvent``
through ``schemas.codec.encode`` on the per-object subjects the applier and the watcher publish
to, through the bus's ``Publisher``) — for 1,000 clusters × 100 objects (the ``fleet-sim``
ConfigMaps: 94 unchanged, 3 changed, 2 drifted, 1 never applied, and 2 objects left out of the
revision: prune). Running the full ``fleet-sim`` at 1,000 clusters to produce that state is too
heavy for this machine; the manifest SHA of each fact is the one the planner's own intake gives
the object (``verdict.rows`` on an empty state), so the plan decides exactly what it would have
after a real rollout. A second bundle holds 1,000 objects on one cluster.

Measured, in this process, from the first NATS read to the typed document (connect excluded),
as wall time and as this process's CPU time (the machine is shared: its load stretches the first):
the fleet plan (``gather.fleet_plan`` + ``fleetview.document``, selector over every cluster,
steps ``1%``, ``10%``) and a one-cluster plan without ``--diff`` (``explain.plan`` with no
cluster to ask + ``render.document``). The CLI's own start (≈ 0.5 s of imports) is reported as
a parameter, measured on ``driftbus plan --help``. Peers are the targets (5 s, 0.2 s).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fleetsim_members import cluster_name, configmaps
from bench.report import Result
from schemas.codec import encode
from schemas.messages import AppliedEvent, Bundle, BundleOptions, MemberHeartbeat, ServerEvent
from schemas.subjects import member_subject, object_subject
from schemas.tenants import TenantPolicy
from services.cli.plan import fleetview
from services.cli.plan import render as plan_render
from services.cli.plan.explain import plan as plan_one
from services.cli.plan.fleet import Targeting
from services.cli.plan.gather import fleet_plan
from services.cli.plan.verdict import rows, scopes_of
from services.clusters import registry
from services.common import bus
from services.controlplane import servers
from services.core.sha import manifest_sha
from services.inputs.documents import Loaded, Manifest
from services.planner.rule import checkpoint
from services.planner.rule.facts import rebuilt

FLEET_BUNDLE, ONE_BUNDLE, ONE_CLUSTER = "plan-fleet", "plan-one", "sim-one"
NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def _revision(objects: int) -> list[dict[str, Any]]:
    return configmaps(objects)


def _intake(bundle: str, cluster: str, manifests: list[dict[str, Any]]) -> list[tuple[Any, bytes]]:
    """Each object's key and manifest SHA as the planner takes it in (the plan's own intake)."""
    b = Bundle(cluster=cluster, bundle=bundle, revision="plan", options=BundleOptions())
    got = rows(b, manifests, {}, scopes_of((), manifests), TenantPolicy())
    got.sort(key=lambda r: int(r.key.name.removeprefix("cm-")))  # manifest order, not apply order
    return [(r.key, manifest_sha(r.manifest or {})) for r in got]


def _facts(bundle: str, cluster: str, objects: int) -> list[tuple[str, AppliedEvent | ServerEvent]]:
    """The APPLIED and SERVER facts of a cluster after a rollout of an earlier revision: the
    current revision's objects (``objects``), 3 of them applied from an older manifest, 2 changed
    by someone else since, 1 never applied; and 2 more objects the revision no longer has."""
    current = _intake(bundle, cluster, _revision(objects))
    extra = _intake(bundle, cluster, _revision(objects + 2))[objects:]
    out: list[tuple[str, AppliedEvent | ServerEvent]] = []
    for i, (key, sha) in enumerate([*current, *extra]):
        if i == objects - 1:
            continue  # never applied: new
        applied_sha = bytes(32) if i < 3 else sha  # an older manifest: changed
        live = f"{i:064x}"
        seen = f"{i + 1:064x}" if 3 <= i < 5 else live  # changed out of band: drift
        rv = str(1000 + i)
        out.append(
            (
                object_subject("applied", cluster, key),
                AppliedEvent(
                    cluster=cluster, key=key, bundle=bundle, revision="r1",
                    manifest_sha=applied_sha.hex(), apply_sha=live, resource_version=rv,
                    applied_at=NOW,
                ),
            )
        )  # fmt: skip
        out.append(
            (
                object_subject("server", cluster, key),
                ServerEvent(
                    cluster=cluster, key=key, resource_version=rv, bundle=bundle,
                    watcher=f"{cluster}-watcher", server_sha=seen,
                ),
            )
        )  # fmt: skip
    return out


async def _seed(js: bus.JetStream, clusters: int, objects: int, one: int) -> None:
    await bus.ensure_streams(js)
    await bus.ensure_fleet_buckets(js)
    await bus.ensure_config_buckets(js)
    await bus.ensure_tenants_bucket(js)
    pub = bus.Publisher(js, max_inflight=2048)
    names = [cluster_name(i) for i in range(clusters)]
    for n, name in enumerate(names):
        labels = {"env": "prod" if n % 10 else "canary", "region": ("eu", "us")[n % 2]}
        await registry.register(js, name, labels=labels, kube_version="v1.36.3", by="bench")
    template = _facts(FLEET_BUNDLE, names[0], objects)
    written: dict[str, list[tuple[str, AppliedEvent | ServerEvent]]] = {}
    for name in [*names, ONE_CLUSTER]:
        beat = MemberHeartbeat(cluster=name, role="watcher", id=f"{name}-watcher", at=NOW)
        await pub.publish(member_subject(name, "watcher"), encode(beat), msg_id=f"m/{name}")
        facts = (
            _facts(ONE_BUNDLE, ONE_CLUSTER, one)
            if name == ONE_CLUSTER
            else [(_renamed(s, names[0], name), _moved(f, name)) for s, f in template]
        )
        for subject, fact in facts:
            await pub.publish(subject, encode(fact), msg_id=f"{subject}/1")
        written[name] = facts
    await pub.flush()
    # each cluster's checkpoint, as its planner writes one a few seconds after the rollout's
    # facts: the entries they make (a rebuild of them), up to the streams' last sequences
    seqs = {"applied": await bus.last_sequence(js, bus.APPLIED)}
    seqs["server"] = await bus.last_sequence(js, bus.SERVER)
    for name, facts in written.items():
        grouped: dict[Any, list[Any]] = {}
        for _, fact in facts:
            grouped.setdefault(fact.key, []).append(fact)
        entries = [(k, rebuilt(k, f)) for k, f in grouped.items()]
        for subject, data in checkpoint.parts(name, entries, seqs, now=NOW):
            await pub.publish(subject, data, msg_id=subject)
    await pub.flush()


def _renamed(subject: str, old: str, new: str) -> str:
    return subject.replace(f".{old}.", f".{new}.", 1)


def _moved(fact: AppliedEvent | ServerEvent, cluster: str) -> AppliedEvent | ServerEvent:
    import msgspec

    return msgspec.structs.replace(fact, cluster=cluster)


def _loaded(manifests: list[dict[str, Any]]) -> Loaded:
    return Loaded([Manifest(m, f"bench[{i}]") for i, m in enumerate(manifests)], source="bench")


async def _measure(url: str, objects: int, one: int, repetitions: int) -> dict[str, list[float]]:
    nc = await bus.connect(bus.NatsSettings(nats_url=url), name="bench")
    js = nc.jetstream()
    t = Targeting(FLEET_BUNDLE, _revision(objects), selector="env", steps=["1%", "10%"])
    out: dict[str, list[float]] = {
        "fleet": [], "one": [], "fleet-cpu": [], "one-cpu": [], "facts": [], "facts-cpu": []
    }  # fmt: skip
    try:
        for _ in range(repetitions):
            start, cpu = time.perf_counter(), time.process_time()
            plans, _ = await fleet_plan(js, t, NOW)
            doc = fleetview.document(plans, t, unregistered=[], diff=False)
            out["fleet"].append(time.perf_counter() - start)
            out["fleet-cpu"].append(time.process_time() - cpu)
            assert len(doc.clusters) == len(plans)
            s = doc.summary
            assert (s.new, s.changed, s.drift, s.prune) == (
                len(plans), 3 * len(plans), 2 * len(plans), 2 * len(plans),
            ), s  # fmt: skip
            start, cpu = time.perf_counter(), time.process_time()
            got = await plan_one(
                js, None, cluster=ONE_CLUSTER, bundle=ONE_BUNDLE, loaded=_loaded(_revision(one))
            )
            one_doc = plan_render.document(got, cluster=ONE_CLUSTER, bundle=ONE_BUNDLE, force=False)
            out["one"].append(time.perf_counter() - start)
            out["one-cpu"].append(time.process_time() - cpu)
            assert one_doc.summary.apply == 6, one_doc.summary
            assert one_doc.summary.delete == 2, one_doc.summary
            # the same fleet plan from every object's facts (a fleet with no checkpoints yet)
            start, cpu = time.perf_counter(), time.process_time()
            plans_from_facts, _ = await fleet_plan(js, t, NOW, checkpoints=False)
            facts_doc = fleetview.document(plans_from_facts, t, unregistered=[], diff=False)
            out["facts"].append(time.perf_counter() - start)
            out["facts-cpu"].append(time.process_time() - cpu)
            assert facts_doc.summary == doc.summary, (facts_doc.summary, doc.summary)
    finally:
        await nc.drain()
    return out


def _cli_start() -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "services.cli.main", "plan", "--help"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def run(*, clusters: int = 1000, objects: int = 100, repetitions: int = 3) -> list[Result]:
    one = 1000
    with tempfile.TemporaryDirectory(prefix="bench-plan-") as tmp:
        nats_server = servers.NatsServer(Path(tmp) / "nats")
        nats_server.start()
        try:
            seeded = time.perf_counter()

            async def seed() -> None:
                nc = await bus.connect(
                    bus.NatsSettings(nats_url=nats_server.client_url), name="bench"
                )
                try:
                    await _seed(nc.jetstream(), clusters, objects, one)
                finally:
                    await nc.drain()

            asyncio.run(seed())
            seeded = time.perf_counter() - seeded
            got = asyncio.run(_measure(nats_server.client_url, objects, one, repetitions))
        finally:
            nats_server.stop()
    load = os.getloadavg()
    params = {
        "clusters": clusters,
        "objects_per_cluster": objects,
        "one_cluster_objects": one,
        "state": "seeded: registry, heartbeats, applied + server fact per object, a checkpoint "
        "per cluster at the streams' last sequences (not fleet-sim)",
        "seed_seconds": round(seeded, 1),
        "cli_start_seconds": round(_cli_start(), 3),
        "load_average": [round(x, 2) for x in load],
    }

    def against(name: str, which: str, seconds: float, target: str) -> Result:
        return Result(
            name=name,
            unit="s",
            driftbus_samples=got[which],
            peer_name="target",
            peer_samples=[seconds] * repetitions,
            parameters=params,
            higher_is_better=False,
            target=target,
        )

    return [
        against(
            "plan-fleet-1000x100",
            "fleet",
            5.0,
            "ratio ≤ 1 (a fleet plan of 1,000 clusters × 100 objects in ≤ 5 s, no API call)",
        ),
        against(
            "plan-fleet-1000x100-from-facts",
            "facts",
            5.0,
            "reported: the same plan read from every object's facts, not the clusters' "
            "checkpoints (a fleet whose planners have written none yet: before an upgrade's "
            "first facts)",
        ),
        against(
            "plan-one-cluster-1000",
            "one",
            0.2,
            "ratio ≤ 1 (one cluster, 1,000 objects, no --diff, in ≤ 0.2 s)",
        ),
        *(
            Result(
                name=f"{name}-cpu-seconds",
                unit="s",
                driftbus_samples=got[f"{which}-cpu"],
                peer_name="wall time",
                peer_samples=got[which],
                parameters=params,
                higher_is_better=False,
                target="reported: the plan's own CPU (what the machine's load does not stretch)",
            )
            for name, which in (("plan-fleet-1000x100", "fleet"), ("plan-one-cluster-1000", "one"))
        ),
    ]
