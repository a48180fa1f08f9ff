"""The one way an event changes an object's entry: folded into the decision rule (``step``),
its bundle marked for the status board, and what the rule decides published (``sending``) —
and the level-triggered prune, which is folding a ``Removed`` into each stray.

While the planner rebuilds from the streams an event is only folded (``restore``): nothing is
decided before the rebuild completes. The run loop, the bundle intake and the periodic duties
all change entries through here, one message at a time, so no two changes interleave.
"""

from __future__ import annotations

import time

from schemas.decision import DecisionAction
from services.planner.memory.cluster import ClusterState
from services.planner.rule import prune
from services.planner.rule.decide import Desired, Entry, Event, Removed, restore, step
from services.planner.rule.entry import Slot
from services.planner.rule.holds import Hold
from services.planner.rule.revision import BundleView
from services.planner.shell.sending import Decisions, pace
from services.planner.shell.status_board import StatusBoard


class Folder:
    """Folds events into one cluster's entries and prunes its bundles' strays."""

    def __init__(self, *, state: ClusterState, board: StatusBoard, decisions: Decisions) -> None:
        self.state = state
        self.board = board
        self.decisions = decisions

    async def fold(self, slot: Slot, event: Event) -> None:
        """Fold one event into the object's entry; live, publish what it decides."""
        entries = self.state.entries
        entry = entries.get(slot) or Entry(slot[1])
        if not self.state.live:
            entries[slot] = restore(entry, event)
            return
        of = event.bundle if isinstance(event, Desired | Removed) else entry.bundle
        hold, of_bundle = self.hold_of(slot, of or entry.owner_bundle)
        entry, decision = step(
            entry, event, now=time.time(), hold=hold.reason if hold is not None else None
        )
        entries[slot] = entry
        if of_bundle and decision is not None and decision.action is DecisionAction.HOLD:
            self.state.held.add(of or entry.owner_bundle)
        removed_from = event.bundle if isinstance(event, Removed) else ""
        bundle = entry.bundle or entry.owner_bundle or removed_from
        if bundle:
            self.board.mark((slot[0], bundle))
            self.board.continue_current_span((slot[0], bundle))
        if decision is not None:
            await self.decisions.publish(slot, decision, removed_from=removed_from)

    def hold_of(self, slot: Slot, bundle: str) -> tuple[Hold | None, bool]:
        """Why a write of the object for ``bundle`` waits now, and whether the hold is the whole
        bundle's (suspended, a dependency, a window: released together when it ends, by the
        periodic duty) rather than the object's own (a sync wave: released as waves finish)."""
        if not bundle:
            return None, False
        hold = self.state.hold(bundle)
        return hold, hold is not None

    async def prune(self, view: BundleView) -> None:
        """Level-triggered prune: live objects carrying this bundle's label, not in its revision.

        Covers revisions that changed while the planner was down, take-overs and prune switched
        back on: nothing relies on having seen the previous revision.
        """
        if not self.state.may_prune():
            return
        for i, (slot, entry) in enumerate(list(self.state.entries.items(cluster=view.cluster))):
            await pace(i)
            if prune.strays_from(entry, view):
                await self.fold(slot, self.state.removed(slot, view))

    async def prune_stray(self, slot: Slot) -> None:
        """A live object seen carrying the label of a bundle that does not declare it."""
        st = self.state
        entry = st.entries.get(slot)
        if entry is None or not st.may_prune():
            return
        view = st.bundles.get((slot[0], entry.owner_bundle))
        if view is not None and view.refused is None and prune.strays_from(entry, view):
            await self.fold(slot, st.removed(slot, view))
