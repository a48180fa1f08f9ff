"""Scenario `fleet`: 5 clusters × 1,000 objects planned by 3 sharded planners (issue 7).

Five independent etcd + kube-apiserver pairs share one nats-server; each cluster has a watcher
and an applier. Per repetition, both configurations run on a fresh nats-server, interleaved:

* **3 planners** (the driftbus figure): the clusters are shared through the shards bucket
  (2/2/1), each replica plans its own;
* **1 planner** (the peer): one replica plans all five.

Measured from the moment all five bundles are published until all five are Ready: the wall time
and each planner's CPU seconds (from /proc). The ratio of the busiest replica's CPU to the single
planner's is the load one replica carries. The heartbeat settings are the shipped defaults, so
the time includes discovering the new clusters (≤ one interval) and claiming them.
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats

from bench.report import Result
from bench.stack import cpu_seconds
from harness.fleet import Fleet, clusters
from harness.pipeline import StatusWatch, write_requests
from services.controlplane import servers
from services.planner.service import PlannerSettings

CLUSTERS = 5
_KINDS = {"namespaces", "configmaps", "secrets"}
"""What the bundles hold: only these writes are counted (fresh API servers write their own)."""
DEFAULTS = PlannerSettings()


def bundle_objects(namespace: str, n: int, seed: int) -> list[dict[str, Any]]:
    """ConfigMaps and Secrets (Ready once applied: no controllers run in this stack)."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    out: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    ]
    for i in range(n - 1):
        meta = {"name": f"obj-{i}", "namespace": namespace, "labels": {"app": f"a{i % 17}"}}
        if rng.random() < 0.7:
            data = {
                f"key-{k}": " ".join(rng.choices(words, k=rng.randint(3, 40))) for k in range(5)
            }
            out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
        else:
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": meta,
                    "type": "Opaque",
                    "stringData": {"password": f"{rng.getrandbits(128):032x}"},
                }
            )
    return out


async def one_run(
    cs: list[servers.Cluster],
    workdir: Path,
    planners: int,
    objects: int,
    tag: str,
    *,
    heartbeat: tuple[float, float] = (DEFAULTS.heartbeat_interval, DEFAULTS.heartbeat_timeout),
    measure: Callable[[Fleet], dict[str, float]] | None = None,
) -> tuple[float, dict[str, float], dict[str, int], dict[str, float]]:
    """One bundle of ``objects`` per cluster, planned by ``planners`` replicas: seconds until
    all are Ready, CPU seconds per planner, clusters per planner, and what ``measure`` reads
    of the running fleet then (the ``memory-fleet`` scenario's RSS)."""
    nats_server = servers.NatsServer(workdir / "nats")
    await asyncio.to_thread(nats_server.start)
    names = [f"{tag}-k{i}" for i in range(len(cs))]
    interval, timeout = heartbeat
    f = Fleet(
        clusters=cs,
        names=names,
        nats=nats_server,
        workdir=workdir,
        heartbeat_interval=interval,
        heartbeat_timeout=timeout,
    )
    f.set_log_level("INFO")
    nc = await nats.connect(nats_server.client_url)
    try:
        # A bundle prunes what carries its name: runs share the API servers, so each run's
        # bundle has its own name (or it would delete the previous run's objects).
        bundle = f"fleet-{tag}"
        watches = {}
        for name in names:
            watches[name] = StatusWatch()
            await watches[name].start(nc, name, bundle)
        f.start_cluster_services()
        for i in range(planners):
            f.start_planner(f"planner-{i}")
        await asyncio.sleep(3 * interval)  # processes up, replicas met
        writes_before = {n: write_requests(c.apiserver) for n, c in zip(names, cs, strict=True)}
        cpu_before = {p: cpu_seconds(proc.pid) for p, proc in f.planners.items()}
        started = time.monotonic()
        for i, name in enumerate(names):
            await f.pipelines[name].publish(
                nc.jetstream(),
                bundle,
                bundle_objects(f"fleet-{tag}-{i}", objects, seed=i),
                force=True,
            )
        # a guard against a run that stalls, not a target: at least 50 objects/s overall
        deadline = max(900.0, objects * len(cs) / 50)
        for name in names:
            await watches[name].ready("r1", deadline, f.logs)
        took = time.monotonic() - started
        cpu = {p: cpu_seconds(proc.pid) - cpu_before[p] for p, proc in f.planners.items()}
        await asyncio.sleep(1.0)  # late writes would show now
        for n, c in zip(names, cs, strict=True):
            delta = write_requests(c.apiserver) - writes_before[n]
            mine = {k: v for k, v in delta.items() if k[1] in _KINDS}
            writes = sum(mine.values())
            assert writes == objects, f"{n}: {writes} writes for {objects} objects: {mine}"
        claims = await f.claims(nc.jetstream())
        per_planner = {p: sum(1 for c in claims.values() if c.holder == p) for p in f.planners}
        return took, cpu, per_planner, measure(f) if measure is not None else {}
    finally:
        await nc.drain()
        await asyncio.to_thread(f.stop_all)
        await asyncio.to_thread(nats_server.stop)


async def _main(objects: int, repetitions: int, count: int) -> list[Result]:
    shares_seen: list[dict[str, int]] = []
    seconds: dict[int, list[float]] = {3: [], 1: []}
    busiest: dict[int, list[float]] = {3: [], 1: []}
    total_cpu: dict[int, list[float]] = {3: [], 1: []}
    with tempfile.TemporaryDirectory(prefix="driftbus-bench-fleet-") as tmp:
        root = Path(tmp)
        with clusters(root / "clusters", count) as cs:
            for rep in range(repetitions):
                for planners in (3, 1):
                    tag = f"r{rep}p{planners}"
                    took, cpu, shares, _ = await one_run(cs, root / tag, planners, objects, tag)
                    seconds[planners].append(took)
                    busiest[planners].append(max(cpu.values()))
                    total_cpu[planners].append(sum(cpu.values()))
                    shares_seen.append(shares)
                    print(
                        f"  fleet rep {rep + 1}/{repetitions}, {planners} planner(s): all "
                        f"{count} bundles Ready in {took:.1f}s; per planner: "
                        + ", ".join(
                            f"{p} {shares[p]} clusters {cpu[p]:.1f} cpu-s" for p in sorted(cpu)
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
    params = {
        "clusters": count,
        "clusters_per_planner": shares_seen,
        "objects_per_cluster": objects,
        "appliers_per_cluster": 1,
        "heartbeat_interval": DEFAULTS.heartbeat_interval,
        "heartbeat_timeout": DEFAULTS.heartbeat_timeout,
    }
    return [
        Result(
            f"fleet-{count}x{objects}-ready-3-planners",
            "s",
            seconds[3],
            "1 planner for all clusters",
            seconds[1],
            params,
            higher_is_better=False,
            target="reported (2 cores run all 5 API servers, etcds and services)",
        ),
        Result(
            "fleet-busiest-planner-cpu-3-planners",
            "cpu-s",
            busiest[3],
            "the single planner",
            busiest[1],
            params,
            higher_is_better=False,
            target="reported: one replica's share of the planning load",
        ),
        Result(
            "fleet-all-planners-cpu-3-planners",
            "cpu-s",
            total_cpu[3],
            "the single planner",
            total_cpu[1],
            params,
            higher_is_better=False,
            target="reported: the cost of sharding (heartbeats, claims, per-cluster followers)",
        ),
    ]


def run(*, objects: int = 1000, repetitions: int = 2, clusters: int = CLUSTERS) -> list[Result]:
    return asyncio.run(_main(objects, repetitions, clusters))
