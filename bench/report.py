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


def _num(v: float) -> str:
    """Three significant digits, thousands separated: 0.268, 1.42, 34,140."""
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.4g}"


def table(results: list[Result]) -> str:

    def bold(s: str) -> str:
        return f"\033[1m{s}\033[0m" if sys.stdout.isatty() else s

    head = ["scenario", "driftbus", "peer", "peer value", "ratio", "spread (min-max)", "target"]
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                f"{_num(r.driftbus)} {r.unit}",
                r.peer_name,
                f"{_num(r.peer)} {r.unit}",
                f"{r.ratio:.3g}×",
                f"{_num(min(r.driftbus_samples))}-{_num(max(r.driftbus_samples))} vs "
                f"{_num(min(r.peer_samples))}-{_num(max(r.peer_samples))}",
                r.target,
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))

    return "\n".join([bold(line(head)), line(["-" * w for w in widths]), *map(line, rows)])


def markdown(paths: list[Path]) -> str:
    """The results table for bench/README.md, from result files (no transcription by hand)."""
    rows = [
        "| scenario | driftbus | peer | peer value | ratio | spread (min–max) | target | run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        doc = json.loads(path.read_text())
        for r in doc["results"]:
            d, p = r["spread"]["driftbus"], r["spread"]["peer"]
            rows.append(
                f"| {r['name']} | {_num(r['driftbus_value'])} {r['unit']} | {r['peer_name']} "
                f"| {_num(r['peer_value'])} {r['unit']} | **{r['ratio']:.3g}×** "
                f"| {_num(d['min'])}–{_num(d['max'])} vs {_num(p['min'])}–{_num(p['max'])} "
                # a row kept from an earlier run of a scenario (other sizes) keeps its own date
                f"| {r['target'] or '—'} | {r.get('date', doc['date'])[:16].replace('T', ' ')}, "
                f"{r['repetitions']}× |"
            )
    return "\n".join(rows)
