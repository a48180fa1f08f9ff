"""The Grafana dashboard queries only metrics the services really export."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _defined() -> set[str]:
    names = set()
    for path in (ROOT / "services").rglob("*.py"):
        names |= set(re.findall(r'"(driftbus_[a-z_]+)"', path.read_text()))
    return names


def test_every_dashboard_query_names_an_exported_metric() -> None:
    dash = json.loads((ROOT / "deploy" / "grafana" / "driftbus.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bdriftbus_[a-z_]+", e)}
    defined = _defined()
    for metric in used:
        base = metric
        for suffix in SUFFIXES:
            if base.endswith(suffix) and base.removesuffix(suffix) in defined:
                base = base.removesuffix(suffix)
                break
        assert base in defined, f"{metric} is queried but no service exports it"
    assert len(used) >= 10
