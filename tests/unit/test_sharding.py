"""Planner sharding rules: the fair, sticky share of clusters per replica, the heartbeat
settings that can work, and the claims of a previous run freed (who is live, when a replica
must stop planning and which claims it may take are the lease rule: tests/unit/test_lease.py)."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.planner.sharding.rules import (
    assign,
    heartbeat_problem,
    moves,
    orphaned,
)


def loads(a: dict[str, str]) -> collections.Counter[str]:
    return collections.Counter(a.values())


C3 = ["c1", "c2", "c3"]


@pytest.mark.parametrize(
    ("clusters", "planners", "holders", "check"),
    [
        pytest.param(C3, [], {}, lambda a: a == {}, id="no-planner-nothing-assigned"),
        pytest.param(C3, ["p1"], {}, lambda a: set(a.values()) == {"p1"}, id="one-takes-all"),
        pytest.param(
            C3, ["p1", "p2", "p3"], {}, lambda a: sorted(loads(a).values()) == [1, 1, 1], id="even"
        ),
        pytest.param(
            C3,
            ["p1", "p2"],
            {"c1": "p1", "c2": "p1", "c3": "p2"},
            lambda a: a == {"c1": "p1", "c2": "p1", "c3": "p2"},
            id="balanced-claims-are-kept",
        ),
        pytest.param(
            C3,
            ["p1", "p2", "p3"],
            {"c1": "p1", "c2": "p1", "c3": "p2"},
            lambda a: a["c3"] == "p2" and loads(a) == {"p1": 1, "p2": 1, "p3": 1},
            id="new-replica-takes-one-from-the-fullest-only",
        ),
        pytest.param(
            C3,
            ["p2", "p3"],
            {"c1": "p1", "c2": "p1", "c3": "p2"},
            lambda a: a["c3"] == "p2" and sorted(loads(a).values()) == [1, 2],
            id="dead-holder-clusters-are-shared-out",
        ),
        pytest.param(
            ["c1"],
            ["p1", "p2"],
            {"c1": "p2"},
            lambda a: a == {"c1": "p2"},
            id="holder-keeps-when-shares-are-uneven",
        ),
        pytest.param(
            [],
            ["p1"],
            {"gone": "p1"},
            lambda a: a == {},
            id="claims-of-unknown-clusters-are-not-assigned",
        ),
    ],
)
def test_assign(
    clusters: list[str], planners: list[str], holders: dict[str, str], check: object
) -> None:
    a = assign(clusters, planners, holders)
    assert check(a), a  # type: ignore[operator]


names = st.text(alphabet="abcdefgh0123456789-", min_size=1, max_size=6)


@given(
    clusters=st.sets(names, max_size=40),
    planners=st.sets(names, min_size=1, max_size=7),
    seed=st.data(),
)
def test_assign_properties(clusters: set[str], planners: set[str], seed: st.DataObject) -> None:
    everyone = sorted(planners | {"dead-1", "dead-2"})
    holders = {
        c: seed.draw(st.sampled_from(everyone)) for c in clusters if seed.draw(st.booleans())
    }
    a = assign(clusters, planners, holders)
    # complete, only live replicas, balanced within one
    assert set(a) == clusters
    assert set(a.values()) <= planners
    counts = [sum(1 for p in a.values() if p == q) for q in planners]
    assert max(counts) - min(counts) <= 1
    # the same inputs in any order give the same answer (every replica computes the same)
    assert assign(sorted(clusters, reverse=True), sorted(planners, reverse=True), holders) == a
    # sticky: a live holder keeps min(held, ⌊n/m⌋) of its clusters
    floor = len(clusters) // len(planners)
    for p in planners:
        held = [c for c, h in holders.items() if h == p]
        kept = [c for c in held if a[c] == p]
        assert len(kept) >= min(len(held), floor)
    # and once balanced, assigning again moves nothing
    assert assign(clusters, planners, a) == a


@given(clusters=st.sets(names, min_size=1, max_size=40), m=st.integers(1, 6))
def test_a_new_replica_takes_only_its_share(clusters: set[str], m: int) -> None:
    planners = [f"p{i}" for i in range(m)]
    before = assign(clusters, planners, {})
    after = assign(clusters, [*planners, "new"], before)
    share = sum(1 for p in after.values() if p == "new")
    # only what the new replica takes moves; nobody else trades clusters
    assert moves(before, after) == share
    assert share in (len(clusters) // (m + 1), -(-len(clusters) // (m + 1)))


@pytest.mark.parametrize(
    ("interval", "timeout", "ok"),
    [
        pytest.param(2.0, 10.0, True, id="defaults"),
        pytest.param(2.0, 4.0, True, id="exactly-twice"),
        pytest.param(2.0, 3.9, False, id="no-room-for-one-heartbeat-before-fencing"),
    ],
)
def test_heartbeat_problem(interval: float, timeout: float, ok: bool) -> None:
    problem = heartbeat_problem(interval, timeout)
    assert (problem is None) is ok
    if problem:
        assert problem.startswith("--heartbeat-timeout (3.9s) must be at least twice")


@pytest.mark.parametrize(
    ("holders", "running", "share", "freed"),
    [
        # restarted under its old name, holding all three: it runs its share, frees the other
        ({"a": "p1", "b": "p1", "c": "p1"}, {"a", "b"}, {"a": "p1", "b": "p1", "c": "p2"}, ["c"]),
        # a claim it runs is released by the rebalance, never freed here
        ({"a": "p1"}, {"a"}, {"a": "p2"}, []),
        # its own share, not yet running: claimed again, not freed
        ({"a": "p1"}, set(), {"a": "p1"}, []),
        # another replica's claims are never touched
        ({"a": "p2", "b": "p3"}, set(), {"a": "p1", "b": "p1"}, []),
        # a cluster no longer in any share (gone from the registry) held by a claim of ours
        ({"gone": "p1"}, set(), {}, ["gone"]),
    ],
)
def test_a_claim_of_ours_we_neither_run_nor_are_to_run_is_freed(
    holders: dict[str, str], running: set[str], share: dict[str, str], freed: list[str]
) -> None:
    assert orphaned(holders, running, share, "p1") == freed
