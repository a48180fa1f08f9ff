"""Steering a rollout (services/fleet/rollout/steer.py): ``rollout pause``, ``resume`` and
``promote`` are requests the driver applies at the start of a tick, each taken once and in the
bus's order, only to a rollout that moves, a promote only of the revision it names."""

from __future__ import annotations

import datetime as dt

import msgspec
import pytest

from schemas.fleet import Placement, RolloutControl, RolloutPhase, RolloutState
from services.fleet.rollout import engine
from services.fleet.rollout.steer import steer
from tests.unit.test_rollout import begin

PROGRESSING, PAUSED, HALTED = RolloutPhase.PROGRESSING, RolloutPhase.PAUSED, RolloutPhase.HALTED


def state(**changes: object) -> RolloutState:
    base = RolloutState(bundle="web", target=Placement(revision="r2"), control_seq=10)
    return msgspec.structs.replace(base, **changes)


def ctl(action: str, revision: str = "r2") -> RolloutControl:
    return RolloutControl(bundle="web", action=action, revision=revision)  # type: ignore[arg-type]


MOVING, PAUSED_ONE, STOPPED = state(), state(phase=PAUSED, paused=True), state(phase=HALTED)
STEERING = {
    # id: before, the requests ("seq action revision"), the flags set after, control_seq, refused
    "pause": (MOVING, "11 pause r2", "paused", 11, 0),
    "resume-a-paused-one": (PAUSED_ONE, "11 resume r2", "", 11, 0),
    "promote": (MOVING, "11 promote r2", "promote", 11, 0),
    "promote-while-paused": (PAUSED_ONE, "11 promote r2", "paused promote", 11, 0),
    "taken-before-is-not-taken-again": (MOVING, "9 pause r2, 10 promote r2", "", 10, 0),
    "in-the-bus-order-not-the-arrival-order": (
        MOVING,
        "12 pause r2, 11 resume r2",
        "paused",
        12,
        0,
    ),
    "the-last-of-pause-and-resume-wins": (MOVING, "11 pause r2, 12 resume r2", "", 12, 0),
    "a-stopped-rollout-is-not-steered": (STOPPED, "11 pause r2", "", 11, 1),
    "a-promote-of-another-revision-is-refused": (MOVING, "11 promote r1", "", 11, 1),
    "a-pause-holds-whatever-revision-it-named": (MOVING, "11 pause r1", "paused", 11, 0),
}


@pytest.mark.parametrize(
    ("before", "requests", "flags", "taken", "refused"), STEERING.values(), ids=STEERING.keys()
)
def test_a_request_is_applied_once_in_order_to_a_rollout_that_moves(
    before: RolloutState, requests: str, flags: str, taken: int, refused: int
) -> None:
    asked = [r.split() for r in requests.split(", ")]
    got, why = steer(before, [(int(seq), ctl(action, rev)) for seq, action, rev in asked])
    set_after = {name for name, on in (("paused", got.paused), ("promote", got.promote)) if on}
    assert (set_after, got.control_seq) == (set(flags.split()), taken)
    assert len(why) == refused, why
    assert got.phase is before.phase  # the tick (engine.advance) moves the phase, not steering


def test_the_tick_after_a_pause_pauses_and_a_new_revision_keeps_what_was_taken() -> None:
    now = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    paused, _ = steer(state(), [(11, ctl("pause"))])
    tick = engine.advance(paused, {}, {}, now)
    assert tick.state.phase is PAUSED
    assert [e.event for e in tick.events] == ["paused"]
    again = begin(paused.spec, before=tick.state, revision="r3")
    assert (again.paused, again.control_seq) == (True, 11)
