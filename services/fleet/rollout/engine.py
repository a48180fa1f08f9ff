"""The rollout rule (pure): from a rollout's state, the fleet's members and each cluster's bundle
status, the next state, the placements to make and the transitions to record.

One call of ``advance`` is one tick of the driver: it runs the rules (``OpenTick``'s, in
``services.fleet.rollout.tick``, and the rollback's, in ``services.fleet.rollout.rollback``) in
their order. It never looks at a clock or the bus: what it needs is passed in, what it wants done
is returned, so every row of docs/fleet.md's state table is a unit test. The driver writes the new
state with compare-and-set **before** it acts, so a driver killed mid-tick leaves a state whose
placements and events a replacement completes (``services/fleet/driver/drive.py``): no step is
repeated and none skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from typing import Literal

import msgspec

from schemas.fleet import ClusterRollout, Placement, RolloutPhase, RolloutSpec, RolloutState
from services.fleet.rollout import leave, rollback
from services.fleet.rollout.steps import DEFAULT_LEAVE_BUDGET, Event, LeaveBudget, Observed, Tick
from services.fleet.rollout.tick import OpenTick


def start(
    *,
    bundle: str,
    target: Placement,
    spec: RolloutSpec,
    selector: str,
    clusters_named: Sequence[str],
    on_leave: Literal["prune", "orphan"],
    tenant: str,
    source_seq: int,
    now: dt.datetime,
    before: RolloutState | None,
) -> tuple[RolloutState, Event]:
    """The state of a new revision's rollout. The revision in force before it is what a
    rollback puts back: the earlier target if its rollout completed, else what that one would
    have gone back to. Clusters keep the revision they are on until their step."""
    previous = None
    clusters: dict[str, ClusterRollout] = {}
    events = placements = control_seq = 0
    paused = False
    if before is not None:
        previous = before.target if before.phase is RolloutPhase.COMPLETE else before.previous
        # a refusal was of the revision that left: the new one is judged afresh
        clusters = {c: e for c, e in before.clusters.items() if e.state != "refused"}
        events, placements = before.events, before.placements
        paused = before.paused  # a pause holds across revisions, as kubectl's does
        control_seq = before.control_seq
        if before.phase is RolloutPhase.DELETED:
            previous, clusters = None, {}
    state = RolloutState(
        bundle=bundle,
        target=target,
        previous=previous,
        spec=spec,
        selector=selector,
        clusters_named=list(clusters_named),
        on_leave=on_leave,
        tenant=tenant,
        phase=RolloutPhase.PROGRESSING,
        step=0,
        step_started_at=now,
        clusters=clusters,
        paused=paused,
        control_seq=control_seq,
        events=events,
        placements=placements,
        first_seq=placements,
        source_seq=source_seq,
        updated_at=now,
    )
    steps = len(spec.steps) + 1
    return state, Event(
        "started", (), f"revision {target.revision}: {steps} steps", RolloutPhase.PROGRESSING
    )


def advance(
    state: RolloutState,
    members: Mapping[str, Mapping[str, str]],
    observed: Mapping[str, Observed],
    now: dt.datetime,
    *,
    refusals: Mapping[str, str] | None = None,
    excluded: Mapping[str, str] | None = None,
    unknown: Collection[str] = (),
    leave_budget: LeaveBudget = DEFAULT_LEAVE_BUDGET,
) -> Tick:
    """One tick. ``members``: the fleet's clusters (selector, names and tenant limits applied)
    and their labels; ``observed``: each cluster's last status of the bundle; ``refusals``:
    clusters the target cannot be placed in (a substitution names a label they lack), with the
    reason; ``excluded``: clusters the selector names that the tenant may not use;
    ``unknown``: clusters whose registry entry cannot be read or is missing with no removal
    recorded (a lost bucket): neither has left, so both keep what they have;
    ``leave_budget``: how many clusters may leave (be pruned) at once without an approval."""
    t = OpenTick(state, now, frozenset(excluded or ()) | frozenset(unknown))
    if excluded is not None and dict(excluded) != state.excluded:
        t.state = msgspec.structs.replace(t.state, excluded=dict(excluded))
        if excluded:
            t.note(
                Event(
                    "excluded",
                    tuple(sorted(excluded)),
                    "; ".join(f"{c}: {why}" for c, why in sorted(excluded.items())),
                )
            )
    if t.state.phase is RolloutPhase.DELETED:
        return t.done()
    leave.leave(t, members, leave_budget)
    t.observe(observed)
    t.pause_or_resume()
    if t.state.phase in (RolloutPhase.PROGRESSING, RolloutPhase.PAUSED):
        t.gate(members, refusals or {})
    rollback.settle(t)  # a rollback (begun by a halt, now or before) ends only when checked
    t.join(members, refusals or {})
    return t.done()


def delete(state: RolloutState, now: dt.datetime, *, orphan: bool) -> Tick:
    """Delete the fleet bundle from every cluster it reached."""
    t = OpenTick(state, now)
    live = sorted(c for c, e in state.clusters.items() if e.state != "removed")
    for cluster in live:
        t.remove(cluster, orphan=orphan)
    t.state = msgspec.structs.replace(t.state, phase=RolloutPhase.DELETED)
    t.note(Event("deleted", tuple(live), "orphaned" if orphan else "pruned"))
    return t.done()
