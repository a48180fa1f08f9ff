"""The prune budget (planner/rule/budget.py, the fleet's in fleet/rollout/tick.py): how much one
revision may delete of a bundle on a cluster at once, and how many clusters a membership change
may prune a fleet bundle on at once."""

from __future__ import annotations

import datetime as dt
import hashlib

import msgspec
import pytest

from schemas.fleet import Placement, RolloutControl, RolloutSpec, RolloutState
from schemas.messages import Bundle, BundleOptions, BundlePhase
from schemas.subjects import ObjectKey
from services.fleet.rollout import engine as rollout
from services.fleet.rollout.steer import steer
from services.fleet.rollout.steps import LeaveBudget, Observed, Remove
from services.planner.memory.cluster import ClusterState
from services.planner.rule.budget import Budget, leaving, predates, verdict
from services.planner.rule.decide import Entry
from services.planner.rule.revision import BundleView

NS = ObjectKey("", "Namespace", "", "shop")
CRD = ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.com")


def cms(n: int, prefix: str = "cm") -> list[ObjectKey]:
    return [ObjectKey("", "ConfigMap", "shop", f"{prefix}-{i:02}") for i in range(n)]


def view(kept: int, *, allow_prune: bool = False, prune: bool = True, delete: bool = False):
    """A revision keeping ``kept`` of the bundle's ConfigMaps."""
    options = BundleOptions(allow_prune=allow_prune, prune=prune)
    bundle = Bundle(cluster="c", bundle="b", revision="r2", options=options, delete=delete)
    v = BundleView.of(bundle, 1)
    v.keys.update(cms(kept))
    return v


# (id, objects the bundle had, objects the revision keeps, extra deletions, view flags, held)
CASES: list[tuple[str, int, int, list[ObjectKey], dict[str, bool], bool]] = [
    ("12-to-2-deletes-10-more-than-half-held", 12, 2, [], {}, True),
    ("12-to-7-deletes-5-not-more-than-half", 12, 7, [], {}, False),
    ("12-to-6-deletes-exactly-half-not-held", 12, 6, [], {}, False),
    ("6-to-0-deletes-6-more-than-5-held", 6, 0, [], {}, True),
    ("5-to-0-deletes-5-not-more-than-5", 5, 0, [], {}, False),
    ("a-namespace-is-always-held", 3, 3, [NS], {}, True),
    ("a-crd-is-always-held", 3, 3, [CRD], {}, True),
    ("allow-prune-lets-12-to-2-through", 12, 2, [], {"allow_prune": True}, False),
    ("allow-prune-lets-a-namespace-through", 3, 3, [NS], {"allow_prune": True}, False),
    ("prune-off-deletes-nothing-to-hold", 12, 2, [], {"prune": False}, False),
    ("deleting-the-bundle-is-an-explicit-request", 12, 0, [], {"delete": True}, False),
    ("nothing-to-delete", 12, 12, [], {}, False),
]


@pytest.mark.parametrize(
    ("had", "kept", "extra", "flags", "held"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_budget(
    had: int, kept: int, extra: list[ObjectKey], flags: dict[str, bool], held: bool
) -> None:
    v = view(kept, **flags)
    deleting = cms(had)[kept:] + extra
    got = verdict(v, deleting, kept=kept, budget=Budget(), cluster="c")
    assert (got is not None) is held
    if got is not None:
        assert set(got.keys) == set(deleting)
        assert got.revision == "r2"
        assert "driftbus approve b --cluster c" in got.message
        assert "--allow-prune" in got.message


def test_the_message_names_the_first_few_and_counts_the_rest() -> None:
    got = verdict(view(2), cms(12)[2:], kept=2, budget=Budget(), cluster="c")
    assert got is not None
    assert "10 of its 12 objects" in got.message
    assert "ConfigMap/shop/cm-02" in got.message
    assert "and 7 more" in got.message


def test_a_namespace_is_named_first() -> None:
    got = verdict(view(3), [*cms(1, "z"), NS], kept=3, budget=Budget(), cluster="c")
    assert got is not None
    assert got.keys[0] == NS
    assert "a Namespace" in got.why


def test_an_approved_revision_is_republished_with_allow_prune_and_a_later_one_is_held_again():
    """``driftbus approve`` republishes the held revision with ``allow_prune``: that revision's
    deletions go; the next revision carries its own options and is weighed afresh."""
    approved = view(2, allow_prune=True)
    assert verdict(approved, cms(12)[2:], kept=2, budget=Budget(), cluster="c") is None
    later = Bundle(cluster="c", bundle="b", revision="r3", options=BundleOptions())
    v = BundleView.of(later, 2)
    v.keys.update(cms(1, "new"))
    assert verdict(v, cms(12), kept=0, budget=Budget(), cluster="c") is not None


def test_the_thresholds_are_settings() -> None:
    assert verdict(view(2), cms(12)[2:], kept=2, budget=Budget(share=0.9), cluster="c") is None
    assert verdict(view(0), cms(5), kept=0, budget=Budget(at_least=4), cluster="c") is not None


def test_a_revision_renaming_every_object_is_held() -> None:
    """A bad render (a changed name prefix) declares 12 new objects and drops the 12 live ones:
    12 of the bundle's 12, held, however many new objects the revision brings (it brought as
    many as it drops; counted with them, 12 of 24 was not more than half: review of issue 45)."""
    renamed = Bundle(cluster="c", bundle="b", revision="r2", options=BundleOptions())
    v = BundleView.of(renamed, 1)
    v.keys.update(cms(12, "new"))
    got = verdict(v, cms(12), kept=0, budget=Budget(), cluster="c")
    assert got is not None
    assert "12 of its 12 objects" in got.message


S = hashlib.sha256(b"s").digest()


def entry(key: ObjectKey, **fields: object) -> Entry:
    base: dict[str, object] = {
        "server_sha": S,
        "server_rv": 7,
        "owner_bundle": "b",
        "applied_bundle": "b",
    }
    return Entry(key, **{**base, **fields})  # type: ignore[arg-type]


LEAVING: list[tuple[str, Entry, bool]] = [
    ("live-applied-labelled-undeclared", entry(cms(3)[2]), True),
    ("still-in-the-previous-revision-not-yet-released", entry(cms(3)[2], bundle="b"), True),
    ("an-apply-on-its-way-still-counts", entry(cms(3)[2], inflight=S), True),
    ("declared-by-the-revision", entry(cms(3)[0]), False),
    ("opts-out-of-prune", entry(cms(3)[2], keep=True), False),
    ("another-bundles", entry(cms(3)[2], owner_bundle="x", applied_bundle="x"), False),
    ("never-applied-by-it", entry(cms(3)[2], applied_bundle=""), False),
    ("gone", entry(cms(3)[2], server_deleted=True, server_sha=None), False),
    ("desired-by-another-bundle", entry(cms(3)[2], bundle="x"), False),
]


@pytest.mark.parametrize(("e", "expected"), [c[1:] for c in LEAVING], ids=[c[0] for c in LEAVING])
def test_what_counts_as_a_deletion(e: Entry, expected: bool) -> None:
    assert leaving(e, view(2)) is expected


PREDATES: list[tuple[str, Entry, bool]] = [
    (
        "declared-live-applied-for-an-earlier-revision",
        entry(cms(3)[0], applied_revision="r1"),
        True,
    ),
    ("re-applied-for-this-revision", entry(cms(3)[0], applied_revision="r2"), False),
    (
        "new-in-this-revision-not-applied-yet",
        entry(cms(3)[0], applied_bundle="", server_rv=0),
        False,
    ),
    ("not-declared-a-deletion", entry(cms(3)[2], applied_revision="r1"), False),
    ("another-bundles", entry(cms(3)[0], applied_bundle="x", applied_revision="r1"), False),
    ("gone", entry(cms(3)[0], applied_revision="r1", server_deleted=True), False),
]


@pytest.mark.parametrize(("e", "expected"), [c[1:] for c in PREDATES], ids=[c[0] for c in PREDATES])
def test_what_counts_as_kept_from_before(e: Entry, expected: bool) -> None:
    assert predates(e, view(2)) is expected


def test_a_renaming_revision_stays_held_while_its_new_objects_are_applied() -> None:
    """Weighed by the planner's state: 12 objects of r1 live; r2 renames them all. Held at
    once, and still held once r2's 12 new objects are applied for it (they never count)."""
    st = ClusterState("c")
    for k in cms(12):
        st.entries["c", k] = entry(k, applied_revision="r1")
    v = BundleView.of(Bundle(cluster="c", bundle="b", revision="r2", options=BundleOptions()), 2)
    v.keys.update(cms(12, "new"))
    held = st.weigh_prunes(v)
    assert held is not None
    assert "12 of its 12" in held.why
    for k in cms(12, "new"):
        st.entries["c", k] = entry(k, bundle="b", applied_revision="r2")
    assert st.weigh_prunes(v) is not None


def test_deletions_let_go_stay_let_go_while_the_revisions_changed_objects_land() -> None:
    """r2 drops 6 of 20 (not more than half: they go) and changes the other 14. Once those are
    re-applied for r2 they no longer count from before (6 of 6 would be held), but the six
    deletions weighed and let go stay let go: no PruneHeld half-way through a revision."""
    st = ClusterState("c")
    for k in cms(20):
        st.entries["c", k] = entry(k, bundle="b", applied_revision="r1")
    v = BundleView.of(Bundle(cluster="c", bundle="b", revision="r2", options=BundleOptions()), 2)
    v.keys.update(cms(14))
    assert st.weigh_prunes(v) is None
    for k in cms(14):
        st.entries["c", k] = entry(k, bundle="b", applied_revision="r2")
    assert st.weigh_prunes(v) is None
    # more to delete than was let go (say the watcher saw another object of the bundle): weighed
    st.entries["c", cms(21)[20]] = entry(cms(21)[20], applied_revision="r1")
    assert st.weigh_prunes(v) is not None


# --- the fleet: a membership change pruning on many clusters at once ---------------------------

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
FLEET = {"canary": {"env": "canary"}, "prod-a": {"env": "prod"}, "prod-b": {"env": "prod"}}


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def complete() -> RolloutState:
    state, _ = rollout.start(
        bundle="web",
        target=Placement(revision="r1"),
        spec=RolloutSpec(),
        selector="",
        clusters_named=[],
        on_leave="prune",
        tenant="",
        source_seq=1,
        now=T0,
        before=None,
    )
    t = rollout.advance(state, FLEET, {}, at(0))
    ready = {
        c: Observed(t.state.clusters[c].revision, BundlePhase.READY, t.state.clusters[c].at)
        for c in FLEET
    }
    t = rollout.advance(t.state, FLEET, ready, at(0))
    return t.state


def removed(t: rollout.Tick) -> list[str]:
    return [a.cluster for a in t.actions if isinstance(a, Remove)]


def approve(state: RolloutState, clusters: list[str], seq: int = 1) -> RolloutState:
    ctl = RolloutControl(bundle="web", action="approve", clusters=clusters)
    steered, refused = steer(state, [(state.control_seq + seq, ctl)])
    assert not refused
    return steered


def test_two_of_three_clusters_leaving_wait_for_approval_then_are_pruned() -> None:
    canary_only = {"canary": FLEET["canary"]}
    t = rollout.advance(complete(), canary_only, {}, at(10))
    assert removed(t) == []
    assert t.state.leave_held == ["prod-a", "prod-b"]
    assert [e.event for e in t.events] == ["prune-held"]
    again = rollout.advance(t.state, canary_only, {}, at(11))
    assert removed(again) == []
    assert not again.events  # held, said once
    t = rollout.advance(approve(again.state, ["prod-a", "prod-b"]), canary_only, {}, at(12))
    assert removed(t) == ["prod-a", "prod-b"]
    assert t.state.leave_held == []
    assert t.state.leave_approved == []


def test_one_cluster_leaving_is_within_the_default_budget() -> None:
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    assert removed(rollout.advance(complete(), fleet, {}, at(10))) == ["prod-b"]


def test_a_held_cluster_that_comes_back_is_released_with_nothing_pruned() -> None:
    t = rollout.advance(complete(), {"canary": FLEET["canary"]}, {}, at(10))
    assert t.state.leave_held
    t = rollout.advance(t.state, FLEET, {}, at(11))
    assert removed(t) == []
    assert t.state.leave_held == []


def test_an_approval_covers_only_the_clusters_it_names() -> None:
    """Approved: prod-a (what the user saw held). prod-b, held too, stays held."""
    t = rollout.advance(complete(), {"canary": FLEET["canary"]}, {}, at(10))
    t = rollout.advance(approve(t.state, ["prod-a"]), {"canary": FLEET["canary"]}, {}, at(11))
    assert removed(t) == ["prod-a"]
    # prod-b stays held, though alone it would be within the budget: it waits to be approved
    t = rollout.advance(t.state, {"canary": FLEET["canary"]}, {}, at(12))
    assert removed(t) == []
    assert t.state.leave_held == ["prod-b"]
    t = rollout.advance(approve(t.state, ["prod-b"]), {"canary": FLEET["canary"]}, {}, at(13))
    assert removed(t) == ["prod-b"]


def test_an_approval_with_nothing_held_is_refused() -> None:
    ctl = RolloutControl(bundle="web", action="approve", clusters=["prod-a"])
    state, refused = steer(complete(), [(1, ctl)])
    assert refused
    assert state.leave_approved == []


def test_orphaning_is_never_held() -> None:
    state = msgspec.structs.replace(complete(), on_leave="orphan")
    t = rollout.advance(state, {"canary": FLEET["canary"]}, {}, at(10))
    assert removed(t) == ["prod-a", "prod-b"]


@pytest.mark.parametrize(
    ("leaving", "clusters", "budget", "held"),
    [
        (2, 3, LeaveBudget(), True),
        (1, 3, LeaveBudget(), False),
        (2, 30, LeaveBudget(), False),
        (4, 30, LeaveBudget(), True),
        (2, 3, LeaveBudget(share=1.0), False),
        (2, 3, LeaveBudget(at_least=2), False),
    ],
    ids=["2-of-3", "1-of-3", "2-of-30", "4-of-30", "share-100%", "at-least-2"],
)
def test_leave_budget(leaving: int, clusters: int, budget: LeaveBudget, held: bool) -> None:
    assert budget.exceeded(leaving, clusters) is held


SETTLE = LeaveBudget(settle=5.0)


def test_clusters_relabelled_one_at_a_time_within_the_settle_time_are_one_change() -> None:
    """``driftbus clusters label`` changes one cluster at a time: prod-a leaves at 10 s, prod-b
    at 11 s; nothing is pruned or held while they settle, then both are held together."""
    without_a = {c: v for c, v in FLEET.items() if c != "prod-a"}
    t = rollout.advance(complete(), without_a, {}, at(10), leave_budget=SETTLE)
    assert removed(t) == []
    assert t.state.leave_held == []
    assert list(t.state.left_at) == ["prod-a"]
    canary_only = {"canary": FLEET["canary"]}
    t = rollout.advance(t.state, canary_only, {}, at(11), leave_budget=SETTLE)
    assert removed(t) == []
    t = rollout.advance(t.state, canary_only, {}, at(15.5), leave_budget=SETTLE)
    assert removed(t) == []  # prod-b left 4.5 s ago: still settling
    t = rollout.advance(t.state, canary_only, {}, at(16.5), leave_budget=SETTLE)
    assert removed(t) == []
    assert t.state.leave_held == ["prod-a", "prod-b"]


def test_one_cluster_leaving_is_pruned_once_settled() -> None:
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(complete(), fleet, {}, at(10), leave_budget=SETTLE)
    assert removed(t) == []
    t = rollout.advance(t.state, fleet, {}, at(15), leave_budget=SETTLE)
    assert removed(t) == ["prod-b"]
    assert t.state.left_at == {}


def test_a_cluster_back_before_it_settled_is_forgotten() -> None:
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(complete(), fleet, {}, at(10), leave_budget=SETTLE)
    t = rollout.advance(t.state, FLEET, {}, at(12), leave_budget=SETTLE)
    assert t.state.left_at == {}
    assert removed(rollout.advance(t.state, FLEET, {}, at(30), leave_budget=SETTLE)) == []


def test_clusters_pruned_recently_count_with_those_leaving_now() -> None:
    """prod-b leaves and is pruned (one cluster); prod-a leaves a minute later: two of the
    fleet's three within the window, held."""
    fleet = {c: v for c, v in FLEET.items() if c != "prod-b"}
    t = rollout.advance(complete(), fleet, {}, at(10))
    assert removed(t) == ["prod-b"]
    t = rollout.advance(t.state, {"canary": FLEET["canary"]}, {}, at(70))
    assert removed(t) == []
    assert t.state.leave_held == ["prod-a"]
    # past the window, one cluster leaving alone is within the budget again
    late = rollout.advance(t.state, {"canary": FLEET["canary"]}, {}, at(700))
    assert late.state.leave_held == ["prod-a"]  # still held: it waits to be approved


def _weighed_whole(st: ClusterState, v: BundleView) -> tuple[tuple[ObjectKey, ...], int] | None:
    """The verdict as the planner weighed it before it skipped the revision's own objects: every
    live object the bundle applied unpacked, each a deletion or kept from before."""
    deleting, kept = [], 0
    for slot in st.entries.applied_live("c", "b"):
        e = st.entries[slot]
        if predates(e, v):
            kept += 1
        elif leaving(e, v):
            deleting.append(e.key)
    held = verdict(v, deleting, kept=kept, budget=st.prune_budget, cluster="c")
    return None if held is None else (held.held, held.total)


@pytest.mark.parametrize("seed", range(40))
def test_weighing_only_the_undeclared_first_gives_the_same_verdict(seed: int) -> None:
    """What the revision keeps is counted only when something leaves (a restart's go-live has
    nothing leaving and 100,000 objects declared); the verdict is the one counting everything."""
    import random

    rng = random.Random(seed)
    st = ClusterState("c")
    keys = cms(rng.randint(0, 30))
    for k in keys:
        st.entries["c", k] = entry(
            k,
            bundle=rng.choice(["b", "", "x"]),
            applied_revision=rng.choice(["r1", "r2"]),
            applied_bundle=rng.choice(["b", "b", "b", ""]),
            keep=rng.random() < 0.1,
        )
    v = BundleView.of(Bundle(cluster="c", bundle="b", revision="r2", options=BundleOptions()), 2)
    v.keys.update(rng.sample(keys, rng.randint(0, len(keys))) + rng.sample([NS, CRD], 1))
    expected = _weighed_whole(st, v)
    held = st.weigh_prunes(v)
    assert (None if held is None else (held.held, held.total)) == expected
