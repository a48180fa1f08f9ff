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

PROGRESSING, PAUSED, HALTED = RolloutPhase.PROGRESSING, RolloutPhase.PAUSED, RolloutPhase.HALTED


def state(**changes: object) -> RolloutState:
    base = RolloutState(bundle="web", target=Placement(revision="r2"), control_seq=10)
    return msgspec.structs.replace(base, **changes)


def ctl(action: str, revision: str = "r2") -> RolloutControl:
    return RolloutControl(bundle="web", action=action, revision=revision)  # type: ignore[arg-type]


PAUSED_ONE = state(phase=PAUSED, paused=True)
# id, before, requests (seq, action, revision), after (paused, promote, control_seq), refused
STEERING = [
    pytest.param(state(), [(11, "pause", "r2")], (True, False, 11), 0, id="pause"),
    pytest.param(
        PAUSED_ONE, [(11, "resume", "r2")], (False, False, 11), 0, id="resume-a-paused-one"
    ),
    pytest.param(state(), [(11, "promote", "r2")], (False, True, 11), 0, id="promote"),
    pytest.param(
        PAUSED_ONE, [(11, "promote", "r2")], (True, True, 11), 0, id="promote-while-paused"
    ),
    pytest.param(
        state(),
        [(9, "pause", "r2"), (10, "promote", "r2")],
        (False, False, 10),
        0,
        id="taken-before-is-not-taken-again",
    ),
    pytest.param(
        state(),
        [(12, "pause", "r2"), (11, "resume", "r2")],
        (True, False, 12),
        0,
        id="in-the-bus-order-not-the-arrival-order",
    ),
    pytest.param(
        state(),
        [(11, "pause", "r2"), (12, "resume", "r2")],
        (False, False, 12),
        0,
        id="the-last-of-pause-and-resume-wins",
    ),
    pytest.param(
        state(phase=HALTED),
        [(11, "pause", "r2")],
        (False, False, 11),
        1,
        id="a-stopped-rollout-is-not-steered",
    ),
    pytest.param(
        state(),
        [(11, "promote", "r1")],
        (False, False, 11),
        1,
        id="a-promote-of-another-revision-is-refused",
    ),
    pytest.param(
        state(),
        [(11, "pause", "r1")],
        (True, False, 11),
        0,
        id="a-pause-holds-whatever-revision-it-named",
    ),
]


@pytest.mark.parametrize(("before", "requests", "after", "refused"), STEERING)
def test_a_request_is_applied_once_in_order_to_a_rollout_that_moves(
    before: RolloutState,
    requests: list[tuple[int, str, str]],
    after: tuple[bool, bool, int],
    refused: int,
) -> None:
    got, why = steer(before, [(seq, ctl(action, rev)) for seq, action, rev in requests])
    assert (got.paused, got.promote, got.control_seq) == after
    assert len(why) == refused, why
    assert got.phase is before.phase  # the tick (engine.advance) moves the phase, not steering


def test_the_tick_after_a_pause_pauses_and_a_new_revision_keeps_what_was_taken() -> None:
    now = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
    paused, _ = steer(state(), [(11, ctl("pause"))])
    tick = engine.advance(paused, {}, {}, now)
    assert tick.state.phase is PAUSED
    assert [e.event for e in tick.events] == ["paused"]
    again, _ = engine.start(
        bundle="web",
        target=Placement(revision="r3"),
        spec=paused.spec,
        selector="",
        clusters_named=[],
        on_leave="prune",
        tenant="",
        source_seq=2,
        now=now,
        before=tick.state,
    )
    assert (again.paused, again.control_seq) == (True, 11)
