"""A bundle's phase from its tally: Ready means applied, seen, healthy and nothing left to prune."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.messages import BundleCounts
from schemas.messages import BundlePhase as P
from services.planner.status.phase import MAX_LISTED, Tally, bundle_phase, counts, listed


def tally(**fields: Any) -> Tally:
    """A revision of 9 objects, all applied, seen and ready, changed by ``fields``."""
    base = Tally("r2", total=9, applied=9, ready=9)
    return dataclasses.replace(base, **fields)


UNSERVED = "no applier for cluster c has ever announced itself"

CASES: list[tuple[str, Tally, P, str]] = [
    # --- Ready: the one phase a user waits for ------------------------------------------------
    (
        "everything-applied-seen-and-ready-is-ready",
        tally(),
        P.READY,
        "revision r2 applied and ready",
    ),
    ("objects-kept-by-annotation-do-not-block-ready", tally(kept=2), P.READY, "applied and ready"),
    ("an-empty-revision-is-ready", Tally("r2"), P.READY, "revision r2 applied and ready"),
    # --- Failed -------------------------------------------------------------------------------
    (
        "refused-revision-is-failed-naming-the-revision",
        tally(refused="Namespace/kube-system is outside the tenant's namespaces"),
        P.FAILED,
        "revision r2 refused: Namespace/kube-system is outside the tenant's namespaces",
    ),
    (
        "refused-revision-wins-over-everything",
        tally(refused="too big", failed=1, conflicts=1, unserved=[UNSERVED]),
        P.FAILED,
        "revision r2 refused: too big",
    ),
    (
        "a-revision-waiting-for-a-kinds-scope-is-reconciling-not-failed",
        tally(refused="the scope of Widget.x is not known yet", refusal_waits=True),
        P.RECONCILING,
        "revision r2 waits: the scope of Widget.x is not known yet",
    ),
    (
        "a-waiting-revision-does-not-hide-what-failed-in-force",
        tally(refused="the scope of Widget.x is not known yet", refusal_waits=True, failed=1),
        P.FAILED,
        "1 of 9 objects failed",
    ),
    (
        "one-failed-object-fails-the-bundle",
        tally(failed=1, applied=8),
        P.FAILED,
        "1 of 9 objects failed",
    ),
    (
        "objects-another-bundle-declares-name-that-bundle",
        tally(failed=9, declared_by={"team-a/web": 9}),
        P.FAILED,
        "9 of 9 objects failed: 9 already declared by bundle team-a/web (publish with take-over "
        "to move them)",
    ),
    (
        "several-declaring-bundles-most-first-three-named",
        tally(failed=9, declared_by={"a": 1, "b": 5, "c": 1, "d": 2}),
        P.FAILED,
        "9 of 9 objects failed: 5 already declared by bundle b, 2 already declared by bundle d, "
        "1 already declared by bundle a and by 1 other bundles (publish with take-over to move "
        "them)",
    ),
    (
        "a-failed-hook-is-named-in-the-line",
        tally(failed=1, problems=["Job.batch/a/migrate: hook failed: BackoffLimitExceeded"]),
        P.FAILED,
        "1 of 9 objects failed: Job.batch/a/migrate: hook failed: BackoffLimitExceeded",
    ),
    ("failed-prune-is-failed", tally(prune_failed=2), P.FAILED, "2 prunes failed"),
    (
        "failed-object-and-failed-prune-are-both-named",
        tally(failed=1, applied=8, prune_failed=1),
        P.FAILED,
        "1 of 9 objects failed, 1 prunes failed",
    ),
    ("failure-wins-over-conflict", tally(failed=1, conflicts=1, applied=7), P.FAILED, "1 of 9"),
    # --- Conflict -----------------------------------------------------------------------------
    (
        "ready-9-of-9-while-one-object-was-in-conflict-is-conflict",
        tally(conflicts=1),
        P.CONFLICT,
        "1 of 9 objects in conflict with another field manager",
    ),
    (
        "conflict-wins-over-unhealthy",
        tally(conflicts=1, unhealthy=1, ready=8),
        P.CONFLICT,
        "1 of 9",
    ),
    ("conflict-wins-over-unserved", tally(conflicts=2, unserved=[UNSERVED]), P.CONFLICT, "2 of 9"),
    # --- Degraded -----------------------------------------------------------------------------
    (
        "applied-but-unhealthy-is-degraded",
        tally(unhealthy=1, ready=8),
        P.DEGRADED,
        "1 objects unhealthy",
    ),
    (
        "unhealthy-while-still-applying-is-reconciling",
        tally(unhealthy=1, applied=8, ready=7, in_flight=1),
        P.RECONCILING,
        "8/9 applied, 7/9 ready",
    ),
    # --- Reconciling --------------------------------------------------------------------------
    (
        "unserved-cluster-is-reconciling-saying-why",
        tally(unserved=[UNSERVED]),
        P.RECONCILING,
        UNSERVED,
    ),
    (
        "every-missing-member-is-named",
        tally(unserved=["no watcher for cluster c (last seen 45s ago)", UNSERVED]),
        P.RECONCILING,
        f"no watcher for cluster c (last seen 45s ago); {UNSERVED}",
    ),
    (
        "intent-in-flight-is-reconciling",
        tally(in_flight=1, applied=8, ready=8),
        P.RECONCILING,
        "8/9 applied, 8/9 ready",
    ),
    (
        "waiting-for-a-crd-is-reconciling",  # the shell counts Waiting/Retrying as in flight
        tally(in_flight=3, applied=6, ready=6),
        P.RECONCILING,
        "6/9 applied",
    ),
    ("nothing-applied-yet-is-reconciling", tally(applied=0, ready=0), P.RECONCILING, "0/9 applied"),
    (
        "applied-but-not-yet-seen-by-the-watcher-is-reconciling",
        tally(unobserved=1, ready=8),
        P.RECONCILING,
        "9/9 applied, 8/9 ready",
    ),
    ("applied-but-health-unknown-is-reconciling", tally(ready=7), P.RECONCILING, "7/9 ready"),
    (
        "pending-prune-is-reconciling",
        tally(pruning=2),
        P.RECONCILING,
        "9/9 applied, 9/9 ready, 2 to prune",
    ),
    (
        "in-flight-wins-over-drift",
        tally(in_flight=1, drifted=1, applied=8, ready=7),
        P.RECONCILING,
        "8/9 applied",
    ),
    # --- OutOfSync ----------------------------------------------------------------------------
    (
        "drift-not-corrected-is-out-of-sync",
        tally(drifted=1, ready=8),
        P.OUT_OF_SYNC,
        "1 objects drifted, not corrected",
    ),
    (
        "prune-held-because-in-use-is-out-of-sync",
        tally(held=1),
        P.OUT_OF_SYNC,
        "1 prunes held back (still in use)",
    ),
    (
        "drift-and-held-prune-are-both-named",
        tally(drifted=2, ready=7, held=1),
        P.OUT_OF_SYNC,
        "2 objects drifted, not corrected, 1 prunes held back (still in use)",
    ),
    ("pending-prune-wins-over-held-prune", tally(pruning=1, held=1), P.RECONCILING, "1 to prune"),
]


@pytest.mark.parametrize(("case", "t", "phase", "message"), CASES, ids=[c[0] for c in CASES])
def test_bundle_phase(case: str, t: Tally, phase: P, message: str) -> None:
    got_phase, got_message = bundle_phase(t)
    assert got_phase is phase, got_message
    assert message in got_message


def test_counts_fold_failed_prunes_into_failed_and_held_prunes_into_kept() -> None:
    t = tally(
        applied=6,
        ready=5,
        failed=1,
        prune_failed=2,
        conflicts=1,
        drifted=1,
        pruning=3,
        kept=1,
        held=2,
    )
    assert counts(t) == BundleCounts(
        total=9, applied=6, failed=3, ready=5, conflicts=1, drifted=1, pruning=3, kept=3
    )


def test_problems_listed_are_bounded() -> None:
    t = tally(problems=[f"ConfigMap/ns/cm-{i}: failed" for i in range(MAX_LISTED + 10)])
    assert listed(t) == t.problems[:MAX_LISTED]
    assert listed(tally(problems=["a", "b"])) == ["a", "b"]


# --- property: READY is never reported over anything the user should hear about ----------------


@st.composite
def tallies(draw: st.DrawFn) -> Tally:
    """Tallies the planner's shell can count: each desired object is at most one of failed,
    conflicting, in flight or applied; each applied one at most one of unobserved, drifted,
    ready or unhealthy (``PlannerCluster.tally``)."""
    small = st.integers(0, 3)
    total = draw(st.integers(0, 12))
    failed, conflicts, in_flight = draw(small), draw(small), draw(small)
    total = max(total, failed + conflicts + in_flight)
    applied = draw(st.integers(0, total - failed - conflicts - in_flight))
    unobserved = draw(st.integers(0, applied))
    drifted = draw(st.integers(0, applied - unobserved))
    ready = draw(st.integers(0, applied - unobserved - drifted))
    unhealthy = draw(st.integers(0, applied - unobserved - drifted - ready))
    return Tally(
        draw(st.sampled_from(["r1", "0123abcd"])),
        total=total,
        applied=applied,
        ready=ready,
        failed=failed,
        conflicts=conflicts,
        unhealthy=unhealthy,
        in_flight=in_flight,
        unobserved=unobserved,
        drifted=drifted,
        pruning=draw(small),
        prune_failed=draw(small),
        kept=draw(small),
        held=draw(small),
        refused=draw(st.sampled_from(["", "outside the tenant's limits"])),
        refusal_waits=draw(st.booleans()),
        unserved=draw(st.sampled_from([[], [UNSERVED]])),
    )


@settings(max_examples=500, deadline=None)
@given(tallies())
def test_ready_only_when_nothing_is_left_to_do(t: Tally) -> None:
    phase, message = bundle_phase(t)
    everything_done = (
        t.failed == t.conflicts == t.pruning == t.prune_failed == t.held == 0
        and t.drifted == t.in_flight == t.unobserved == t.unhealthy == 0
        and t.applied == t.ready == t.total
        and not t.refused
        and not t.unserved
    )
    assert (phase is P.READY) == everything_done, (phase, message)
    if t.conflicts and phase is not P.FAILED:
        assert phase is P.CONFLICT
    if t.refused and t.refusal_waits and not (t.failed or t.prune_failed or t.conflicts):
        if not t.outside:
            assert (phase, message) == (P.RECONCILING, f"revision {t.revision} waits: {t.refused}")
    elif t.refused and not t.refusal_waits:
        assert (phase, message) == (P.FAILED, f"revision {t.revision} refused: {t.refused}")


@settings(max_examples=300, deadline=None)
@given(tallies())
def test_counts_are_the_tally(t: Tally) -> None:
    c = counts(t)
    assert (c.total, c.applied, c.ready, c.conflicts, c.drifted, c.pruning) == (
        t.total,
        t.applied,
        t.ready,
        t.conflicts,
        t.drifted,
        t.pruning,
    )
    assert c.failed == t.failed + t.prune_failed
    assert c.kept == t.kept + t.held
