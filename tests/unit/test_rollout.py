"""The rollout rule (services/fleet/rollout/engine.py), tick by tick: docs/fleet.md's state
table."""

from __future__ import annotations

import contextlib
import datetime as dt
import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.fleet import ClusterRollout, Placement, RolloutPhase, RolloutSpec, RolloutState
from schemas.messages import BundlePhase
from services.clusters.selector import SelectorError
from services.fleet.rollout import engine as rollout
from services.fleet.rollout.steps import (
    LeaveBudget,
    Observed,
    Place,
    Remove,
    SpecError,
    check_steps,
    step_sets,
)
from tests.fuzzing import examples
from tests.unit.test_fuzz_decoders import mutated

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
FLEET = {
    "canary": {"env": "canary"},
    "prod-a": {"env": "prod"},
    "prod-b": {"env": "prod"},
}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def begin(
    spec: RolloutSpec, *, before: RolloutState | None = None, revision: str = "r2"
) -> RolloutState:
    state, event = rollout.start(
        bundle="web",
        target=Placement(revision=revision),
        spec=spec,
        selector="",
        clusters_named=[],
        on_leave="prune",
        tenant="",
        source_seq=1,
        now=T0,
        before=before,
    )
    assert event.event == "started"
    return state


def ready_on(state: RolloutState, *clusters: str, phase: BundlePhase = BundlePhase.READY):
    """The statuses a planner would publish for the placements of ``clusters``."""
    return {
        c: Observed(state.clusters[c].revision, phase, state.clusters[c].at, message="m")
        for c in clusters
    }


def placed(tick: rollout.Tick) -> list[tuple[str, str]]:
    return [(a.cluster, a.which) for a in tick.actions if isinstance(a, Place)]


CANARY = RolloutSpec(steps=["env=canary"], bake=30, step_timeout=600)


def test_a_canary_step_places_only_the_canary_then_bakes_then_the_rest() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    assert placed(t) == [("canary", "target")]
    # Ready, but the bake has not passed: nothing more
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(2))
    assert placed(t) == []
    assert t.state.ready_since == at(2)
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(20))
    assert placed(t) == []
    assert t.state.step == 0
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(33))
    assert t.state.step == 1
    assert placed(t) == [("prod-a", "target"), ("prod-b", "target")]
    assert [e.event for e in t.events] == ["step"]
    obs = ready_on(t.state, "canary", "prod-a", "prod-b")
    t = rollout.advance(t.state, FLEET, obs, at(40))
    assert t.state.phase is RolloutPhase.COMPLETE
    assert [e.event for e in t.events] == ["complete"]


def test_a_stale_ready_of_an_earlier_placement_does_not_count() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    old = {"canary": Observed("r2", BundlePhase.READY, at(-100))}
    t = rollout.advance(t.state, FLEET, old, at(100))
    assert t.state.clusters["canary"].state == "assigned"
    assert t.state.ready_since is None


@pytest.mark.parametrize("phase", [BundlePhase.FAILED, BundlePhase.DEGRADED, BundlePhase.CONFLICT])
def test_a_failing_canary_halts_and_later_steps_never_get_the_revision(phase) -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary", phase=phase), at(2))
    assert t.state.phase is RolloutPhase.HALTED
    assert [e.event for e in t.events] == ["halted"]
    assert t.events[0].clusters == ("canary",)
    for later in range(3, 2000, 500):
        t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(later))
        assert placed(t) == []


def test_forbidden_counts_as_a_failure() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    e = t.state.clusters["canary"]
    obs = {"canary": Observed("r2", BundlePhase.RECONCILING, e.at, forbidden=True)}
    assert rollout.advance(t.state, FLEET, obs, at(2)).state.phase is RolloutPhase.HALTED


def test_a_step_not_ready_by_its_timeout_halts() -> None:
    spec = msgspec.structs.replace(CANARY, step_timeout=60)
    t = rollout.advance(begin(spec), FLEET, {}, at(1))
    busy = ready_on(t.state, "canary", phase=BundlePhase.RECONCILING)
    assert rollout.advance(t.state, FLEET, busy, at(59)).state.phase is RolloutPhase.PROGRESSING
    t = rollout.advance(t.state, FLEET, busy, at(61))
    assert t.state.phase is RolloutPhase.HALTED
    assert "not Ready within 60s" in t.state.message


def complete(spec: RolloutSpec, revision: str = "r1") -> RolloutState:
    """A fleet whose rollout of ``revision`` completed."""
    state = begin(msgspec.structs.replace(spec, steps=[]), revision=revision)
    t = rollout.advance(state, FLEET, {}, at(0))
    t = rollout.advance(t.state, FLEET, ready_on(t.state, *FLEET), at(0))
    assert t.state.phase is RolloutPhase.COMPLETE
    return t.state


def test_rollback_puts_the_canary_back_on_the_previous_revision() -> None:
    spec = msgspec.structs.replace(CANARY, on_failure="rollback")
    state = begin(spec, before=complete(spec))
    assert state.previous is not None
    assert state.previous.revision == "r1"
    t = rollout.advance(state, FLEET, {}, at(1))
    assert placed(t) == [("canary", "target")]
    t = rollout.advance(
        t.state, FLEET, ready_on(t.state, "canary", phase=BundlePhase.FAILED), at(2)
    )
    # placed back, not yet back: RolledBack waits for r1 to be Ready again on the canary
    assert t.state.phase is RolloutPhase.ROLLING_BACK
    assert placed(t) == [("canary", "previous")]
    assert [(e.event, e.phase, e.clusters) for e in t.events] == [
        ("halted", RolloutPhase.HALTED, ("canary",)),
        ("rolling-back", RolloutPhase.ROLLING_BACK, ("canary",)),
    ]
    assert (t.state.rollback, t.state.rollback_started_at) == (["canary"], at(2))
    assert t.state.clusters["canary"].revision == "r1"
    assert {c: e.revision for c, e in t.state.clusters.items()} == {
        "canary": "r1",
        "prod-a": "r1",
        "prod-b": "r1",
    }
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(5))
    assert t.state.phase is RolloutPhase.ROLLED_BACK
    assert [(e.event, e.phase, e.clusters) for e in t.events] == [
        ("rolled-back", RolloutPhase.ROLLED_BACK, ("canary",))
    ]
    assert t.state.message.startswith("canary: m")  # why it halted, kept


def test_max_unavailable_bounds_the_clusters_on_their_way() -> None:
    spec = RolloutSpec(max_unavailable=1)
    t = rollout.advance(begin(spec), FLEET, {}, at(1))
    assert placed(t) == [("canary", "target")]
    t = rollout.advance(t.state, FLEET, {}, at(2))
    assert placed(t) == []
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(3))
    assert placed(t) == [("prod-a", "target")]


def test_a_sync_window_stops_the_step_clock_and_its_end_starts_it_again() -> None:
    """A change freeze is not a failed step: while a window holds a cluster of the step the
    timeout does not run (no halt, no rollback the window would hold too); it is said once,
    and the step's time starts afresh when the window ends."""
    spec = msgspec.structs.replace(CANARY, step_timeout=60)
    t = rollout.advance(begin(spec), FLEET, {}, at(1))
    entry = t.state.clusters["canary"]
    frozen = {
        "canary": Observed(
            entry.revision, BundlePhase.OUT_OF_SYNC, entry.at, "deny window …", window="freeze"
        )
    }
    t = rollout.advance(t.state, FLEET, frozen, at(30))
    assert [(e.event, e.clusters) for e in t.events] == [("window", ("canary",))]
    assert '"freeze" in canary' in t.events[0].message
    assert t.state.clusters["canary"].window == "freeze"
    for later in (61, 3600, 86_400):  # long past the step timeout: still waiting, quietly
        t = rollout.advance(t.state, FLEET, frozen, at(later))
        assert t.state.phase is RolloutPhase.PROGRESSING, t.state.message
        assert t.events == ()
    busy = ready_on(t.state, "canary", phase=BundlePhase.RECONCILING)
    t = rollout.advance(t.state, FLEET, busy, at(90_000))
    assert [e.event for e in t.events] == ["window-ended"]
    assert (t.state.window_hold, t.state.step_started_at) == ("", at(90_000))
    assert t.state.clusters["canary"].window == ""
    assert rollout.advance(t.state, FLEET, busy, at(90_059)).state.phase is (
        RolloutPhase.PROGRESSING
    )
    assert rollout.advance(t.state, FLEET, busy, at(90_061)).state.phase is RolloutPhase.HALTED
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(90_030))
    assert t.state.clusters["canary"].state == "ready"


def test_a_window_on_one_cluster_does_not_keep_a_stuck_one_from_timing_out() -> None:
    """(review) only the clusters a window holds are not late: another of the same step stuck
    on its way still halts the rollout at the step timeout, and the halt drops the hold."""
    spec = RolloutSpec(steps=["env=prod"], step_timeout=60)
    t = rollout.advance(begin(spec), FLEET, {}, at(1))
    a, b = t.state.clusters["prod-a"], t.state.clusters["prod-b"]
    seen = {
        "prod-a": Observed(a.revision, BundlePhase.OUT_OF_SYNC, a.at, "held", window="freeze"),
        "prod-b": Observed(b.revision, BundlePhase.RECONCILING, b.at, "stuck"),
    }
    t = rollout.advance(t.state, FLEET, seen, at(30))
    assert t.state.window_hold == '"freeze" in prod-a'
    t = rollout.advance(t.state, FLEET, seen, at(61))
    assert t.state.phase is RolloutPhase.HALTED
    assert t.state.message.endswith("not Ready within 60s: prod-b"), t.state.message
    assert t.state.window_hold == ""


def test_pause_stops_placements_and_resume_restarts_the_step_clock() -> None:
    spec = msgspec.structs.replace(CANARY, step_timeout=60)
    t = rollout.advance(begin(spec), FLEET, {}, at(1))
    paused = msgspec.structs.replace(t.state, paused=True)
    t = rollout.advance(paused, FLEET, ready_on(paused, "canary"), at(100))
    assert t.state.phase is RolloutPhase.PAUSED
    assert placed(t) == []
    t = rollout.advance(t.state, FLEET, ready_on(paused, "canary"), at(500))
    assert t.state.phase is RolloutPhase.PAUSED  # no timeout while paused
    resumed = msgspec.structs.replace(t.state, paused=False)
    t = rollout.advance(resumed, FLEET, ready_on(paused, "canary"), at(501))
    assert t.state.phase is RolloutPhase.PROGRESSING
    assert t.state.step_started_at == at(501)
    assert [e.event for e in t.events] == ["resumed"]


def test_promote_ends_the_bake_but_not_the_wait_for_ready() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    promoted = msgspec.structs.replace(t.state, promote=True)
    t = rollout.advance(promoted, FLEET, {}, at(2))
    assert t.state.step == 0  # the canary is not Ready yet
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(3))
    assert t.state.step == 1
    assert not t.state.promote
    assert "promoted" in t.events[0].message


def test_a_cluster_labelled_out_is_pruned_or_orphaned() -> None:
    state = complete(RolloutSpec())
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(state, fleet, {}, at(10))
    assert [(a.cluster, a.orphan) for a in t.actions if isinstance(a, Remove)] == [
        ("prod-b", False)
    ]
    assert t.state.clusters["prod-b"].state == "removed"
    orphaning = msgspec.structs.replace(state, on_leave="orphan")
    t = rollout.advance(orphaning, fleet, {}, at(10))
    assert [a.orphan for a in t.actions if isinstance(a, Remove)] == [True]
    # and nothing more on the next tick
    assert not rollout.advance(t.state, fleet, {}, at(11)).actions


def test_a_quiet_cluster_is_still_a_member() -> None:
    """No status, no heartbeat: only the registry (members) decides membership."""
    state = complete(RolloutSpec())
    for later in (60, 3600, 86400):
        assert not rollout.advance(state, FLEET, {}, at(later)).actions


def test_a_cluster_joining_gets_the_revision_in_force() -> None:
    state = complete(RolloutSpec())
    grown = {**FLEET, "prod-c": {"env": "prod"}}
    t = rollout.advance(state, grown, {}, at(10))
    assert placed(t) == [("prod-c", "target")]
    assert t.events[0].event == "joined"
    # during a canary rollout a newcomer outside the canary gets the revision in force
    t = rollout.advance(begin(CANARY, before=state), grown | {"prod-d": {}}, {}, at(20))
    assert ("prod-d", "previous") in placed(t)


def test_a_refused_substitution_names_the_cluster_and_halts() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1), refusals={"canary": "no label region"})
    assert placed(t) == []
    assert t.events[0].event == "refused"
    t = rollout.advance(t.state, FLEET, {}, at(2), refusals={"canary": "no label region"})
    assert t.state.phase is RolloutPhase.HALTED
    assert "no label region" in t.state.message


def test_a_republished_revision_of_the_same_name_is_placed_again() -> None:
    state = begin(RolloutSpec(), before=complete(RolloutSpec()), revision="r1")
    t = rollout.advance(state, FLEET, {}, at(1))
    assert len(placed(t)) == 3


def test_delete_removes_every_cluster() -> None:
    t = rollout.delete(complete(RolloutSpec()), at(5), orphan=False)
    assert sorted(a.cluster for a in t.actions) == sorted(FLEET)
    assert t.state.phase is RolloutPhase.DELETED


def test_excluded_clusters_are_named() -> None:
    t = rollout.advance(begin(RolloutSpec()), {}, {}, at(1), excluded={"prod-a": "tenant"})
    assert t.state.excluded == {"prod-a": "tenant"}
    assert t.events[0].event == "excluded"


@pytest.mark.parametrize(
    ("steps", "sets"),
    [
        ([], [{"canary", "prod-a", "prod-b"}]),
        (["34%"], [{"canary", "prod-a"}, {"canary", "prod-a", "prod-b"}]),
        (["1%"], [{"canary"}, {"canary", "prod-a", "prod-b"}]),
        (["env=prod", "100%"], [{"prod-a", "prod-b"}, set(FLEET), set(FLEET)]),
        (["env=none"], [set(), set(FLEET)]),
    ],
)
def test_step_sets(steps, sets) -> None:
    assert step_sets(steps, FLEET) == sets


@pytest.mark.parametrize("step", ["0%", "101%", "x%", "env in (a"])
def test_bad_steps_are_refused(step) -> None:
    with pytest.raises(SpecError, match="rollout step"):
        check_steps([step])


def test_state_survives_the_wire() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    data = msgspec.json.encode(t.state)
    assert msgspec.json.decode(data, type=RolloutState) == t.state
    assert isinstance(t.state.clusters["canary"], ClusterRollout)


def test_a_cluster_the_tenant_may_no_longer_use_keeps_what_it_has() -> None:
    """A policy change never prunes: the excluded cluster is neither removed nor updated."""
    state = complete(RolloutSpec())
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(state, fleet, {}, at(10), excluded={"prod-b": "not allowed"})
    assert not t.actions
    assert t.state.clusters["prod-b"].state == "ready"
    t = rollout.advance(
        begin(RolloutSpec(), before=t.state), fleet, {}, at(11), excluded={"prod-b": "not allowed"}
    )
    assert sorted(a.cluster for a in t.actions) == ["canary", "prod-a"]


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_a_corrupted_stored_state_is_refused_or_advances(data: st.DataObject) -> None:
    """The rollouts bucket is state on the bus: whatever a bad writer left there either fails
    to decode (the driver leaves it alone) or is a state the rule can take a tick further."""
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    doc = mutated(data.draw, json.loads(msgspec.json.encode(t.state)))
    try:
        state = msgspec.json.decode(json.dumps(doc).encode(), type=RolloutState)
    except msgspec.DecodeError:
        return
    with contextlib.suppress(SelectorError):  # a step no one can read: the driver catches it
        rollout.advance(state, FLEET, ready_on(t.state, "canary"), at(2))


def test_a_pause_holds_across_a_new_revision() -> None:
    paused = msgspec.structs.replace(complete(RolloutSpec()), paused=True)
    t = rollout.advance(begin(CANARY, before=paused), FLEET, {}, at(1))
    assert t.state.phase is RolloutPhase.PAUSED
    assert placed(t) == []


def test_a_refusal_of_the_revision_that_left_does_not_halt_the_next() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1), refusals={"canary": "no label"})
    t = rollout.advance(t.state, FLEET, {}, at(2), refusals={"canary": "no label"})
    assert t.state.phase is RolloutPhase.HALTED
    # the label was added; the same content is published again
    t = rollout.advance(begin(CANARY, before=t.state), FLEET, {}, at(3))
    assert t.state.phase is RolloutPhase.PROGRESSING
    assert placed(t) == [("canary", "target")]


def test_a_percentage_step_keeps_the_clusters_it_chose_as_the_fleet_grows() -> None:
    fleet = {f"c{i:02}": {} for i in range(10)}
    spec = RolloutSpec(steps=["10%", "50%"], step_timeout=600)
    t = rollout.advance(begin(spec), fleet, {}, at(1))
    assert placed(t) == [("c00", "target")]
    grown = {"a1": {}, "a2": {}, **fleet}  # sort before c00
    t = rollout.advance(t.state, grown, {}, at(2))
    assert ("a1", "target") not in placed(t)
    assert t.state.held == ["c00"]
    # and a failure of c00 halts, whatever the step sets say now
    failing = ready_on(t.state, "c00", phase=BundlePhase.FAILED)
    assert rollout.advance(t.state, grown, failing, at(3)).state.phase is RolloutPhase.HALTED


def test_a_placement_replaced_outside_the_rollout_no_longer_counts_as_ready() -> None:
    t = rollout.advance(begin(CANARY), FLEET, {}, at(1))
    t = rollout.advance(t.state, FLEET, ready_on(t.state, "canary"), at(2))
    assert t.state.clusters["canary"].state == "ready"
    # `driftbus rollback --cluster canary` published r1 there after the placement
    later = {"canary": Observed("r1", BundlePhase.READY, at(5))}
    t = rollout.advance(t.state, FLEET, later, at(6))
    assert t.state.clusters["canary"].state == "assigned"
    assert "replaced outside the rollout" in t.state.clusters["canary"].message
    t = rollout.advance(t.state, FLEET, later, at(100))
    assert t.state.step == 0  # the bake never ends on it


def test_clusters_a_new_selector_leaves_out_are_removed_only_once_it_is_in_force() -> None:
    state = complete(RolloutSpec())
    fewer = {"canary": FLEET["canary"]}
    t = rollout.advance(begin(CANARY, before=state), fewer, {}, at(1))
    assert [a for a in t.actions if isinstance(a, Remove)] == []
    for later in (2, 40):  # Ready, then baked: the whole fleet (the canary alone) is Ready
        t = rollout.advance(t.state, fewer, ready_on(t.state, "canary"), at(later))
    assert t.state.phase is RolloutPhase.COMPLETE
    # 2 of 3 clusters at once is past the default fleet prune budget (test_fleet_prune_budget.py):
    # this test is about when they are removed, so its budget lets them through
    everything = LeaveBudget(share=1.0)
    t = rollout.advance(t.state, fewer, {}, at(41), leave_budget=everything)
    assert sorted(a.cluster for a in t.actions if isinstance(a, Remove)) == ["prod-a", "prod-b"]


def test_a_cluster_whose_entry_is_unknown_keeps_what_it_has() -> None:
    state = complete(RolloutSpec())
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(state, fleet, {}, at(10), unknown={"prod-b"})
    assert not t.actions


# --- a rollback ends only once checked (issue 41, item 13) -------------------------------------

BACK = RolloutSpec(step_timeout=60, on_failure="rollback")
"""One step (the whole fleet), rolled back on a failure: every cluster goes back to r1."""


def rolling_back() -> rollout.Tick:
    """r2 on every cluster, failed on the canary at 2 s: the three placed back on r1 at 2 s."""
    t = rollout.advance(begin(BACK, before=complete(BACK)), FLEET, {}, at(1))
    assert placed(t) == [(c, "target") for c in sorted(FLEET)]
    failing = ready_on(t.state, "canary", phase=BundlePhase.FAILED)
    t = rollout.advance(t.state, FLEET, failing, at(2))
    assert t.state.phase is RolloutPhase.ROLLING_BACK
    assert placed(t) == [(c, "previous") for c in sorted(FLEET)]
    assert t.state.rollback == sorted(FLEET)
    return t


def back_status(state: RolloutState, cluster: str, how: str) -> Observed:
    """A status of ``cluster`` as its planner would publish it after the rollback placed r1."""
    entry = state.clusters[cluster]
    phase = {"ready": BundlePhase.READY, "busy": BundlePhase.RECONCILING}.get(how)
    if how == "stale-ready":  # Ready on r1, of its placement before the rollout
        return Observed("r1", BundlePhase.READY, at(0), "earlier")
    if how == "window":
        return Observed("r1", BundlePhase.OUT_OF_SYNC, entry.at, "held", window="freeze")
    if how == "forbidden":
        return Observed("r1", BundlePhase.RECONCILING, entry.at, "forbidden", forbidden=True)
    if how == "still-r2":  # the status of the placement that failed: says nothing of r1's
        return Observed("r2", BundlePhase.FAILED, at(1), "bad")
    return Observed("r1", phase or BundlePhase(how), entry.at, f"{cluster} {how}")


READY3 = {"canary": "ready", "prod-a": "ready", "prod-b": "ready"}


@pytest.mark.parametrize(
    ("statuses", "seconds", "phase", "event", "named"),
    [
        pytest.param(READY3, 5, RolloutPhase.ROLLED_BACK, "rolled-back", tuple(sorted(FLEET)),
                     id="ready-again-everywhere"),
        pytest.param(READY3 | {"prod-b": "busy"}, 30, RolloutPhase.ROLLING_BACK, None, (),
                     id="one-on-its-way-within-the-timeout"),
        pytest.param({"canary": "ready", "prod-a": "ready"}, 30, RolloutPhase.ROLLING_BACK,
                     None, (), id="one-not-heard-from-within-the-timeout"),
        pytest.param(READY3 | {"prod-b": "still-r2"}, 30, RolloutPhase.ROLLING_BACK, None, (),
                     id="the-failed-revisions-status-is-not-the-rollbacks"),
        pytest.param({}, 30, RolloutPhase.ROLLING_BACK, None, (), id="nothing-heard-yet"),
        pytest.param(READY3 | {"prod-b": "busy"}, 63, RolloutPhase.ROLLBACK_FAILED,
                     "rollback-failed", ("prod-b",), id="one-not-ready-by-the-timeout"),
        pytest.param({"canary": "ready", "prod-a": "ready"}, 63, RolloutPhase.ROLLBACK_FAILED,
                     "rollback-failed", ("prod-b",), id="one-never-heard-from"),
        pytest.param(READY3 | {"prod-b": "stale-ready"}, 63, RolloutPhase.ROLLBACK_FAILED,
                     "rollback-failed", ("prod-b",), id="a-ready-from-before-does-not-count"),
        pytest.param({"canary": "ready", "prod-a": "busy", "prod-b": "busy"}, 63,
                     RolloutPhase.ROLLBACK_FAILED, "rollback-failed", ("prod-a", "prod-b"),
                     id="every-late-cluster-named"),
        pytest.param(READY3 | {"prod-a": "Failed"}, 5, RolloutPhase.ROLLBACK_FAILED,
                     "rollback-failed", ("prod-a",), id="failed-at-once"),
        pytest.param(READY3 | {"prod-a": "Degraded", "prod-b": "Conflict"}, 5,
                     RolloutPhase.ROLLBACK_FAILED, "rollback-failed", ("prod-a", "prod-b"),
                     id="degraded-and-conflict"),
        pytest.param(READY3 | {"canary": "forbidden"}, 5, RolloutPhase.ROLLBACK_FAILED,
                     "rollback-failed", ("canary",), id="forbidden"),
        pytest.param(READY3 | {"prod-b": "window"}, 63, RolloutPhase.ROLLING_BACK, "window",
                     ("prod-b",), id="held-by-a-window-is-not-late"),
    ],
)  # fmt: skip
def test_a_rollback_ends_only_once_the_previous_revision_is_ready_again(
    statuses, seconds, phase, event, named
) -> None:
    state = rolling_back().state
    seen = {c: back_status(state, c, how) for c, how in statuses.items()}
    t = rollout.advance(state, FLEET, seen, at(seconds))
    assert t.state.phase is phase, t.state.message
    assert placed(t) == []  # nothing placed again, whatever the end
    assert [(e.event, e.clusters) for e in t.events] == ([(event, named)] if event else [])
    if phase is RolloutPhase.ROLLBACK_FAILED:
        assert t.events[0].phase is RolloutPhase.ROLLBACK_FAILED
        assert t.state.message.startswith("canary: m; rollback failed: r1 ")  # the halt kept
        assert all(c in t.state.message for c in named)
    # an end is an end: later ticks change nothing
    if phase is not RolloutPhase.ROLLING_BACK:
        later = rollout.advance(t.state, FLEET, seen, at(seconds + 600))
        assert (later.state.phase, later.events, later.actions) == (phase, (), ())


def test_a_rollback_timeout_names_why_and_the_step_timeout() -> None:
    state = rolling_back().state
    seen = {c: back_status(state, c, "ready") for c in ("canary", "prod-a")}
    assert rollout.advance(state, FLEET, seen, at(62)).state.phase is RolloutPhase.ROLLING_BACK
    t = rollout.advance(state, FLEET, seen, at(62.5))
    assert t.state.phase is RolloutPhase.ROLLBACK_FAILED
    assert t.events[0].message == "rollback failed: r1 not Ready again within 60s in prod-b"


def test_a_window_holding_a_rollback_stops_its_clock_until_it_ends() -> None:
    state = rolling_back().state
    held = {c: back_status(state, c, "ready") for c in ("canary", "prod-a")}
    held["prod-b"] = back_status(state, "prod-b", "window")
    t = rollout.advance(state, FLEET, held, at(10))
    assert [e.event for e in t.events] == ["window"]
    assert "rollback to r1" in t.events[0].message
    t = rollout.advance(t.state, FLEET, held, at(3600))
    assert (t.state.phase, t.events) == (RolloutPhase.ROLLING_BACK, ())
    busy = held | {"prod-b": back_status(state, "prod-b", "busy")}
    t = rollout.advance(t.state, FLEET, busy, at(4000))  # the window ended: its time again
    assert [e.event for e in t.events] == ["window-ended"]
    assert t.state.rollback_started_at == at(4000)
    assert rollout.advance(t.state, FLEET, busy, at(4059)).state.phase is (
        RolloutPhase.ROLLING_BACK
    )
    ready = busy | {"prod-b": back_status(state, "prod-b", "ready")}
    assert rollout.advance(t.state, FLEET, ready, at(4059)).state.phase is (
        RolloutPhase.ROLLED_BACK
    )


def test_a_rollback_with_nothing_on_the_revision_is_rolled_back_at_once() -> None:
    """Refused everywhere it was to go (never placed): nothing to put back or wait for."""
    spec = msgspec.structs.replace(CANARY, on_failure="rollback")
    state = begin(spec, before=complete(spec))
    refused = {"canary": "no label region"}
    t = rollout.advance(state, FLEET, {}, at(1), refusals=refused)
    t = rollout.advance(t.state, FLEET, {}, at(2), refusals=refused)
    assert t.state.phase is RolloutPhase.ROLLED_BACK
    assert t.state.rollback == []
    assert [e.event for e in t.events][:2] == ["halted", "rolled-back"]


def test_a_new_revision_after_a_failed_rollback_goes_back_to_the_same_previous() -> None:
    state = rolling_back().state
    t = rollout.advance(state, FLEET, {}, at(100))
    assert t.state.phase is RolloutPhase.ROLLBACK_FAILED
    nxt = begin(BACK, before=t.state, revision="r3")
    assert nxt.previous is not None
    assert nxt.previous.revision == "r1"
    assert (nxt.rollback, nxt.rollback_started_at, nxt.phase) == (
        [],
        None,
        RolloutPhase.PROGRESSING,
    )
