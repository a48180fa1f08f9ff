"""Which objects of a revision may be written now: its hooks and sync waves (pure).

A revision's objects are written stage by stage (``core.hooks``: pre-sync hooks, then the sync
waves, then post-sync hooks, each ordered by its wave): an object may be written once every
object of every lower stage is *done* — this revision's manifest applied, seen by the watcher as
applied and Ready (a Job Complete), or ended and deleted by its hook's policy. While an object is
not done, the stages above it wait (``Hold`` with reason ``wave``); a failed object (a hook Job
that failed, an apply that failed) stops the revision there: what comes after is never written,
and the sync-fail hooks are. A revision whose objects are all in one stage has no gate at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from schemas.messages import Health
from schemas.subjects import ObjectKey
from services.core.hooks import Phase, Stage
from services.planner.rule.entry import Entry


@dataclasses.dataclass(frozen=True, slots=True)
class Gate:
    """Where a revision's writes stand: ``frontier``, the lowest stage (of the sync-fail hooks'
    stage aside) holding an object not done (None: all done); ``failed``, an object of the
    revision failed (then the sync-fail hooks run); ``waiting_on``, an object of the frontier
    that is not done, for the status."""

    frontier: Stage | None
    failed: bool = False
    waiting_on: ObjectKey | None = None
    fail_pending: bool = False
    """a sync-fail hook is not done (not run, or running)"""

    def may_write(self, stage: Stage) -> bool:
        if stage[0] == Phase.FAIL:
            return self.failed
        return self.frontier is None or stage <= self.frontier

    def why(self) -> str:
        """For the held objects' decision and the status: what they wait for."""
        if self.frontier is None:
            return ""
        phase = Phase(self.frontier[0]).name.lower()
        what = f" ({self.waiting_on})" if self.waiting_on is not None else ""
        return f"waits for {phase} wave {self.frontier[1]} to finish{what}"


OPEN = Gate(None)


def same_standing(a: Gate, b: Gate) -> bool:
    """Whether two gates let the same stages through and end the same phases (they may name
    another object waited for)."""
    return (a.frontier, a.failed, a.fail_pending) == (b.frontier, b.failed, b.fail_pending)


def by_stage(stages: Mapping[ObjectKey, Stage]) -> dict[Stage, list[ObjectKey]]:
    """The revision's objects per stage."""
    out: dict[Stage, list[ObjectKey]] = {}
    for key, stage in stages.items():
        out.setdefault(stage, []).append(key)
    return out


def phase_done(gate: Gate, phase: int) -> bool:
    """Whether every object of ``phase`` and of the phases before it is done (the sync-fail
    phase: the revision failed and every sync-fail hook is done)."""
    if phase == Phase.FAIL:  # ends with the revision: failed (its hooks done) or done
        return (gate.frontier is None and not gate.failed) or (
            gate.failed and not gate.fail_pending
        )
    return gate.frontier is None or gate.frontier[0] > phase


def state(e: Entry | None, health: Health, revision: str) -> tuple[bool, bool]:
    """(done, failed) of one object for ``revision``."""
    if e is None or e.revision != revision or e.manifest_sha is None:
        return False, False
    if e.failing:
        return False, True
    applied = e.applied_manifest_sha == e.manifest_sha and e.inflight is None
    if not applied:
        return False, False
    if e.server_retired and e.server_deleted and e.server_rv >= e.applied_rv:
        # ended, and deleted by its hook's policy (or its TTL): as it ended
        return health is not Health.FAILED, health is Health.FAILED
    if not e.observed or e.drifted:
        return False, False
    return health is Health.READY, health is Health.FAILED


def gate(
    stages: Mapping[ObjectKey, Stage],
    state_of: Callable[[ObjectKey], tuple[bool, bool]],
) -> Gate:
    """The gate of a revision whose objects are in ``stages`` (``state_of``: done, failed)."""
    return Track(stages, state_of).gate()


class Track:
    """A revision's gate kept current one object at a time: ``update`` costs the same for a
    revision of ten objects or of twenty thousand, and ``gate`` one step per stage (the
    planner folds every object's every fact: recounting the revision each time was
    quadratic)."""

    def __init__(
        self,
        stages: Mapping[ObjectKey, Stage],
        state_of: Callable[[ObjectKey], tuple[bool, bool]],
    ) -> None:
        self.stages = stages
        # per stage, its objects not done, in the order they became so (a dict as an ordered
        # set: the first is the one the status names)
        self._pending: dict[Stage, dict[ObjectKey, None]] = {}
        self._failed: set[ObjectKey] = set()
        for key in stages:
            self.update(key, *state_of(key))

    def update(self, key: ObjectKey, done: bool, bad: bool) -> None:
        stage = self.stages.get(key)
        if stage is None:
            return
        pending = self._pending.setdefault(stage, {})
        if done:
            pending.pop(key, None)
        else:
            pending.setdefault(key, None)
        if bad and stage[0] != Phase.FAIL:
            self._failed.add(key)
        else:
            self._failed.discard(key)

    def gate(self) -> Gate:
        frontier: Stage | None = None
        fail_pending = False
        for stage, keys in self._pending.items():
            if not keys:
                continue
            if stage[0] == Phase.FAIL:
                fail_pending = True
            elif frontier is None or stage < frontier:
                frontier = stage
        waiting_on = next(iter(self._pending[frontier])) if frontier is not None else None
        return Gate(frontier, bool(self._failed), waiting_on, fail_pending)


def staged(stages: Mapping[ObjectKey, Stage]) -> bool:
    """Whether the revision has more than one stage: only then is anything gated."""
    first = next(iter(stages.values()), None)
    return any(s != first for s in stages.values())
