"""The planner's periodic duties beside its run loop: who serves the cluster (heartbeats), lost
intents sent again, the intents pending, the bundle status tick, and the sync windows' clock
(what a window held is released the moment it closes).

Each duty runs once per call, in the cluster's run loop between two of its messages, when its
alarm rings (``shell.alarms``: one ``call_at`` handle per duty, set only when there is work) or
when the hub says the members' heartbeats changed. They change an entry only through ``fold``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from schemas.codec import WireError, applied_events
from schemas.messages import BundlePhase, KindScope, MemberHeartbeat
from schemas.subjects import batch_filter, object_subject
from services.clusters import members
from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.planner.rule import messages
from services.planner.rule.decide import Resend, Working
from services.planner.rule.entry import Slot
from services.planner.settings import PlannerSettings
from services.planner.shell.alarms import Alarms
from services.planner.shell.intake import BundleIntake, Fold, Prune
from services.planner.shell.intent_batches import IntentBatches
from services.planner.shell.status_board import StatusBoard

log = logging.getLogger("driftbus.planner")
STATUS_REFRESH = 24 * 3600.0
UNREAD_REPORTS = 64
"""Appliers' reports the lost-intent check reads past what the planner folded (``_fact_unread``)."""
"""Every bundle's status is published again this often, changed or not (STATUS keeps 7 days)."""
WINDOWS_IDLE = 3600.0
"""Seconds until the sync windows' clock looks again when no window names a bundle."""


class Duties:
    """The periodic duties of one cluster's planner. Changes the state's ``unserved`` and
    ``watcher_synced``, entries through ``fold``; ``pending`` is its own."""

    def __init__(
        self,
        *,
        settings: PlannerSettings,
        js: bus.JetStream,
        state: ClusterState,
        board: StatusBoard,
        intake: BundleIntake,
        alarms: Alarms,
        fold: Fold,
        prune: Prune,
        release: Callable[[str], Awaitable[None]],
        batches: IntentBatches | None = None,
    ) -> None:
        self.s = settings
        self.js = js
        self.state = state
        self.board = board
        self.intake = intake
        self.alarms = alarms
        self.fold = fold
        self.prune = prune
        self.release = release
        self.batches = batches
        self.pending: int | None = None
        """Intents of this cluster queued or being applied (None until known)."""
        self._windows_new = False
        self._window_boundary: float | None = None
        self._scopes: list[KindScope] | None = None
        self._last_stats: dict[str, Any] = {}
        self._next_stats = 0.0

    # --- who serves the cluster -------------------------------------------------------------

    def members(self, beats: dict[str, MemberHeartbeat | None]) -> bool:
        """Who serves the cluster (watcher, applier heartbeats), taken in at once — not behind
        the cluster's queue, as the loop it replaces ran beside the run loop: a replica busy
        with a burst of facts must not call its clusters unserved meanwhile. True when the
        watcher's lists just became complete on a live cluster: then prune (``prune_all``)."""
        st = self.state
        now = messages.now()
        if (watcher_beat := beats.get("watcher")) is not None and (
            watcher_beat.scopes != self._scopes
        ):
            self._scopes = watcher_beat.scopes
            self.intake.learn_scopes(watcher_beat.scopes)
        unserved = members.serving(st.cluster, beats, now)
        synced = members.watcher_synced(beats.get("watcher"), now)
        became_synced = synced and not st.watcher_synced
        if unserved != st.unserved or synced != st.watcher_synced:
            self.board.mark_all(st.bundles)
        st.unserved, st.watcher_synced = unserved, synced
        return became_synced and st.live

    async def prune_all(self) -> None:
        """Prune waits for the watcher's initial lists, and starts the moment they are
        complete."""
        st = self.state
        if not st.may_prune():
            return
        log.info("cluster %s: the watcher's lists are complete: prune", st.cluster)
        for view in list(st.bundles.values()):
            await self.prune(view)

    # --- lost intents -------------------------------------------------------------------------

    def inflight(self) -> bool:
        """Whether an intent of the cluster is in flight (stops at the first one)."""
        return next(self.state.entries.overdue(math.inf), None) is not None

    async def resend(self, backlog: int) -> None:
        """Send again what got no word for ``intent_timeout`` and is no longer queued: a lost
        intent (its publish never landed, a dedup-window collision, a crash between ack and
        fact) must not silence the object's healing for good. Checked only when the planner has
        caught up with its input: a backlog of applied facts is not a lost intent. Rings again
        while anything is in flight."""
        timeout = self.s.intent_timeout
        entries = self.state.entries
        if self.state.live and backlog <= 100:
            now = time.time()
            for slot in list(entries.overdue(now - timeout)):
                await self._resend(slot, now)
        if self.inflight():
            self.alarms.set("resend", max(0.5, timeout / 4))

    async def _resend(self, slot: Slot, now: float) -> None:
        entries = self.state.entries
        entry = entries.get(slot)
        if entry is None or entry.inflight is None:
            return
        batch = self.batches.queued_in.get(slot) if self.batches is not None else None
        try:  # the batch that carries its intent, or its own subject
            queued = await bus.last_message(
                self.js, bus.INTENTS, batch or object_subject("intent", slot[0], slot[1])
            )
            unread = queued is None and await self._fact_unread(slot)
        except Exception as exc:  # noqa: BLE001 - NATS away: ask again next round
            log.debug("%s: intent queue not read: %s", slot[1], exc)
            return
        if entries.get(slot) != entry:
            return  # a fact was folded meanwhile: ask again next round if need be
        if queued is not None and messages.is_inflight(queued.data, entry):
            await self.fold(slot, Working(entry.inflight, now))  # queued: not lost
            return
        if batch is not None and self.batches is not None:
            self.batches.forget(slot)  # carried out or lost: its own subject from now on
        if unread:
            return  # answered: the fact is on its way to us
        log.warning(
            "%s: no outcome of its intent for %.0fs and it is not queued: sending again",
            slot[1],
            now - entry.inflight_at,
        )
        self.state.counters["resent"] += 1
        await self.fold(slot, Resend())

    async def _fact_unread(self, slot: Slot) -> bool:
        """Whether the object has a fact on the bus this planner has not folded yet. An applier
        publishes its fact *before* it acks the intent, and the ack takes the intent off the
        queue at once: an intent just carried out is no longer queued while its fact still
        waits in our follower. Read after the queue, so such a fact is always seen here."""
        for stream, kind in ((bus.APPLIED, "applied"), (bus.OUTCOMES, "outcome")):
            last = await bus.last_message(self.js, stream, object_subject(kind, *slot))
            if last is not None and (last.seq or 0) > self.state.read_up_to.get(stream, 0):
                return True
        return await self._in_unread_report(slot)

    async def _in_unread_report(self, slot: Slot) -> bool:
        """Whether an applier's report this planner has not folded yet names the object (issue
        44: applied facts travel in reports, not on the object's subject). The unread tail is
        what the planner's follower is about to deliver: short, read by direct gets; past
        ``UNREAD_REPORTS`` of them the fact is taken to be among them (asked again next round)."""
        subjects = batch_filter("applied", slot[0])
        seq = self.state.read_up_to.get(bus.APPLIED, 0) + 1
        for _ in range(UNREAD_REPORTS):
            got = await bus.next_message(self.js, bus.APPLIED, subjects, seq)
            if got is None or got.seq is None:
                return False
            try:
                if any(
                    ap.key == slot[1] for ap in applied_events(got.subject or "", got.data or b"")
                ):
                    return True
            except WireError:
                pass  # the planner reports it when its follower delivers it
            seq = got.seq + 1
        return True

    # --- intents pending --------------------------------------------------------------------

    async def intents_pending(self) -> None:
        """Intents waiting (queued + being applied): the autoscaling signal, read while the
        cluster has work, and once more after (to say 0)."""
        if not self.state.bundles:
            self.pending = 0  # nothing planned, nothing sent
            return
        # the objects with an intent in flight: exact however the intents travel (a batch of 32
        # is one message on the consumer, issue 44), and no request to NATS
        self.pending = sum(1 for _ in self.state.entries.overdue(math.inf))
        if self.inflight() or self.pending:
            self.alarms.set("pending", self.s.stats_interval / 6)

    # --- the status tick ----------------------------------------------------------------------

    async def status(self) -> None:
        """The status of the bundles that changed (their marks set the alarm, so changes within
        ``status_interval`` are coalesced); then the holds and deletions it may have ended."""
        st = self.state
        if not st.live:
            return  # going live marks every bundle
        if (clock := time.monotonic()) >= self._next_stats:
            stats = st.cache_stats()
            if stats != self._last_stats:
                log.info("cluster %s: cache: %s", st.cluster, stats)
                self._last_stats = stats
            self._next_stats = clock + self.s.stats_interval
        await self.board.publish_changed()
        await self._holds_and_deletions()

    def refresh(self) -> None:
        """STATUS keeps messages for 7 days: a bundle unchanged for longer would vanish from
        `driftbus bundles`, `status` and the page; every status is published again daily."""
        for ident in self.state.bundles:
            self.board.answer(ident)
        self.board.mark_all(self.state.bundles)
        self.alarms.set("refresh", STATUS_REFRESH)

    # --- sync windows -------------------------------------------------------------------------

    def windows_changed(self, *, new: bool) -> None:
        """Look at the windows now: the windows in force changed (``new``: every bundle's
        status is looked at again), or a bundle was taken in (its next change may be sooner)."""
        self._windows_new |= new
        self.alarms.move("windows clock", 0)

    async def windows(self) -> None:
        """When a sync window opens or closes for a bundle of the cluster (or the windows
        change): the bundles' status is looked at again (the hold's message), and the bundles
        a window held are released the moment it closes — not on the next status tick."""
        st = self.state
        if not st.live:
            return  # going live looks at every window
        clock = st.gates.clock()
        boundary = self._window_boundary is not None and clock >= self._window_boundary - 0.01
        if boundary or self._windows_new:
            self.board.mark_all(st.bundles)
        self._windows_new = False
        for bundle in list(st.gates.held):
            if st.hold(bundle) is None:
                log.info("cluster %s: bundle %s: no sync window holds it", st.cluster, bundle)
                await self.release(bundle)
        wake = st.next_window_change()
        self._window_boundary = wake
        if wake is not None:
            self.alarms.move("windows clock", min(max(wake - clock, 0.05), WINDOWS_IDLE))
        elif st.gates.windows:
            self.alarms.move("windows clock", WINDOWS_IDLE)

    async def _holds_and_deletions(self) -> None:
        """After the tick (phases are current): release the bundles whose hold ended (their
        dependencies became Ready), and forget the deleted bundles whose prunes are done."""
        st = self.state
        for bundle in list(st.gates.held):
            if st.hold(bundle) is None:
                await self.release(bundle)
        for ident, view in list(st.bundles.items()):
            if view.deleting and st.gates.phases.get(view.name) is BundlePhase.DELETED:
                log.info("bundle %s/%s: deleted; forgotten", *ident)
                del st.bundles[ident]
