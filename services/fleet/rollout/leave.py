"""A cluster leaving a fleet (pure): the bundle deleted there, unless more leave at once than
the fleet prune budget lets through (docs/fleet.md, "The fleet prune budget").

``leave`` is the rule of the state table's "a cluster leaves the fleet" rows, run by
``engine.advance`` on the tick's ``OpenTick``. Clusters leaving within ``LeaveBudget.settle`` of
each other are one change (``driftbus clusters label`` changes one cluster at a time); those
pruned for leaving within ``LeaveBudget.window`` count with them. Pruning on more of the
bundle's clusters at once than the budget lets through waits for ``driftbus approve``
(``RolloutState.leave_held``; ``steer`` takes the approval); a held cluster that comes back is
simply no longer held, with nothing deleted.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from schemas.fleet import RolloutPhase
from services.fleet.rollout.steps import DEFAULT_LEAVE_BUDGET, Event, LeaveBudget
from services.fleet.rollout.tick import OpenTick


def leave(
    t: OpenTick,
    members: Mapping[str, Mapping[str, str]],
    budget: LeaveBudget = DEFAULT_LEAVE_BUDGET,
) -> None:
    """A cluster that left the fleet (labels, removal) gets the bundle deleted. Quiet
    clusters have not left: only ``members`` (the registry) decides. Never while a rollout
    is under way or stopped: a revision whose selector leaves clusters out removes them
    only once it is in force everywhere else (a typo in a selector halts nothing by
    pruning first), and a halted one removes nothing. Pruning on more clusters at once
    than ``budget`` lets through waits for ``driftbus approve`` (``leave_held``): those
    clusters keep what they have, and one that comes back is simply no longer held."""
    if t.state.phase is not RolloutPhase.COMPLETE:
        return
    live = [c for c, e in t.state.clusters.items() if e.state != "removed"]
    gone = sorted(c for c in live if c not in members and c not in t.excluded)
    if t.state.on_leave != "orphan" and (gone or t.state.left_at):
        gone = _budgeted(t, gone, len(live), budget)
    for cluster in gone:
        t.remove(cluster, orphan=t.state.on_leave == "orphan")
    if gone:
        how = "kept in place (on-leave orphan)" if t.state.on_leave == "orphan" else "pruned"
        t.note(Event("left", tuple(gone), f"left the fleet: the bundle is {how}"))


def _budgeted(t: OpenTick, gone: list[str], live: int, budget: LeaveBudget) -> list[str]:
    """Of the clusters that left, those pruned now: the approved ones, and the rest once
    none has left for ``budget.settle`` (one change) and only within ``budget``, counting
    the clusters pruned for leaving in the last ``budget.window`` too; the others are held
    (``leave_held``, noted once) until approved or back in the fleet — one held stays held
    when others are approved."""
    s, now = t.state, t.now
    left_at = {c: s.left_at.get(c, now) for c in gone}
    approved = [c for c in gone if c in s.leave_approved]
    rest = [c for c in gone if c not in approved]
    settling = any((now - left_at[c]).total_seconds() < budget.settle for c in rest)
    recent = [
        c
        for c, e in s.clusters.items()
        if e.state == "removed"
        and e.message == "pruned"
        and e.at is not None
        and (now - e.at).total_seconds() < budget.window
    ]
    over = not settling and budget.exceeded(len(rest) + len(recent), live + len(recent))
    held = [c for c in rest if over or c in s.leave_held]
    go = approved if settling else [c for c in gone if c not in held]
    left_at = {c: t for c, t in left_at.items() if c not in go}
    if (held, left_at) != (s.leave_held, s.left_at) or approved:
        t.state = msgspec.structs.replace(
            s,
            leave_held=held,
            leave_approved=[c for c in s.leave_approved if c in held],
            left_at=left_at,
        )
    if held and held != s.leave_held:
        t.note(
            Event(
                "prune-held",
                tuple(held),
                f"{len(held) + len(recent)} of {live + len(recent)} clusters left the fleet "
                f"at once: the bundle is pruned on {', '.join(held)} once approved "
                f"(driftbus approve {s.bundle})",
            )
        )
    return go
