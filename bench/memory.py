"""Scenario `memory`: planner and watcher resident memory with 100,000 objects in one cluster.

The objects of the `cold` mix are created first with raw server-side applies (16 in flight; not
measured), exactly as driftbus would write them (its field manager, its ownership label). Each
repetition then starts the services against a fresh nats-server (empty streams: the watcher must
list everything, the planner learns every object) and publishes the bundle of all of them. With
no applied fact on the fresh bus the planner applies each object once (a no-op for the API
server, which keeps the run short). The scenario waits until the bundle status counts every
object applied, checks that driftbus wrote exactly once per object, and reads each process's
resident memory (VmRSS, and the peak VmHWM) from /proc.

Peers are the targets (planner ≤ 150 MiB, watcher ≤ 200 MiB); the anchor is the < 200 MiB Plural
reports for its agent (`../shared/reference`).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from bench.report import Result
from bench.stack import BenchStack, labelled, manifests, rss_bytes

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


def run(*, objects: int = 100_000, repetitions: int = 2) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
