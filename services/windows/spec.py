"""One sync window (docs/windows.md): what it names — bundles and clusters by name globs, and
clusters by a label selector over the cluster registry — and when it is open (pure).

A window opens each time its cron ``schedule`` fires, read in its ``timeZone`` (DST included:
croniter's wall-clock rule — a time that does not exist on a spring-forward day fires at the first
instant after the gap, one that happens twice on a fall-back day fires twice), and stays open for
its ``duration`` of elapsed time. Open periods that overlap or touch are one period.

A ``clusterSelector`` restricts, it grants nothing: a cluster whose registry labels are unknown
(None: no entry, removed, unreadable) is named by a window with a selector — a freeze of
``env=prod`` is never skipped because the registry cannot say what a cluster is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Final
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from schemas.windows import SyncWindow
from services.clusters.selector import Selector

HORIZON: Final = dt.timedelta(days=366)
"""How far ahead a change is looked for: a schedule firing later than this counts as never."""
MAX_CHAIN: Final = 1500
"""Overlapping openings chained at most: a window that opens more often than it lasts for more
than a day of minutely openings is open for good (``FOREVER``)."""
FOREVER: Final = dt.timedelta(days=10_000)
_EPSILON: Final = dt.timedelta(microseconds=1)

Labels = Mapping[str, str] | None
"""A cluster's registry labels; None: unknown."""


@dataclasses.dataclass(frozen=True)
class Window:
    """One sync window, checked and ready to ask."""

    name: str
    kind: str
    schedule: str
    duration: dt.timedelta
    zone: ZoneInfo
    bundles: tuple[str, ...]
    clusters: tuple[str, ...]
    spec: SyncWindow
    selector: Selector = dataclasses.field(default_factory=Selector)
    """The ``clusterSelector``: the clusters' labels it names (empty: any)."""

    def names(self, bundle: str, cluster: str, labels: Labels) -> bool:
        """Whether the window is about ``bundle`` (its full name) on ``cluster``."""
        return any(fnmatchcase(bundle, p) for p in self.bundles) and self.names_cluster(
            cluster, labels
        )

    def names_cluster(self, cluster: str, labels: Labels) -> bool:
        """Whether the window is about ``cluster``, whose registry labels are ``labels`` (None:
        unknown, named by any selector: see above)."""
        return any(fnmatchcase(cluster, p) for p in self.clusters) and (
            labels is None or self.selector.matches(labels)
        )

    def last_start(self, at: dt.datetime) -> dt.datetime | None:
        """The latest time the schedule fired at or before ``at`` (None: not within a year)."""
        try:
            start: dt.datetime = croniter(
                self.schedule, (at + _EPSILON).astimezone(self.zone)
            ).get_prev(dt.datetime)
        except CroniterBadDateError:
            return None
        return start if at - start <= HORIZON else None

    def next_start(self, after: dt.datetime) -> dt.datetime | None:
        """The first time the schedule fires strictly after ``after`` (None: not within a
        year)."""
        try:
            start: dt.datetime = croniter(self.schedule, after.astimezone(self.zone)).get_next(
                dt.datetime
            )
        except CroniterBadDateError:
            return None
        return start if start - after <= HORIZON else None

    def open_until(self, at: dt.datetime) -> dt.datetime | None:
        """When the open period holding ``at`` ends (openings that overlap or touch chained);
        None when the window is closed at ``at``, or ``at + FOREVER`` when it stays open for
        more than ``MAX_CHAIN`` openings in a row (a window that never closes)."""
        start = self.last_start(at)
        if start is None or utc(start) + self.duration <= at:
            return None
        end = utc(start) + self.duration
        try:
            following = croniter(self.schedule, start)
            for _ in range(MAX_CHAIN):
                nxt: dt.datetime = following.get_next(dt.datetime)
                if utc(nxt) > end:
                    return end.astimezone(self.zone)
                end = max(end, utc(nxt) + self.duration)
        except CroniterBadDateError:
            return end.astimezone(self.zone)
        return (at + FOREVER).astimezone(self.zone)

    def next_change(self, at: dt.datetime) -> dt.datetime | None:
        """When the window next closes (open at ``at``) or opens (closed); None: not within a
        year."""
        until = self.open_until(at)
        if until is not None:
            return None if until - at >= FOREVER else until
        return self.next_start(at)

    def shown(self, at: dt.datetime) -> str:
        """``at`` in the window's time zone, to the minute (the second when it has one):
        ``2026-11-30T08:00+01:00``."""
        local = at.astimezone(self.zone)
        return local.isoformat(timespec="seconds" if local.second else "minutes")


def utc(t: dt.datetime) -> dt.datetime:
    return t.astimezone(dt.UTC)
