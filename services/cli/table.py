"""Readable output: aligned tables, colour only on a terminal, JSON for machines, error lines."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Sequence
from typing import Any

import orjson

_COLOURS = {
    "Ready": "32",
    "Applied": "32",
    "Published": "32",
    "Failed": "31",
    "Conflict": "31",
    "Degraded": "33",
    "Reconciling": "36",
    "InProgress": "36",
    "Pending": "36",
    "Waiting": "36",
    "Retrying": "36",
    "Forbidden": "31",
    "OutOfSync": "33",
    "PruneHeld": "33",
    "Drifted": "33",
    "Kept": "90",
    "Pruned": "90",
    "Deleted": "90",
    "apply": "33",
    "delete": "31",
    "hit": "32",
    "keep": "90",
}


def colour(text: str) -> str:
    code = _COLOURS.get(text)
    return f"\033[{code}m{text}\033[0m" if code and sys.stdout.isatty() else text


def render(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(nothing)"
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    head = "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
    lines = [head]
    for row in cells:
        lines.append(
            "  ".join(
                colour(v) + " " * (w - len(v)) for v, w in zip(row, widths, strict=True)
            ).rstrip()
        )
    return "\n".join(lines)


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], output: str) -> None:
    if output == "json":
        print(orjson.dumps(list(rows), option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(rows, columns))


def fail(command: str, exc: Exception) -> int:
    print(f"driftbus {command}: {exc}", file=sys.stderr)
    return 1


def age(since: dt.datetime | None, now: dt.datetime) -> str:
    """``42s``, ``7m``, ``3h``, ``2d``: how long ago, at a glance ("" unknown)."""
    if since is None:
        return ""
    s = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"
