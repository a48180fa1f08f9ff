"""The one way an event changes an object's entry: folded into the decision rule (``step``),
its bundle marked for the status board, and what the rule decides published (``sending``) —
and the level-triggered prune, which is folding a ``Removed`` into each stray.

While the planner rebuilds from the streams an event is only folded (``restore``): nothing is
decided before the rebuild completes. The run loop, the bundle intake and the periodic duties
all change entries through here, one message at a time, so no two changes interleave.
"""

from __future__ import annotations

import logging
import time

from schemas.decision import DecisionAction, DecisionReason
from schemas.messages import Health
from schemas.subjects import ObjectKey
from services.core import hooks
from services.planner.memory.cluster import ClusterState
from services.planner.rule import prune, waves
from services.planner.rule.decide import (
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Failed,
    Release,
    Removed,
    Resend,
    restore,
    step,
)
from services.planner.rule.entry import Slot
from services.planner.rule.holds import Hold
from services.planner.rule.replay import Inputs
from services.planner.rule.revision import BundleView
from services.planner.shell.sending import Decisions, may_batch
from services.planner.shell.status_board import StatusBoard
from services.planner.shell.yielding import pace, stepped

log = logging.getLogger("driftbus.planner")

PRUNE_STAGE: hooks.Stage = hooks.DEFAULT_STAGE
"""Where the prunes of a staged revision go: its sync phase, wave 0 (Argo CD's default wave)."""


class Folder:
    """Folds events into one cluster's entries and prunes its bundles' strays."""

    def __init__(self, *, state: ClusterState, board: StatusBoard, decisions: Decisions) -> None:
        self.state = state
        self.board = board
        self.decisions = decisions
        self._gates: dict[tuple[str, str], tuple[BundleView, waves.Gate]] = {}
        self._tracks: dict[tuple[str, str], tuple[BundleView, waves.Track]] = {}
        self._by_stage: dict[
            tuple[str, str], tuple[BundleView, dict[hooks.Stage, list[ObjectKey]]]
        ] = {}
        """each staged revision's objects not done, per stage (``waves.Track``)"""
        """each staged revision's gate as last seen: what opened since is decided again"""
        self._hook_deletes: set[tuple[Slot, bytes | None]] = set()
        """hooks whose policy delete was sent (per manifest: once per revision)"""

    async def send_again(self, slot: Slot, *, unqueued: bool) -> None:
        """The object's intent is lost (``lost_intents``): decide again (``Resend``).
        ``unqueued``: no intent of the object is queued at all, so the one sent again may
        travel in a batch (thousands lost at once are a few messages, not thousands)."""
        await self.fold(slot, Resend(), batch=unqueued)

    async def fold(self, slot: Slot, event: Event, *, batch: bool = False) -> None:
        """Fold one event into the object's entry; live, publish what it decides (``batch``:
        an apply may travel in a batch even with an intent in flight)."""
        entries = self.state.entries
        entry = entries.get(slot) or Entry(slot[1])
        if not self.state.live:
            entries[slot] = restore(entry, event)
            return
        of = event.bundle if isinstance(event, Desired | Removed) else entry.bundle
        pruning = isinstance(event, Removed)
        hold, of_bundle = self.hold_of(slot, of or entry.owner_bundle, pruning=pruning)
        inputs = Inputs(entry, event, hold.reason if hold is not None else None)  # its record's
        batchable = batch or may_batch(entry)  # as it was before this event
        entry, decision = step(entry, event, now=time.time(), hold=inputs.hold)
        entries[slot] = entry
        if isinstance(event, Applied | Failed) and self.decisions.batches is not None:
            self.decisions.batches.forget(slot)  # answered: no batch to look up for it
        if of_bundle and decision is not None and decision.action is DecisionAction.HOLD:
            self.state.gates.held.add(of or entry.owner_bundle)
        removed_from = event.bundle if isinstance(event, Removed) else ""
        bundle = entry.bundle or entry.owner_bundle or removed_from
        if bundle:
            self.board.mark((slot[0], bundle))
            self.board.continue_current_span((slot[0], bundle))
        if decision is not None:
            await self.decisions.publish(
                slot, decision, removed_from=removed_from, inputs=inputs, batchable=batchable
            )
        if entry.bundle and not isinstance(event, Removed):
            await self.advance(slot, entry.bundle)

    def hold_of(
        self, slot: Slot, bundle: str, *, pruning: bool = False
    ) -> tuple[Hold | None, bool]:
        """Why a write of the object for ``bundle`` waits now, and whether the hold is the whole
        bundle's (suspended, a dependency, a window: released together when it ends, by the
        periodic duty) rather than the object's own (a sync wave: released as waves finish).

        ``pruning``: the object left ``bundle``'s revision; the prune budget may hold it
        (``weigh_prunes`` said so last, for the revision in force). A staged revision prunes in
        its sync phase at wave 0, as Argo CD does: after its pre-sync hooks (and any negative
        wave) are done, never when one of them failed — a revision stopped by a failing hook
        writes nothing, deletes included. ``advance`` prunes again when that stage opens."""
        if not bundle:
            return None, False
        hold = self.state.hold(bundle)
        if hold is not None:
            return hold, True
        budget = self.state.gates.prune_held.get(bundle) if pruning else None
        if budget is not None and slot[1] in budget.held:
            # the prune budget holds the revision's deletions until approved (``rule.budget``)
            return Hold(DecisionReason.PRUNE_BUDGET, budget.message), False
        view = self.state.bundles.get((slot[0], bundle))
        if view is None or not view.stages:
            return None, False
        stage = view.stages.get(slot[1])
        if stage is None and pruning and slot[1] not in view.hooks:
            stage = PRUNE_STAGE
        if stage is None:
            return None, False
        gate = self.gate(view, slot)
        if gate.may_write(stage):
            return None, False
        why = gate.why() or "waits for the revision to fail (a sync-fail hook)"
        return Hold(DecisionReason.WAVE, why), False

    def gate(self, view: BundleView, changed: Slot | None = None) -> waves.Gate:
        """Where the writes of ``view``'s revision stand (``rule.waves``), with what the
        object at ``changed`` is now (every fold passes here for its object: the track of
        the revision stays current without recounting it)."""
        if not view.stages:
            return waves.OPEN
        entries, details = self.state.entries, self.state.details

        def state_of(key: ObjectKey) -> tuple[bool, bool]:
            slot = (view.cluster, key)
            return waves.state(entries.get(slot), details.health(slot)[0], view.revision)

        ident = (view.cluster, view.name)
        held = self._tracks.get(ident)
        if held is None or held[0] is not view:
            self._tracks[ident] = held = (view, waves.Track(view.stages, state_of))
        elif changed is not None:
            held[1].update(changed[1], *state_of(changed[1]))
        return held[1].gate()

    async def advance(self, slot: Slot, bundle: str) -> None:
        """After an object of a staged revision changed: delete a hook that ended as its
        policy asks, and decide again on the objects its stage's end lets through."""
        ident = (slot[0], bundle)
        view = self.state.bundles.get(ident)
        if view is None:
            self._forget(ident)  # a bundle deleted: nothing of it is kept here
            return
        if slot[1] not in view.stages and slot[1] not in view.hooks:
            return
        gate = self.gate(view, slot)
        before = self._gates.get(ident)
        self._gates[ident] = (view, gate)
        old = before[1] if before is not None and before[0] is view else None
        # only where the revision stands counts (not which object the status names): an
        # object finishing inside a stage costs nothing more than its own update
        if old is not None and waves.same_standing(old, gate):
            await self._delete_ended_hook(slot, view, gate)
            return
        for stage, keys in self._stages_of(view).items():
            if gate.may_write(stage) and (old is None or not old.may_write(stage)):
                for key in keys:  # released: decided again, each once per opening
                    entry = self.state.entries.get((slot[0], key))
                    if entry is not None and entry.revision == view.revision:
                        await self.fold((slot[0], key), Release())
        for key in list(view.hooks):  # a phase ended: its hooks' policies may delete them now
            await self._delete_ended_hook((slot[0], key), view, gate)
        if gate.may_write(PRUNE_STAGE) and (old is None or not old.may_write(PRUNE_STAGE)):
            await self.prune(view)  # what left the revision waited for this stage (hold_of)

    async def resume(self, view: BundleView) -> None:
        """After a rebuild: release what the revision's gate lets through and delete the hooks
        that ended meanwhile as their policies ask (nothing may fold for a quiet revision)."""
        first = next(iter(view.stages), None) or next(iter(view.hooks), None)
        if first is not None:
            self._gates.pop((view.cluster, view.name), None)
            await self.advance((view.cluster, first), view.name)

    def _forget(self, ident: tuple[str, str]) -> None:
        self._gates.pop(ident, None)
        self._tracks.pop(ident, None)
        self._by_stage.pop(ident, None)

    def _stages_of(self, view: BundleView) -> dict[hooks.Stage, list[ObjectKey]]:
        """``view``'s objects per stage, computed once per revision."""
        ident = (view.cluster, view.name)
        held = self._by_stage.get(ident)
        if held is None or held[0] is not view:
            self._by_stage[ident] = held = (view, waves.by_stage(view.stages))
        return held[1]

    async def _delete_ended_hook(self, slot: Slot, view: BundleView, gate: waves.Gate) -> None:
        """A hook is deleted when its policy says so, once per revision: ``hook-failed`` as
        soon as it failed, ``hook-succeeded`` once every hook of its (last) phase is done, as
        Helm does (a Job's ServiceAccount, itself a hook, stays until the Job is done). Its
        tombstone is then its end (``health.retiring``), not drift."""
        hook = view.hooks.get(slot[1])
        e = self.state.entries.get(slot)
        if hook is None or not hook.deletable or e is None or not e.live or e.inflight is not None:
            return
        h = self.state.details.health(slot)[0]
        ended_as = (
            hooks.SUCCEEDED if h is Health.READY else hooks.FAILED if h is Health.FAILED else ""
        )
        done = e.revision == view.revision and e.applied_manifest_sha == e.manifest_sha
        if not done or not e.observed or ended_as not in hook.delete_policies:
            return
        if ended_as == hooks.SUCCEEDED and not waves.phase_done(gate, hook.until):
            return
        mark = (slot, e.manifest_sha)
        if mark in self._hook_deletes:
            return
        if len(self._hook_deletes) > 10_000:  # a delete sent again finds nothing: harmless
            self._hook_deletes.clear()
        self._hook_deletes.add(mark)
        await self.decisions.publish(slot, Decision(DecisionAction.DELETE, DecisionReason.HOOK))

    async def prune(self, view: BundleView) -> None:
        """Level-triggered prune: live objects carrying this bundle's label, not in its revision.

        Covers revisions that changed while the planner was down, take-overs and prune switched
        back on: nothing relies on having seen the previous revision. The revision's deletions
        are weighed against the prune budget first: those it holds are decided ``hold``.
        """
        await self.weigh(view)
        if not self.state.may_prune():
            return
        entries = self.state.entries
        # the candidates from the records' headers: unpacking every entry of a big cluster in
        # one piece held the event loop for seconds
        for i, slot in enumerate(entries.labelled(view.cluster, view.name)):
            await pace(i)
            entry = entries.get(slot)
            if entry is not None and prune.strays_from(entry, view):
                await self.fold(slot, self.state.removed(slot, view))

    async def prune_stray(self, slot: Slot) -> None:
        """A live object seen carrying the label of a bundle that does not declare it."""
        st = self.state
        entry = st.entries.get(slot)
        if entry is None or not st.may_prune():
            return
        view = st.bundles.get((slot[0], entry.owner_bundle))
        if view is None or view.refused is not None or not prune.strays_from(entry, view):
            return
        if st.weighed(view, entry.key):
            # weighed already, with the bundle's other deletions: held or let go as they are
            # (a relist of a held bundle costs a fold per object, not the bundle's prune each)
            await self.fold(slot, st.removed(slot, view))
            return
        # not weighed yet: weighed with the bundle's other deletions, never alone
        await self.prune(view)

    async def weigh(self, view: BundleView) -> None:
        """Weigh ``view``'s deletions against the prune budget (``ClusterState.weigh_prunes``);
        its status is counted again when the verdict changed."""
        before = self.state.gates.prune_held.get(view.name)
        after = await stepped(self.state.weighing_prunes(view))
        if after != before:
            self.board.mark((view.cluster, view.name))
            if after is not None:
                log.warning("bundle %s/%s: %s", view.cluster, view.name, after.message)
