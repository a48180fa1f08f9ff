"""Steering a rollout (pure): ``rollout pause``, ``resume`` and ``promote`` arrive as requests
(``RolloutControl``) that the driver, the only writer of a rollout's state, applies at the start
of its next tick; the tick itself (``engine.advance``) then pauses, resumes or ends the bake.

Each request is taken once, in the order the bus numbered them: the state keeps the number of
the last one taken (``control_seq``), so a driver taking over skips what its predecessor took.
Only a rollout that moves (Progressing or Paused) is steered — the CLI refuses the others
already, the driver checks again — and a ``promote`` only while the revision it names is the
one rolling out; a pause holds across revisions, as kubectl's does. An ``approve``
(``driftbus approve B``) lets the prune of the clusters it names through, of those held by the
fleet prune budget now (``leave_held``), whatever the rollout's phase.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from schemas.fleet import RolloutControl, RolloutState
from services.fleet.rollout.steps import STEERABLE


def steer(
    state: RolloutState, controls: Iterable[tuple[int, RolloutControl]]
) -> tuple[RolloutState, list[str]]:
    """``state`` with the requests (each with its stream sequence) it has not taken yet
    applied, in order; and why each one taken but not applied was refused."""
    refused = []
    for seq, ctl in sorted(controls, key=lambda c: c[0]):
        if seq <= state.control_seq:
            continue
        changes: dict[str, Any] = {"control_seq": seq}
        if ctl.action == "approve":
            approved = sorted(set(ctl.clusters) & set(state.leave_held))
            if approved:
                changes["leave_approved"] = sorted({*state.leave_approved, *approved})
            else:
                refused.append("approve refused: no prune of the clusters it names is held")
        elif state.phase not in STEERABLE:
            refused.append(f"{ctl.action} refused: the rollout is {state.phase}")
        elif ctl.action == "promote" and ctl.revision not in ("", state.target.revision):
            refused.append(
                f"promote of {ctl.revision} refused: {state.target.revision} is rolling out now"
            )
        elif ctl.action == "promote":
            changes["promote"] = True
        else:
            changes["paused"] = ctl.action == "pause"
        state = msgspec.structs.replace(state, **changes)
    return state, refused
