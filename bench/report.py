"""Benchmark results: one record per scenario, a table for people, JSON for machines.

Every figure is a ratio against a peer measured in the same run — machines here are shared and
noisy, ratios from interleaved repetitions are what stay stable.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


@dataclasses.dataclass
class Result:
    name: str
    unit: str
    driftbus_samples: list[float]
    peer_name: str
    peer_samples: list[float]
    parameters: dict[str, Any]
    higher_is_better: bool = True
    target: str = ""

    @property
    def driftbus(self) -> float:
        return statistics.median(self.driftbus_samples)

    @property
    def peer(self) -> float:
        return statistics.median(self.peer_samples)

    @property
    def ratio(self) -> float:
        return self.driftbus / self.peer if self.peer else float("inf")

    def as_json(self) -> dict[str, Any]:
        def spread(xs: list[float]) -> dict[str, float]:
            return {
                "min": min(xs),
                "max": max(xs),
                "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0,
            }

        return {
            "name": self.name,
            "driftbus_value": self.driftbus,
            "peer_name": self.peer_name,
            "peer_value": self.peer,
            "ratio": self.ratio,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "target": self.target,
            "parameters": self.parameters,
            "repetitions": len(self.driftbus_samples),
            "spread": {
                "driftbus": spread(self.driftbus_samples),
                "peer": spread(self.peer_samples),
            },
            "samples": {"driftbus": self.driftbus_samples, "peer": self.peer_samples},
        }


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def write(results: list[Result], *, stem: str) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{stem}.json"
    doc = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "results": [r.as_json() for r in results],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def table(results: list[Result]) -> str:
    bold = (lambda s: f"\033[1m{s}\033[0m") if sys.stdout.isatty() else (lambda s: s)
    head = ["scenario", "driftbus", "peer", "peer value", "ratio", "spread (min-max)", "target"]
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                f"{r.driftbus:,.0f} {r.unit}",
                r.peer_name,
                f"{r.peer:,.0f} {r.unit}",
                f"{r.ratio:.2f}×",
                f"{min(r.driftbus_samples):,.0f}-{max(r.driftbus_samples):,.0f} vs "
                f"{min(r.peer_samples):,.0f}-{max(r.peer_samples):,.0f}",
                r.target,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([bold(line(head)), line(["-" * w for w in widths]), *map(line, rows)])
