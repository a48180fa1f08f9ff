"""Scenario `scaling`: cold apply of 5,000 objects with 1, 2, 4 and 8 appliers (issue 5, item 4).

Every repetition runs each applier count and the raw limit (one aiohttp client, 16 in flight)
against the same API server, recording throughput and the API server's share of the machine's
CPU (its utime + stime from /proc over the run's wall time, divided by the core count). Drawn as
``bench/results/scaling.png``. Target: 4 appliers ≥ 3 × 1 applier until the API server saturates.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from pathlib import Path

from bench.report import RESULTS_DIR, Result
from bench.stack import BenchStack, Run, labelled, manifests, namespaces_for

APPLIERS = (1, 2, 4, 8)


async def _main(objects: int, repetitions: int, plot_to: Path) -> list[Result]:
    objs = manifests(objects)
    runs: dict[str, list[Run]] = {**{str(n): [] for n in APPLIERS}, "raw": []}
    async with BenchStack.start(objects) as b:
        for rep in range(repetitions):
            for n in APPLIERS:
                async with b.pipeline(n) as d:
                    runs[str(n)].append(await b.measured(d.cold_apply(objs)))
                await b.cleanup(namespaces_for(objects))
            runs["raw"].append(await b.measured(b.raw_apply(labelled(objs))))
            await b.cleanup(namespaces_for(objects))
            print(
                f"  scaling rep {rep + 1}/{repetitions}: "
                + ", ".join(
                    f"{k}: {objects / v[-1].seconds:.0f}/s (API server {v[-1].apiserver_cpu:.0%}, "
                    f"machine {v[-1].machine_busy:.0%} busy)"
                    for k, v in runs.items()
                ),
                file=sys.stderr,
                flush=True,
            )

    def rates(key: str) -> list[float]:
        return [objects / r.seconds for r in runs[key]]

    curve = {
        k: {
            "objects_per_s": statistics.median(rates(k)),
            "min": min(rates(k)),
            "max": max(rates(k)),
            "apiserver_cpu_share": statistics.median(r.apiserver_cpu for r in v),
            "machine_busy_share": statistics.median(r.machine_busy for r in v),
        }
        for k, v in runs.items()
    }
    plot(curve, objects, plot_to)
    params = {"objects": objects, "curve": curve, "cpus": _cpus()}
    return [
        Result(
            "scaling-4-vs-1-appliers",
            "objects/s",
            rates("4"),
            "1 applier",
            rates("1"),
            params,
            target="ratio ≥ 3 until the API server saturates",
        ),
        Result(
            "scaling-8-appliers-vs-raw-limit",
            "objects/s",
            rates("8"),
            "raw SSA, 16 in flight",
            rates("raw"),
            params,
        ),
    ]


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def plot(curve: dict[str, dict[str, float]], objects: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(APPLIERS)
    ys = [curve[str(n)]["objects_per_s"] for n in xs]
    lo = [y - curve[str(n)]["min"] for n, y in zip(xs, ys, strict=True)]
    hi = [curve[str(n)]["max"] - y for n, y in zip(xs, ys, strict=True)]
    cpu = [100 * curve[str(n)]["apiserver_cpu_share"] for n in xs]
    busy = [100 * curve[str(n)].get("machine_busy_share", 0.0) for n in xs]
    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, label="driftbus (median, min–max)")
    ax.axhline(
        curve["raw"]["objects_per_s"],
        color="grey",
        linestyle="--",
        label="raw SSA limit, 16 in flight",
    )
    ax.plot(xs, [ys[0] * n for n in xs], color="green", alpha=0.3, label="linear from 1 applier")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(n) for n in xs])
    ax.set_ylim(0, max([*ys, curve["raw"]["objects_per_s"]]) * 1.3)
    ax.set_xlabel("appliers")
    ax.set_ylabel(f"objects/s ({objects:,} objects, cold apply)")
    ax2 = ax.twinx()
    ax2.plot(xs, cpu, color="tab:red", marker="s", linestyle=":", label="API server CPU")
    ax2.plot(xs, busy, color="black", marker="x", linestyle=":", label="whole machine busy")
    ax2.set_ylabel(f"CPU, % of {_cpus()} cores")
    ax2.set_ylim(0, 100)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(
        lines[0] + lines2[0],
        lines[1] + lines2[1],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=3,
        fontsize=8,
    )
    ax.set_title("driftbus applier scaling on the real stack")
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def run(
    *, objects: int = 5000, repetitions: int = 3, plot_to: Path = RESULTS_DIR / "scaling.png"
) -> list[Result]:
    return asyncio.run(_main(objects, repetitions, plot_to))
