"""NATS messages per driftbus process, from nats-server's own monitoring counters (``/connz``):
the figure issue 33's bus contract is measured in (messages per object applied).

For each open connection the server counts the messages the client sent it (``in_msgs``:
publishes, requests, acks, fetch requests) and the messages it delivered to the client
(``out_msgs``: subscriptions, fetched messages, replies and acks). A service names its
connection (``driftbus-planner``, ``driftbus-applier-<cluster>``, ``driftbus-watcher-<cluster>``),
so the counts are summed per role; the bench's own connection (publishing the bundle, watching its
status) has no such name and is left out.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import urllib.request
from typing import Any

from services.controlplane import servers


@dataclasses.dataclass(frozen=True)
class Traffic:
    sent: int
    """messages the process sent to the server"""
    delivered: int
    """messages the server delivered to the process"""


def by_role(nats_server: servers.NatsServer) -> dict[str, Traffic]:
    """Messages each driftbus role's open connections have sent and received so far."""
    url = f"{nats_server.monitor_url}/connz?limit=4096"  # http on loopback
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310
        doc: dict[str, Any] = json.load(r)
    out: dict[str, Traffic] = {}
    for c in doc.get("connections", []):
        name = str(c.get("name") or "")
        if not name.startswith("driftbus-"):
            continue
        role = name.removeprefix("driftbus-").split("-", 1)[0]
        was = out.get(role, Traffic(0, 0))
        out[role] = Traffic(was.sent + int(c["in_msgs"]), was.delivered + int(c["out_msgs"]))
    return out


def delta(before: dict[str, Traffic], after: dict[str, Traffic]) -> dict[str, Traffic]:
    """What each role sent and received between two readings."""
    zero = Traffic(0, 0)
    return {
        role: Traffic(
            t.sent - before.get(role, zero).sent, t.delivered - before.get(role, zero).delivered
        )
        for role, t in after.items()
    }


def per_object(runs: list[dict[str, Traffic]], objects: int) -> dict[str, dict[str, float]]:
    """Median messages per object of each role (sent, delivered, both) and of all roles."""
    rows: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        total = Traffic(sum(t.sent for t in run.values()), sum(t.delivered for t in run.values()))
        for role, t in {**run, "all": total}.items():
            row = rows.setdefault(role, {"sent": [], "delivered": [], "messages": []})
            row["sent"].append(t.sent / objects)
            row["delivered"].append(t.delivered / objects)
            row["messages"].append((t.sent + t.delivered) / objects)
    return {
        role: {k: round(statistics.median(v), 2) for k, v in row.items()}
        for role, row in rows.items()
    }


STREAMS = ("SERVER", "APPLIED", "OUTCOMES", "INTENTS", "STATUS", "DECISIONS")
"""The streams whose messages per object say what shares a message (issue 44)."""


async def stream_heads(js: Any) -> dict[str, int]:
    """The last sequence of each of ``STREAMS`` (what was published into it so far)."""
    return {s: int((await js.stream_info(f"DRIFTBUS_{s}")).state.last_seq or 0) for s in STREAMS}


def per_stream(runs: list[tuple[dict[str, int], dict[str, int]]], objects: int) -> dict[str, float]:
    """Median messages published per object into each stream, from (before, after) heads."""
    return {
        s: round(statistics.median((after[s] - before[s]) / objects for before, after in runs), 2)
        for s in STREAMS
    }
