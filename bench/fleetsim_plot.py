"""fleet-sim's rollouts drawn: clusters placed and Ready over time, one line pair per run.

``python -m bench fleet-sim`` writes ``results/fleet-sim-<clusters>x<objects>.png`` from the
curves it sampled (every half second, from the rollout state the driver writes); ``python -m
bench.fleetsim_plot`` draws them again from ``results/fleet-sim.json``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.report import RESULTS_DIR

Curve = Sequence[Sequence[float]]  # (seconds, clusters placed, clusters Ready)


def path_for(clusters: int, objects: int) -> Path:
    return RESULTS_DIR / f"fleet-sim-{clusters}x{objects}.png"


def plot(clusters: int, objects: int, curves: Sequence[Curve], target_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for i, curve in enumerate(curves):
        if not curve:
            continue
        t = [p[0] for p in curve]
        color = f"C{i}"
        ax.step(t, [p[2] for p in curve], where="post", color=color, label=f"run {i + 1}: Ready")
        ax.step(
            t,
            [p[1] for p in curve],
            where="post",
            color=color,
            linestyle=":",
            alpha=0.7,
            label=f"run {i + 1}: placed",
        )
    ax.axvline(target_s, color="grey", linestyle="--", label=f"target: Complete ≤ {target_s:.0f} s")
    ax.set_xlabel("seconds since the fleet publish")
    ax.set_ylabel("clusters")
    ax.set_ylim(0, clusters * 1.05)
    ax.set_xlim(left=0)
    ax.set_title(f"fleet-sim: {clusters:,} clusters × {objects} objects, steps 1 %, 10 %, 100 %")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def from_results(path: Path = RESULTS_DIR / "fleet-sim.json") -> list[Path]:
    """Draw every size stored in ``path`` that has curves; the files written."""
    written = []
    for r in json.loads(path.read_text())["results"]:
        params = r["parameters"]
        curves = params.get("placed_and_ready_over_time")
        if not r["name"].endswith("-all-ready") or not curves:
            continue
        clusters, objects = params["clusters"], params["objects_per_cluster"]
        out = path_for(clusters, objects)
        plot(clusters, objects, curves, r["peer_value"], out)
        written.append(out)
    return written


if __name__ == "__main__":
    for p in from_results(*(Path(a) for a in sys.argv[1:2])):
        print(f"wrote {p}")
