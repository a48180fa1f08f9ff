"""Following one bundle's status as a user sees it: each status message of the bundle, decoded,
in the order it arrives, and a wait over them with a deadline.

``driftbus publish --wait`` (and ``driftbus up``) follow the bundle's summary until the revision
ends; the test harness (``harness.pipeline.StatusWatch``) also follows its objects and its Git
source, and fails a test with what it saw. Start the watch before publishing, so no status is
missed: it subscribes to live messages only.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

from schemas.codec import WireError, decode
from schemas.messages import BundleStatus, ObjectRows, ObjectStatus, SourceStatus
from schemas.subjects import (
    SubjectError,
    bundle_status_filter,
    bundle_status_subject,
    parse_subject,
)
from services.common import bus

E = TypeVar("E")
StatusEvent = BundleStatus | ObjectStatus | SourceStatus
_FAMILIES: dict[str, type[StatusEvent] | type[ObjectRows]] = {
    "status.bundle": BundleStatus,
    "status.object": ObjectStatus,
    "status.rows": ObjectRows,
    "status.source": SourceStatus,
}


def decode_statuses(subject: str, data: bytes) -> list[StatusEvent]:
    """The statuses a message on ``subject`` carries, in order, chosen by the subject's family
    (never its last token: an object may be named "bundle"): one, or each row of an
    ``ObjectRows``. Empty for what this version cannot read, and for rows naming another
    cluster or bundle than their subject (a row is read where its subject says it is)."""
    try:
        where = parse_subject(subject)
        kind = _FAMILIES.get(where.family)
        if kind is None:
            return []
        event = decode(data, kind)
    except (WireError, SubjectError):
        return []
    if not isinstance(event, ObjectRows):
        return [event]
    rows = event.rows
    if any(r.cluster != where.cluster or r.bundle != where.bundle for r in rows):
        return []
    return list(rows)


class StatusWatch:
    """Every status message of one bundle since ``start``, by kind, oldest first."""

    def __init__(self) -> None:
        self.bundles: list[BundleStatus] = []
        self.objects: list[ObjectStatus] = []
        self.sources: list[SourceStatus] = []
        self._changed = asyncio.Event()
        self._sub: bus.Subscription | None = None

    async def start(
        self, nc: bus.Connection, cluster: str, bundle: str, *, objects: bool = True
    ) -> None:
        """Subscribe to the bundle's summary and, with ``objects``, to its objects' and its Git
        source's status too (one subscription: each message arrives once, in order). A message
        that is not a status this version can read is left out."""

        async def on_msg(msg: bus.Message) -> None:
            events = decode_statuses(msg.subject, msg.data)
            for event in events:
                if isinstance(event, BundleStatus):
                    self.bundles.append(event)
                elif isinstance(event, SourceStatus):
                    self.sources.append(event)
                else:
                    self.objects.append(event)
            if events:
                self._changed.set()

        subject = (
            bundle_status_filter(cluster, bundle)
            if objects
            else bundle_status_subject(cluster, bundle)
        )
        self._sub = await bus.subscribe(nc, subject, on_msg)

    async def stop(self) -> None:
        """Unsubscribe (what arrived stays readable)."""
        if self._sub is not None:
            await bus.unsubscribe(self._sub)
            self._sub = None

    async def each(self, events: list[E], within: float) -> AsyncIterator[E]:
        """Every event of ``events`` (``bundles``, ``objects`` or ``sources``), oldest first,
        then each one as it arrives, until ``within`` seconds have passed."""
        deadline = time.monotonic() + within
        seen = 0
        while True:
            while seen < len(events):
                seen += 1
                yield events[seen - 1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))

    async def first(self, events: list[E], pred: Callable[[E], bool], within: float) -> E | None:
        """The first of ``events`` matching ``pred``, waiting up to ``within`` seconds for it;
        None when none came."""
        async for event in self.each(events, within):
            if pred(event):
                return event
        return None
