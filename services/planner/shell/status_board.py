"""The bundles' status board: which bundles changed since the last tick, and each one's status
published when what a user reads of it changed, continuing the trace of the change.

Changes are coalesced: any number of facts about a bundle within one tick cost one status
computation, and one message only if what a user reads changed (revision, phase, counts, listed
objects) — or when a publish waits for its answer (``answer``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from schemas.codec import encode
from schemas.messages import BundlePhase
from schemas.subjects import bundle_status_subject
from services.common import bus, telemetry
from services.planner.memory.cluster import ClusterState
from services.planner.rule import messages
from services.planner.shell.yielding import stepped
from services.planner.status.ledger import Ledger
from services.planner.status.report import bundle_status, known_of

log = logging.getLogger("driftbus.planner")
STATUS_LAG = telemetry.meter.create_histogram(
    "driftbus_status_publish_lag_seconds",
    unit="s",
    description="from the first change to a bundle to its status published",
)

Ident = tuple[str, str]  # (cluster, bundle)


class StatusBoard:
    """Per bundle: changed or not, since when, what was last published, which trace it continues.

    Reads the cluster state; changes only its ``phases`` (each bundle's phase as published)."""

    def __init__(self, *, state: ClusterState, publisher: bus.Publisher) -> None:
        self.state = state
        self.ledger = Ledger()
        """Each bundle's tally, kept current from the objects that changed (what status reads)."""
        self.pub = publisher
        self._dirty: set[Ident] = set()
        self._dirty_since: dict[Ident, float] = {}
        self.on_mark: Callable[[], None] = lambda: None
        """Called by every mark: the planner sets its status alarm (``shell.alarms``)."""
        self.before_publish: Callable[[], Awaitable[None]] = _nothing
        """Awaited before statuses are published: the decision records waiting are queued
        first (the fast batches keep that order on the wire)."""
        self._last: dict[Ident, tuple[Any, ...]] = {}
        self._trace: dict[Ident, Context] = {}
        """Per bundle, the span its latest traced event was handled in: status continues it."""

    def mark(self, ident: Ident) -> None:
        """Something the bundle's status reads changed: recompute it next tick."""
        self._dirty.add(ident)
        self._dirty_since.setdefault(ident, time.monotonic())
        self.on_mark()

    def mark_all(self, idents: Iterable[Ident]) -> None:
        """Recompute these next tick (what all of them read changed: who serves the cluster)."""
        self._dirty.update(idents)
        self.on_mark()

    def answer(self, ident: Ident) -> None:
        """Publish the next status even if it reads as the last one: every publish of a bundle
        gets an answer (a waiting ``publish --wait``), even when nothing changed."""
        self._last.pop(ident, None)

    # --- traces ---------------------------------------------------------------------------

    def trace(self, ident: Ident) -> Context | None:
        """The context of the span the bundle's latest traced event was handled in."""
        return self._trace.get(ident)

    def continue_trace(self, ident: Ident, ctx: Context) -> None:
        self._trace[ident] = ctx

    def continue_current_span(self, ident: Ident) -> None:
        """The bundle's status continues the current span, if there is one."""
        span = trace.get_current_span()
        if span.get_span_context().is_valid:
            self._trace[ident] = trace.set_span_in_context(span)

    # --- the tick -------------------------------------------------------------------------

    async def publish_changed(self) -> None:
        """Publish the status of every bundle marked since the last tick, if it changed."""
        dirty, self._dirty = self._dirty, set()
        if dirty:
            await self.before_publish()
        now = time.monotonic()
        for ident in dirty:
            since = self._dirty_since.pop(ident, now)
            view = self.state.bundles.get(ident)
            if view is None:
                continue
            # the ledger caught up in steps first: the status itself then costs its lines
            await stepped(self.ledger.preparing(view, known_of(self.state), self.state.bundles))
            st = bundle_status(self.state, view, self.ledger)
            self.state.gates.phases[view.name] = st.phase
            fingerprint = (
                st.revision,
                st.phase,
                st.counts,
                tuple(st.failed_objects),
                st.suspended,
                st.message if st.phase is BundlePhase.DELETED else "",
                st.window,  # another window, or none: a fleet rollout's step clock reads it
                st.windows,  # a window opened or closed: "driftbus status" and the page show it
            )
            if self._last.get(ident) == fingerprint:
                continue
            self._last[ident] = fingerprint
            subject = bundle_status_subject(view.cluster, view.name)
            with telemetry.tracer.start_as_current_span(
                "publish bundle status",
                context=self._trace.get(ident),
                attributes={
                    "cluster": view.cluster,
                    "bundle": view.name,
                    "revision": st.revision,
                    "phase": str(st.phase),
                },
            ):
                # in the STATUS fast batch: after the records ``before_publish`` queued
                await self.pub.publish_batched(
                    bus.STATUS,
                    subject,
                    encode(st),
                    msg_id=f"{subject}:{hash(fingerprint)}:{messages.now()}",
                )
            STATUS_LAG.record(time.monotonic() - since)


async def _nothing() -> None:
    return None
