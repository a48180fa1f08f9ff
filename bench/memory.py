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

from bench.fleet import one_run
from bench.report import Result
from bench.stack import BenchStack, labelled, manifests, rss_bytes
from harness.fleet import Fleet, clusters
from harness.pipeline import FAST_HEARTBEATS

MIB = 1024 * 1024
TARGET_MIB = {"planner": 150.0, "watcher": 200.0}


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
    """One run across ``count`` clusters of ``objects`` each (the ``fleet`` scenario's run, one
    planner): RSS of the planner and of the largest watcher (MiB) once every bundle is Ready,
    and the seconds that took."""

    def rss(f: Fleet) -> dict[str, float]:
        watchers = [p.procs["watcher-0"].pid for p in f.pipelines.values()]
        return {
            "planner": rss_bytes(f.planners["planner-0"].pid) / MIB,
            "watcher": max(rss_bytes(pid) for pid in watchers) / MIB,
        }

    heartbeat = (
        float(FAST_HEARTBEATS["DRIFTBUS_HEARTBEAT_INTERVAL"]),
        float(FAST_HEARTBEATS["DRIFTBUS_HEARTBEAT_TIMEOUT"]),
    )
    with tempfile.TemporaryDirectory(prefix="driftbus-bench-memory-") as tmp:
        root = Path(tmp)
        with clusters(root / "clusters", count) as cs:
            took, _, _, measured = await one_run(
                cs, root / "run", 1, objects, "mem", heartbeat=heartbeat, measure=rss
            )
    return {**measured, "seconds": took}


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
