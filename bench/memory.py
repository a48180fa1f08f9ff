"""Scenario `memory`: planner and watcher resident memory with 100,000 objects in one cluster,
and with 5 × 20,000 across clusters.

The objects of the `cold` mix are created first with raw server-side applies (16 in flight; not
measured), exactly as driftbus would write them (its field manager, its ownership label). Each
repetition then starts the services against a fresh nats-server (empty streams: the watcher must
list everything, the planner learns every object) and publishes the bundle of all of them. With
no applied fact on the fresh bus the planner applies each object once (a no-op for the API
server, which keeps the run short). The scenario waits until the bundle status counts every
object applied, checks that driftbus wrote exactly once per object, and reads each process's
resident memory (VmRSS, and the peak VmHWM) from /proc.

Across clusters (``fleet``): five etcd + kube-apiserver pairs, a watcher and an applier each,
one planner for all of them, one bundle of ConfigMaps and Secrets per cluster published at once
(the `fleet` scenario's objects). Each cluster gets exactly one write per object; the planner's
RSS and the largest watcher's are read once all five bundles are Ready.

Peers are the targets (planner ≤ 150 MiB, watcher ≤ 200 MiB); the anchor is the < 200 MiB Plural
reports for its agent (`../shared/reference`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

from bench.fleet import bundle_objects
from bench.report import Result
from bench.stack import BenchStack, labelled, manifests, rss_bytes
from harness.fleet import Fleet, clusters
from harness.pipeline import FAST_HEARTBEATS, StatusWatch, write_requests
from services.controlplane import servers

MIB = 1024 * 1024
TARGET_MIB = {"planner": 150.0, "watcher": 200.0}
FLEET_KINDS = {"namespaces", "configmaps", "secrets"}
"""What the fleet bundles hold: only these writes count (fresh API servers write their own)."""


async def _main(objects: int, repetitions: int) -> list[Result]:
    objs = manifests(objects)
    rss: dict[str, list[float]] = {"planner": [], "watcher": []}
    peak: dict[str, list[float]] = {"planner": [], "watcher": []}
    ready_s: list[float] = []
    async with BenchStack.start(objects) as b:
        print(f"  memory: creating {objects:,} objects (raw SSA) …", file=sys.stderr, flush=True)
        await b.raw_apply(labelled(objs))
        for rep in range(repetitions):
            async with b.pipeline(1, quick_claim=True) as d:
                start = time.perf_counter()
                run = await b.measured(d.cold_apply(objs))
                ready_s.append(time.perf_counter() - start)
                assert run.writes == objects, f"driftbus wrote {run.writes_by} for {objects}"
                await asyncio.sleep(2)  # let what the last events allocated settle
                pids = d.pids()
                for role in rss:
                    rss[role].append(rss_bytes(pids[role]) / MIB)
                    peak[role].append(rss_bytes(pids[role], "VmHWM") / MIB)
            print(
                f"  memory rep {rep + 1}/{repetitions}: all {objects:,} applied in "
                f"{ready_s[-1]:.1f}s; "
                + ", ".join(f"{r} {rss[r][-1]:.0f} MiB (peak {peak[r][-1]:.0f})" for r in rss),
                file=sys.stderr,
                flush=True,
            )
    params = {
        "objects": objects,
        "clusters": 1,
        "mix": "the cold mix, created beforehand exactly as driftbus applies it",
        "peak_rss_mib": {r: round(statistics.median(v), 1) for r, v in peak.items()},
        "seconds_to_all_applied": round(statistics.median(ready_s), 1),
        "anchor": "Plural's agent: < 200 MiB",
        "writes": objects,
    }
    return [
        Result(
            f"memory-{role}-rss",
            "MiB",
            rss[role],
            "target",
            [TARGET_MIB[role]] * repetitions,
            params,
            higher_is_better=False,
            target="ratio ≤ 1",
        )
        for role in rss
    ]


async def _fleet(count: int, objects: int) -> dict[str, float]:
    """One run across ``count`` clusters of ``objects`` each: RSS of the planner and of the
    largest watcher (MiB), and the seconds until every bundle was Ready."""
    with tempfile.TemporaryDirectory(prefix="driftbus-bench-memory-") as tmp:
        root = Path(tmp)
        with clusters(root / "clusters", count) as cs:
            nats_server = servers.NatsServer(root / "nats")
            await asyncio.to_thread(nats_server.start)
            names = [f"mem-k{i}" for i in range(count)]
            f = Fleet(
                clusters=cs,
                names=names,
                nats=nats_server,
                workdir=root / "run",
                heartbeat_interval=float(FAST_HEARTBEATS["DRIFTBUS_HEARTBEAT_INTERVAL"]),
                heartbeat_timeout=float(FAST_HEARTBEATS["DRIFTBUS_HEARTBEAT_TIMEOUT"]),
            )
            f.set_log_level("INFO")
            nc = await nats.connect(nats_server.client_url)
            try:
                watches = {name: StatusWatch() for name in names}
                for name, w in watches.items():
                    await w.start(nc, name, "memory")
                f.start_cluster_services()
                f.start_planner("planner-0")
                await asyncio.sleep(3)  # processes up, the planner claimed the clusters
                before = {n: write_requests(c.apiserver) for n, c in zip(names, cs, strict=True)}
                start = time.perf_counter()
                for i, name in enumerate(names):
                    await f.pipelines[name].publish(
                        nc.jetstream(), "memory", bundle_objects(f"mem-{i}", objects, seed=i)
                    )
                for w in watches.values():
                    await w.ready("r1", 1800, f.logs)
                took = time.perf_counter() - start
                for n, c in zip(names, cs, strict=True):
                    delta = write_requests(c.apiserver) - before[n]
                    writes = sum(v for k, v in delta.items() if k[1] in FLEET_KINDS)
                    assert writes == objects, f"{n}: {writes} writes for {objects} objects"
                await asyncio.sleep(2)
                watchers = [p.procs["watcher-0"].pid for p in f.pipelines.values()]
                return {
                    "planner": rss_bytes(f.planners["planner-0"].pid) / MIB,
                    "watcher": max(rss_bytes(pid) for pid in watchers) / MIB,
                    "seconds": took,
                }
            finally:
                await nc.drain()
                await asyncio.to_thread(f.stop_all)
                await asyncio.to_thread(nats_server.stop)


def run_fleet(*, objects: int = 20_000, repetitions: int = 1, clusters: int = 5) -> list[Result]:
    """Planner and largest-watcher RSS with ``clusters`` × ``objects`` (one planner)."""
    runs = [asyncio.run(_fleet(clusters, objects)) for _ in range(repetitions)]
    for r in runs:
        print(
            f"  memory-fleet {clusters}x{objects:,}: all Ready in {r['seconds']:.1f}s; "
            f"planner {r['planner']:.0f} MiB, largest watcher {r['watcher']:.0f} MiB",
            file=sys.stderr,
            flush=True,
        )
    params = {
        "clusters": clusters,
        "objects_per_cluster": objects,
        "objects": clusters * objects,
        "mix": "the fleet scenario's ConfigMaps and Secrets",
        "seconds_to_ready": [round(r["seconds"], 1) for r in runs],
        "writes_per_cluster": objects,
        "anchor": "Plural's agent: < 200 MiB",
    }
    return [
        Result(
            f"memory-fleet-{role}-rss",
            "MiB",
            [r[role] for r in runs],
            "target",
            [TARGET_MIB[role]] * repetitions,
            params,
            higher_is_better=False,
            target="ratio ≤ 1",
        )
        for role in ("planner", "watcher")
    ]


def run(*, objects: int = 100_000, repetitions: int = 2) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
