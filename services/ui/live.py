"""What the status page shows, kept current from the streams: bundles, objects, the latest drift
events, writes made against writes avoided per minute, each drift's time to correct, and the sync
windows in force (per bundle: the window that holds its writes, and the next change).

The hit ratio counts only decisions that could have been hits: a cache hit, or a write about an
object applied before (a new object's first apply, a held or kept object are not cache
questions). On a fresh stack there are none, and the page says so rather than 0.00 %.

Bookkeeping, no network or bus I/O: ``server`` feeds it decoded messages and serves what it
holds (a Secret's SHAs left out through ``detail.without_secret_shas``).
"""

from __future__ import annotations

import collections
import datetime as dt
import time
from typing import Any

import msgspec

from schemas.decision import DecisionRecord
from schemas.messages import BundleStatus, ObjectStatus, ServerEvent
from schemas.subjects import split_bundle
from schemas.windows import WindowsFile
from services.ui import detail
from services.windows import verdict as sync_windows

DRIFT_REASONS = ("drift", "deleted")
MAX_DRIFT_EVENTS = 200
HOUR = 3600.0
MAX_CORRECTIONS = 500


def _plain(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


def _epoch(at: Any) -> float:
    """An RFC 3339 time (as the page's documents carry them) in epoch seconds; 0 if none."""
    if not isinstance(at, str):
        return 0.0
    try:
        return dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class LiveState:
    """What the page shows, kept current from the streams; it reads and sends nothing."""

    def __init__(self) -> None:
        self.bundles: dict[tuple[str, str], dict[str, Any]] = {}
        self.objects: dict[tuple[str, str], dict[str, dict[str, Any]]] = collections.defaultdict(
            dict
        )
        self.drift: collections.deque[dict[str, Any]] = collections.deque(maxlen=MAX_DRIFT_EVENTS)
        self.decisions: collections.Counter[str] = collections.Counter()
        self.pending: dict[str, int] = {}
        self.health: dict[tuple[str, str], tuple[str, str]] = {}
        """(cluster, object) → (health, message) as the watcher last saw it."""
        self._bundle_of: dict[tuple[str, str], str] = {}
        self.minutes: dict[int, collections.Counter[str]] = {}
        """minute (epoch // 60) → writes made and avoided (hits) in it, for the last hour."""
        self.corrections: collections.deque[dict[str, Any]] = collections.deque(
            maxlen=MAX_CORRECTIONS
        )
        """Each drift corrected: when, which object, seconds from detected to corrected."""
        self._detected: dict[str, float] = {}
        """object → when its drift was detected (epoch seconds), until it is corrected."""
        self.windows = WindowsFile()
        """The sync windows the planners hold (the last usable version on the bus)."""
        self.windows_problem = ""
        """Why the latest windows on the bus are unusable ("" when they are usable)."""

    def set_windows(self, spec: WindowsFile, problem: str) -> None:
        self.windows, self.windows_problem = spec, problem

    def windows_view(self, now: dt.datetime, tenant: str | None = None) -> dict[str, Any]:
        """The sync windows: each one open or not at ``now`` and its next change; per bundle a
        window names (``cluster/bundle``), the window holding its writes ("" for none) and the
        next change, as its planner published them (``BundleStatus.windows``); why the latest
        version on the bus is unusable, if it is."""
        held: dict[str, dict[str, Any]] = {}
        for (cluster, bundle), doc in self.bundles.items():
            if tenant is not None and split_bundle(bundle)[0] != tenant:
                continue
            standing = doc.get("windows")
            if standing:
                held[f"{cluster}/{bundle}"] = {
                    "held": standing["message"] if standing["held"] else "",
                    "next_change": standing["next_change"],
                }
        return {
            "windows": _plain(sync_windows.rows(self.windows, now)),
            "bundles": held,
            "problem": self.windows_problem,
        }

    def on_server(self, ev: ServerEvent) -> dict[str, Any] | None:
        """Health from the watcher's facts; the object row it changes, if the page has it."""
        ident = (ev.cluster, str(ev.key))
        self.health[ident] = (str(ev.health), ev.health_message)
        bundle = self._bundle_of.get(ident)
        row = self.objects.get((ev.cluster, bundle), {}).get(str(ev.key)) if bundle else None
        if row is None:
            return None
        row["health"], row["health_message"] = self.health[ident]
        return row

    def on_bundle(self, st: BundleStatus) -> dict[str, Any]:
        doc: dict[str, Any] = _plain(st) | {"tenant": split_bundle(st.bundle)[0]}
        self.bundles[(st.cluster, st.bundle)] = doc
        return doc

    def on_object(self, st: ObjectStatus) -> tuple[dict[str, Any], dict[str, Any] | None]:
        doc = detail.without_secret_shas(_plain(st) | {"object": str(st.key)}, st.key)
        ident = (st.cluster, str(st.key))
        self._bundle_of[ident] = st.bundle
        if ident in self.health:
            doc["health"], doc["health_message"] = self.health[ident]
        self.objects[(st.cluster, st.bundle)][str(st.key)] = doc
        corrected = None
        if st.message.endswith(tuple(f"({r})" for r in DRIFT_REASONS)):
            corrected = {
                "event": "corrected",
                "cluster": st.cluster,
                "bundle": st.bundle,
                "object": str(st.key),
                "at": doc.get("at"),
                "detail": st.message,
            }
            self.drift.appendleft(corrected)
            since = self._detected.pop(f"{st.cluster}/{st.key}", None)
            if since is not None and st.at is not None:
                self.corrections.append(
                    {
                        "at": doc.get("at"),
                        "object": str(st.key),
                        "seconds": round(max(0.0, st.at.timestamp() - since), 3),
                    }
                )
        return doc, corrected

    def on_decision(self, d: DecisionRecord) -> dict[str, Any] | None:
        action = str(d.action)
        could_hit = action == "hit" or (action in ("apply", "delete") and str(d.reason) != "new")
        self.decisions["hit" if action == "hit" else "miss" if could_hit else "other"] += 1
        at = d.at.timestamp() if d.at is not None else time.time()
        if str(d.action) in ("apply", "delete", "hit"):
            minute = int(at // 60)
            self.minutes.setdefault(minute, collections.Counter())[
                "hits" if str(d.action) == "hit" else "writes"
            ] += 1
            for old in [m for m in self.minutes if m <= minute - 60]:
                del self.minutes[old]
        if str(d.reason) not in DRIFT_REASONS:
            return None
        self._detected.setdefault(f"{d.cluster}/{d.key}", at)
        event = {
            "event": "detected",
            "cluster": d.cluster,
            "bundle": d.bundle,
            "object": str(d.key),
            "at": _plain(d.at),
            "detail": f"{d.reason}: live object differs from what was applied",
        }
        self.drift.appendleft(event)
        return event

    def stats(self, now: float | None = None) -> dict[str, Any]:
        total = sum(self.decisions.values())
        could_hit = self.decisions["hit"] + self.decisions["miss"]
        now = time.time() if now is None else now
        first = int(now // 60) - 59
        empty: collections.Counter[str] = collections.Counter()
        return {
            # None: no decision could have hit yet (the page says so, not 0.00 %)
            "hit_ratio": round(self.decisions["hit"] / could_hit, 4) if could_hit else None,
            "could_hit": could_hit,
            "decisions": total,
            "pending": dict(self.pending),
            # the charts: the last 60 minutes, oldest first, empty minutes included
            "minutes": [
                {
                    "minute": m * 60,
                    "writes": self.minutes.get(m, empty)["writes"],
                    "avoided": self.minutes.get(m, empty)["hits"],
                }
                for m in range(first, first + 60)
            ],
            "corrections": [c for c in self.corrections if _epoch(c.get("at")) >= now - HOUR],
        }

    def snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """What the page shows; only ``tenant``'s bundles and objects when one is given."""

        def shown(bundle: str) -> bool:
            return tenant is None or split_bundle(bundle)[0] == tenant

        return {
            "bundles": sorted(
                (b for b in self.bundles.values() if shown(b.get("bundle", ""))),
                key=lambda b: (b.get("cluster", ""), b.get("bundle", "")),
            ),
            "objects": {
                f"{c}/{b}": sorted(objs.values(), key=lambda o: o["object"])
                for (c, b), objs in self.objects.items()
                if shown(b)
            },
            "drift": [d for d in self.drift if shown(d.get("bundle", ""))],
            "stats": self.stats(),
            "windows": self.windows_view(dt.datetime.now(dt.UTC), tenant),
        }
