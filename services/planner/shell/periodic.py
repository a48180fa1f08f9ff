"""The planner's periodic duties beside its run loop: who serves the cluster (heartbeats), lost
intents sent again, the intents pending, the bundle status tick, and the sync windows' clock
(what a window held is released the moment it closes).

Each duty runs once per call, in the cluster's run loop between two of its messages, when its
alarm rings (``shell.alarms``: one ``call_at`` handle per duty, set only when there is work) or
when the hub says the members' heartbeats changed. They change an entry only through ``fold``,
except an intent found still queued: its wait starts again in the store's header alone
(``EntryStore.still_inflight``, what ``decide``'s ``Working`` does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from schemas.messages import BundlePhase, KindScope, MemberHeartbeat
from schemas.subjects import object_subject
from services.clusters import members
from services.common import bus
from services.core.manifest import apply_order_text
from services.planner.memory.cluster import ClusterState
from services.planner.rule import messages
from services.planner.rule.entry import Slot
from services.planner.settings import PlannerSettings
from services.planner.shell import lost_intents
from services.planner.shell.alarms import Alarms
from services.planner.shell.intake import BundleIntake, Fold, Prune
from services.planner.shell.intent_batches import IntentBatches
from services.planner.shell.status_board import StatusBoard
from services.planner.shell.yielding import in_order, pace

log = logging.getLogger("driftbus.planner")


class SendAgain(Protocol):
    async def __call__(self, slot: Slot, *, unqueued: bool) -> None: ...


STATUS_REFRESH = 24 * 3600.0
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
        send_again: SendAgain,
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
        self.send_again = send_again
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
        return self.state.entries.inflight > 0

    async def resend(self, backlog: int) -> None:
        """Send again what got no word for ``intent_timeout`` and is no longer queued
        (``lost_intents``). Checked only when the planner has caught up with its input: a
        backlog of applied facts is not a lost intent. Rings again while anything is in
        flight."""
        timeout = self.s.intent_timeout
        if self.state.live and backlog <= 100:
            now = time.time()
            overdue = self.state.entries.overdue(now - timeout)
            if overdue:
                await self._resend(overdue, now)
        if self.inflight():
            self.alarms.set("resend", max(0.5, timeout / 4))

    async def _resend(self, overdue: list[Slot], now: float) -> None:
        st = self.state
        queued_in = self.batches.queued_in if self.batches is not None else {}
        landing = self.batches.landing if self.batches is not None else ()
        seen = await lost_intents.look(self.js, st.cluster, st.read_up_to, landing)
        if seen is None:
            return  # NATS cannot say: ask again next round
        # in apply order: a Namespace sent again goes before the objects that live in it
        overdue = await in_order(overdue, lambda s: apply_order_text(s[1]))
        for i, slot in enumerate(overdue):
            await pace(i)
            own = object_subject("intent", *slot)
            batch = queued_in.get(slot)
            doubtful = self.batches is None or slot in self.batches.doubtful
            verdict = lost_intents.verdict(slot[1], batch, own, seen, doubtful=doubtful)
            if verdict is lost_intents.Verdict.QUEUED:
                # still on its way: waits another timeout, in the record's header alone (most
                # of a queue being drained is this; a fold each was a quarter of the planner)
                st.entries.still_inflight(slot, now)
                continue
            entry = st.entries.get(slot)
            if entry is None or entry.inflight is None:
                continue
            unqueued = True
            match verdict:
                case lost_intents.Verdict.ASK:
                    try:
                        queued = await bus.last_message(self.js, bus.INTENTS, own)
                    except Exception as exc:  # noqa: BLE001 - NATS away: ask again next round
                        log.debug("%s: intent queue not read: %s", slot[1], exc)
                        continue
                    if queued is None or st.entries.get(slot) != entry:
                        # it left the queue since the look, so its fact may be newer than the
                        # unread tail read: ask again next round
                        continue
                    if messages.is_inflight(queued.data, entry):
                        st.entries.still_inflight(slot, now)
                        continue
                    if seen.unread is None or slot[1] in seen.unread:
                        continue
                    unqueued = False  # an older one waits on its subject: replace it
                case lost_intents.Verdict.ANSWERED:
                    if batch is not None and self.batches is not None:
                        self.batches.forget(slot)  # carried out: its own subject from now on
                    continue
            if batch is not None and self.batches is not None:
                self.batches.forget(slot)  # lost: its own subject from now on
            log.warning(
                "%s: no outcome of its intent for %.0fs and it is not queued: sending again",
                slot[1],
                now - entry.inflight_at,
            )
            st.counters["resent"] += 1
            await self.send_again(slot, unqueued=unqueued)

    # --- intents pending --------------------------------------------------------------------

    async def intents_pending(self) -> None:
        """Intents waiting (queued + being applied): the autoscaling signal, read while the
        cluster has work, and once more after (to say 0)."""
        if not self.state.bundles:
            self.pending = 0  # nothing planned, nothing sent
            return
        # the objects with an intent in flight: exact however the intents travel (a batch of 32
        # is one message on the consumer, issue 44), and no request to NATS
        self.pending = self.state.entries.inflight
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
