"""The planner's periodic duties beside its run loop: who serves the cluster (heartbeats), lost
intents sent again, the intents pending, the bundle status tick, and the sync windows' clock
(what a window held is released the moment it closes).

Each is a loop the planner runs as a task for as long as it plans the cluster; one that ends
ends the planning (``PlannerStopped``). They share the cluster state with the run loop and change
an entry only through its ``fold``, between two of its messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from schemas.messages import BundlePhase
from schemas.subjects import object_subject
from services.clusters import members
from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.planner.rule import messages
from services.planner.rule.decide import Resend, Working
from services.planner.rule.entry import Slot
from services.planner.settings import PlannerSettings
from services.planner.shell.intake import BundleIntake, Fold, Prune
from services.planner.shell.status_board import StatusBoard

log = logging.getLogger("driftbus.planner")
STATUS_REFRESH = 24 * 3600.0
STATUS_IDLE = 5.0
"""Seconds the status tick of a cluster with nothing marked sleeps (holds and deletions are
looked at after each tick that had work, and at least this often)."""
"""Every bundle's status is published again this often, changed or not (STATUS keeps 7 days)."""
WINDOWS_IDLE = 3600.0
"""Seconds the sync windows' clock sleeps when no window names a bundle of the cluster."""


class Duties:
    """The periodic loops of one cluster's planner. Changes the state's ``unserved`` and
    ``watcher_synced``, entries through ``fold``; ``pending`` is its own."""

    def __init__(
        self,
        *,
        settings: PlannerSettings,
        js: bus.JetStream,
        state: ClusterState,
        board: StatusBoard,
        intake: BundleIntake,
        fold: Fold,
        prune: Prune,
        release: Callable[[str], Awaitable[None]],
    ) -> None:
        self.s = settings
        self.js = js
        self.state = state
        self.board = board
        self.intake = intake
        self.fold = fold
        self.prune = prune
        self.release = release
        self.pending: int | None = None
        """Intents of this cluster queued or being applied (None until known)."""
        self._windows_wake = asyncio.Event()
        self._windows_new = False

    async def members(self) -> None:
        """Who serves the cluster (watcher, applier heartbeats); prune waits for the watcher's
        initial lists, and starts the moment they are complete."""
        st, cluster = self.state, self.state.cluster
        while True:
            try:
                beats = await members.heartbeats(self.js, cluster)
            except Exception as exc:  # noqa: BLE001 - NATS away: keep the last view
                log.debug("cluster %s: heartbeats not read: %s", cluster, exc)
            else:
                now = messages.now()
                if (watcher_beat := beats.get("watcher")) is not None:
                    self.intake.learn_scopes(watcher_beat.scopes)
                unserved = members.serving(cluster, beats, now)
                synced = members.watcher_synced(beats.get("watcher"), now)
                became_synced = synced and not st.watcher_synced
                if unserved != st.unserved or synced != st.watcher_synced:
                    self.board.mark_all(st.bundles)
                st.unserved, st.watcher_synced = unserved, synced
                if became_synced and st.live:
                    log.info("cluster %s: the watcher's lists are complete: prune", cluster)
                    for view in list(st.bundles.values()):
                        await self.prune(view)
            await asyncio.sleep(self.s.members_interval)

    async def resend(self, backlog: Callable[[], int]) -> None:
        """Send again what got no word for ``intent_timeout`` and is no longer queued: a lost
        intent (its publish never landed, a dedup-window collision, a crash between ack and
        fact) must not silence the object's healing for good. Checked only when the planner has
        caught up with its input: a backlog of applied facts is not a lost intent."""
        timeout = self.s.intent_timeout
        entries = self.state.entries
        while True:
            await asyncio.sleep(max(0.5, timeout / 4))
            if not self.state.live or backlog() > 100:
                continue
            now = time.time()
            for slot in list(entries.overdue(now - timeout)):
                entry = entries.get(slot)
                if entry is None or entry.inflight is None:
                    continue
                try:
                    queued = await bus.last_message(
                        self.js, bus.INTENTS, object_subject("intent", slot[0], slot[1])
                    )
                    unread = queued is None and await self._fact_unread(slot)
                except Exception as exc:  # noqa: BLE001 - NATS away: ask again next round
                    log.debug("%s: intent queue not read: %s", slot[1], exc)
                    continue
                if entries.get(slot) != entry:
                    continue  # a fact was folded meanwhile: ask again next round if need be
                if queued is not None and messages.is_inflight(queued.data, entry):
                    await self.fold(slot, Working(entry.inflight, now))  # queued: not lost
                    continue
                if unread:
                    continue  # answered: the fact is on its way to us
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
        return False

    async def intents_pending(self) -> None:
        """Intents waiting (queued + being applied): the autoscaling signal."""
        while True:
            await asyncio.sleep(self.s.stats_interval / 6)
            if (
                self.state.bundles
                and (n := await bus.intents_pending(self.js, self.state.cluster)) is not None
            ):
                self.pending = n

    async def status(self) -> None:
        """Every ``status_interval``: the status of the bundles that changed; every
        ``stats_interval``, the cache's hits and misses when they changed."""
        last_stats: dict[str, Any] = {}
        next_stats = 0.0
        loop = asyncio.get_running_loop()
        next_refresh = loop.time() + STATUS_REFRESH
        while True:
            if self.state.live:
                # nothing marked: sleep until something is (or the periodic duties are due),
                # so an idle cluster costs a wake-up every few seconds, not five a second
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.board.marked.wait(), STATUS_IDLE)
                self.board.marked.clear()
            await asyncio.sleep(self.s.status_interval)  # changes within it are coalesced
            if not self.state.live:
                continue
            if loop.time() >= next_stats:
                stats = self.state.cache_stats()
                if stats != last_stats:
                    log.info("cluster %s: cache: %s", self.state.cluster, stats)
                    last_stats = stats
                next_stats = loop.time() + self.s.stats_interval
            if loop.time() >= next_refresh:
                # STATUS keeps messages for 7 days: a bundle unchanged for longer would vanish
                # from `driftbus bundles`, `status` and the page
                for ident in self.state.bundles:
                    self.board.answer(ident)
                self.board.mark_all(self.state.bundles)
                next_refresh = loop.time() + STATUS_REFRESH
            await self.board.publish_changed()
            await self._holds_and_deletions()

    def windows_changed(self, *, new: bool) -> None:
        """Wake the windows' clock: the windows in force changed (``new``: every bundle's
        status is looked at again), or a bundle was taken in (its next change may be sooner)."""
        self._windows_new |= new
        self._windows_wake.set()

    async def windows(self) -> None:
        """Wake when a sync window opens or closes for a bundle of the cluster (or the windows
        change): the bundles' status is looked at again (the hold's message), and the bundles
        a window held are released the moment it closes — not on the next status tick."""
        st = self.state
        while True:
            wake = st.next_window_change()
            delay = WINDOWS_IDLE if wake is None else min(max(wake - st.gates.clock(), 0.05), 3600)
            try:
                await asyncio.wait_for(self._windows_wake.wait(), delay)
                boundary = False
            except TimeoutError:
                boundary = True
            self._windows_wake.clear()
            if not st.live:
                continue
            if boundary or self._windows_new:
                self.board.mark_all(st.bundles)
            self._windows_new = False
            for bundle in list(st.gates.held):
                if st.hold(bundle) is None:
                    log.info("cluster %s: bundle %s: no sync window holds it", st.cluster, bundle)
                    await self.release(bundle)

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
