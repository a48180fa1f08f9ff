"""Which objects of a revision may be written now: its hooks and sync waves (``rule.waves``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import pytest

from schemas.messages import Health
from schemas.subjects import ObjectKey
from services.core.hooks import SUCCEEDED, Hook, Phase, Stage
from services.planner.rule.entry import DELETE_INFLIGHT, Entry
from services.planner.rule.waves import OPEN, Gate, gate, phase_done, staged, state

NAMESPACES, PRE, SYNC, POST, FAIL = (
    Phase.NAMESPACES,
    Phase.PRE,
    Phase.SYNC,
    Phase.POST,
    Phase.FAIL,
)


def k(kind: str, name: str) -> ObjectKey:
    namespace = "" if kind == "Namespace" else "apps"
    return ObjectKey("batch" if kind == "Job" else "", kind, namespace, name)


MIGRATE = k("Job", "migrate")
CONFIG = k("ConfigMap", "config")
WEB = k("Deployment", "web")
SMOKE = k("Job", "smoke")
PAGE = k("Job", "page")


def pending(g: Gate) -> Gate:
    """``g`` with a sync-fail hook not done (not run, or running)."""
    return dataclasses.replace(g, fail_pending=True)


# --- Gate.may_write -------------------------------------------------------------------------

MAY_WRITE: list[tuple[str, Gate, Stage, bool]] = [
    ("open-writes-a-namespace", OPEN, (NAMESPACES, 0), True),
    ("open-writes-a-pre-hook", OPEN, (PRE, 0), True),
    ("a-pre-hook-waits-for-the-namespaces", Gate((NAMESPACES, 0)), (PRE, -10), False),
    ("open-writes-a-sync-wave", OPEN, (SYNC, 7), True),
    ("open-writes-a-post-hook", OPEN, (POST, 0), True),
    ("open-holds-a-sync-fail-hook", OPEN, (FAIL, 0), False),
    ("the-frontier-itself-is-written", Gate((PRE, 0)), (PRE, 0), True),
    ("below-the-frontier-is-written", Gate((SYNC, 2)), (SYNC, 1), True),
    ("an-earlier-phase-is-written", Gate((SYNC, -9)), (PRE, 100), True),
    ("a-later-wave-waits", Gate((PRE, 0)), (PRE, 1), False),
    ("a-later-phase-waits-whatever-its-wave", Gate((PRE, 5)), (SYNC, -100), False),
    ("post-waits-for-sync", Gate((SYNC, 3)), (POST, -1), False),
    ("sync-fail-waits-for-a-failure", Gate((SYNC, 0)), (FAIL, 0), False),
    ("sync-fail-runs-on-a-failure", Gate((PRE, 0), failed=True), (FAIL, 0), True),
    ("sync-fail-any-wave-runs-on-a-failure", Gate((SYNC, 3), failed=True), (FAIL, -4), True),
    ("a-failure-still-holds-what-is-after-it", Gate((PRE, 0), failed=True), (SYNC, 0), False),
    ("a-failure-holds-post", Gate((SYNC, 1), failed=True), (POST, 0), False),
    ("a-failure-lets-its-own-stage-be-written", Gate((SYNC, 1), failed=True), (SYNC, 1), True),
]


@pytest.mark.parametrize(
    ("g", "stage", "expected"), [pytest.param(g, s, e, id=i) for i, g, s, e in MAY_WRITE]
)
def test_may_write(g: Gate, stage: Stage, expected: bool) -> None:
    assert g.may_write(stage) is expected


@pytest.mark.parametrize(
    ("g", "expected"),
    [
        pytest.param(OPEN, "", id="open"),
        pytest.param(Gate(None, failed=True), "", id="no-frontier"),
        pytest.param(Gate((PRE, 0)), "waits for pre wave 0 to finish", id="pre"),
        pytest.param(
            Gate((NAMESPACES, 0), waiting_on=k("Namespace", "apps")),
            "waits for namespaces wave 0 to finish (Namespace/apps)",
            id="namespaces",
        ),
        pytest.param(
            Gate((PRE, -1), waiting_on=MIGRATE),
            "waits for pre wave -1 to finish (Job.batch/apps/migrate)",
            id="pre-naming-the-object",
        ),
        pytest.param(
            Gate((SYNC, 2), waiting_on=WEB),
            "waits for sync wave 2 to finish (Deployment/apps/web)",
            id="sync",
        ),
        pytest.param(
            Gate((POST, 0), failed=True, waiting_on=SMOKE),
            "waits for post wave 0 to finish (Job.batch/apps/smoke)",
            id="post",
        ),
    ],
)
def test_why(g: Gate, expected: str) -> None:
    assert g.why() == expected


# --- phase_done -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("g", "phase", "expected"),
    [
        pytest.param(OPEN, PRE, True, id="open-pre"),
        pytest.param(OPEN, POST, True, id="open-post"),
        # every stage done and nothing failed: the revision ended, so did the sync-fail phase
        pytest.param(OPEN, FAIL, True, id="open-fail-nothing-failed"),
        pytest.param(Gate((PRE, 0), failed=True), FAIL, True, id="failed-sync-fail-hooks-done"),
        pytest.param(
            pending(Gate((PRE, 0), failed=True)), FAIL, False, id="failed-sync-fail-pending"
        ),
        pytest.param(Gate((NAMESPACES, 0)), NAMESPACES, False, id="namespaces-not-done"),
        pytest.param(Gate((PRE, 0)), NAMESPACES, True, id="namespaces-done"),
        pytest.param(Gate((PRE, 3)), PRE, False, id="pre-frontier-pre-not-done"),
        pytest.param(Gate((SYNC, -5)), PRE, True, id="sync-frontier-pre-done"),
        pytest.param(Gate((SYNC, -5)), SYNC, False, id="sync-frontier-sync-not-done"),
        pytest.param(Gate((POST, 0)), SYNC, True, id="post-frontier-sync-done"),
        pytest.param(Gate((POST, 0)), POST, False, id="post-frontier-post-not-done"),
        pytest.param(Gate((SYNC, 0), failed=True), PRE, True, id="failed-in-sync-pre-done"),
    ],
)
def test_phase_done(g: Gate, phase: int, expected: bool) -> None:
    assert phase_done(g, phase) is expected


# --- staged ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stages", "expected"),
    [
        pytest.param({}, False, id="empty"),
        pytest.param({CONFIG: (SYNC, 0)}, False, id="one-object"),
        pytest.param({CONFIG: (SYNC, 2), WEB: (SYNC, 2)}, False, id="one-stage"),
        pytest.param({CONFIG: (SYNC, 0), WEB: (SYNC, 1)}, True, id="two-waves"),
        pytest.param({CONFIG: (SYNC, 0), MIGRATE: (PRE, 0)}, True, id="a-hook"),
        pytest.param({CONFIG: (SYNC, 0), WEB: (SYNC, 0), PAGE: (FAIL, 0)}, True, id="sync-fail"),
    ],
)
def test_staged(stages: dict[ObjectKey, Stage], expected: bool) -> None:
    assert staged(stages) is expected


# --- state: done and failed of one object for a revision ------------------------------------

M1, M2 = b"\x01" * 32, b"\x02" * 32
A1, A2 = b"\x0a" * 32, b"\x0b" * 32

DONE = Entry(
    MIGRATE,
    bundle="team-a/web",
    revision="r1",
    manifest_sha=M1,
    applied_manifest_sha=M1,
    apply_sha=A1,
    applied_rv=5,
    applied_bundle="team-a/web",
    server_sha=A1,
    server_rv=5,
    owner_bundle="team-a/web",
    applied_at=10.0,
)
"""Applied for r1, seen by the watcher as applied: done once Ready."""


def e(**fields: Any) -> Entry:
    return msgspec.structs.replace(DONE, **fields)


RETIRED = e(server_sha=None, server_deleted=True, server_retired=True, server_rv=7)
"""Ended and deleted by its hook's policy (or its TTL)."""

R, IP, F, U = Health.READY, Health.IN_PROGRESS, Health.FAILED, Health.UNKNOWN

STATE: list[tuple[str, Entry | None, Health, tuple[bool, bool]]] = [
    ("unknown-object", None, R, (False, False)),
    ("applied-seen-ready-is-done", DONE, R, (True, False)),
    ("applied-seen-in-progress-waits", DONE, IP, (False, False)),
    ("applied-seen-unknown-waits", DONE, U, (False, False)),
    ("applied-seen-failed-fails", DONE, F, (False, True)),
    ("another-revision-waits", e(revision="r0"), R, (False, False)),
    ("another-revision-failed-is-not-this-ones-failure", e(revision="r0"), F, (False, False)),
    ("not-desired-waits", e(manifest_sha=None), R, (False, False)),
    (
        "never-applied-waits",
        e(applied_manifest_sha=None, apply_sha=None, applied_rv=0),
        R,
        (False, False),
    ),
    ("an-earlier-manifest-applied-waits", e(applied_manifest_sha=M2), R, (False, False)),
    ("an-apply-in-flight-waits", e(inflight=M1, inflight_at=11.0), R, (False, False)),
    ("a-delete-in-flight-waits", e(inflight=DELETE_INFLIGHT), R, (False, False)),
    ("its-apply-failed-fails", e(failed=M1, failed_at=11.0), R, (False, True)),
    (
        "its-apply-failed-never-applied-fails",
        e(failed=M1, failed_at=1.0, applied_manifest_sha=None, applied_at=0.0),
        U,
        (False, True),
    ),
    ("an-earlier-manifests-failure-does-not-count", e(failed=M2, failed_at=11.0), R, (True, False)),
    ("a-failure-applied-over-since-does-not-count", e(failed=M1, failed_at=9.0), R, (True, False)),
    ("not-seen-since-the-apply-waits", e(server_rv=4, server_sha=A2), R, (False, False)),
    ("not-seen-at-all-waits", e(server_rv=0, server_sha=None), R, (False, False)),
    ("seen-earlier-but-already-as-applied-is-done", e(server_rv=4), R, (True, False)),
    ("drifted-waits", e(server_sha=A2, server_rv=6), R, (False, False)),
    (
        "deleted-by-someone-waits",
        e(server_sha=None, server_deleted=True, server_rv=6),
        R,
        (False, False),
    ),
    ("retired-after-success-is-done", RETIRED, R, (True, False)),
    ("retired-health-unknown-is-done", RETIRED, U, (True, False)),
    ("retired-after-failure-fails", RETIRED, F, (False, True)),
    (
        "retired-for-another-revision-waits",
        msgspec.structs.replace(RETIRED, revision="r0"),
        R,
        (False, False),
    ),
    (
        "retired-but-not-yet-applied-waits",
        msgspec.structs.replace(RETIRED, applied_manifest_sha=M2),
        R,
        (False, False),
    ),
    ("retired-flag-on-a-live-object-reads-it-as-live", e(server_retired=True), IP, (False, False)),
]


@pytest.mark.parametrize(
    ("entry", "h", "expected"), [pytest.param(en, h, x, id=i) for i, en, h, x in STATE]
)
def test_state(entry: Entry | None, h: Health, expected: tuple[bool, bool]) -> None:
    assert state(entry, h, "r1") == expected


# --- gate: the frontier of a revision -------------------------------------------------------

D, W, X = (True, False), (False, False), (False, True)
"""done, waiting (not done), failed"""


def of(states: Mapping[ObjectKey, tuple[bool, bool]]) -> Callable[[ObjectKey], tuple[bool, bool]]:
    """``gate``'s ``state_of`` from a table (an object not in it: not done)."""
    return lambda key: states.get(key, W)


CHART: dict[ObjectKey, Stage] = {
    MIGRATE: (PRE, -1),
    CONFIG: (SYNC, 0),
    WEB: (SYNC, 2),
    SMOKE: (POST, 0),
    PAGE: (FAIL, 0),
}

GATE: list[tuple[str, Mapping[ObjectKey, Stage], dict[ObjectKey, tuple[bool, bool]], Gate]] = [
    ("nothing-staged-is-open", {}, {}, OPEN),
    ("nothing-done-waits-on-the-pre-hook", CHART, {}, pending(Gate((PRE, -1), waiting_on=MIGRATE))),
    ("pre-done-waits-on-wave-0", CHART, {MIGRATE: D}, pending(Gate((SYNC, 0), waiting_on=CONFIG))),
    (
        "wave-0-done-waits-on-wave-2",
        CHART,
        {MIGRATE: D, CONFIG: D},
        pending(Gate((SYNC, 2), waiting_on=WEB)),
    ),
    (
        "sync-done-waits-on-post",
        CHART,
        {MIGRATE: D, CONFIG: D, WEB: D},
        pending(Gate((POST, 0), waiting_on=SMOKE)),
    ),
    (
        "all-done-is-open-the-sync-fail-hook-not-run",
        CHART,
        {MIGRATE: D, CONFIG: D, WEB: D, SMOKE: D},
        pending(OPEN),
    ),
    (
        "all-done-and-the-sync-fail-hook-done",
        CHART,
        {MIGRATE: D, CONFIG: D, WEB: D, SMOKE: D, PAGE: D},
        OPEN,
    ),
    (
        "a-lower-stage-not-done-again-is-the-frontier",
        CHART,
        {CONFIG: D, WEB: D, SMOKE: D},
        pending(Gate((PRE, -1), waiting_on=MIGRATE)),
    ),
    (
        "a-failed-pre-hook",
        CHART,
        {MIGRATE: X},
        pending(Gate((PRE, -1), failed=True, waiting_on=MIGRATE)),
    ),
    (
        "a-failed-pre-hook-its-sync-fail-hook-done",
        CHART,
        {MIGRATE: X, PAGE: D},
        Gate((PRE, -1), failed=True, waiting_on=MIGRATE),
    ),
    (
        "a-failed-sync-object",
        CHART,
        {MIGRATE: D, CONFIG: D, WEB: X},
        pending(Gate((SYNC, 2), failed=True, waiting_on=WEB)),
    ),
    (
        "a-failed-post-hook",
        CHART,
        {MIGRATE: D, CONFIG: D, WEB: D, SMOKE: X},
        pending(Gate((POST, 0), failed=True, waiting_on=SMOKE)),
    ),
    (
        "a-failed-sync-fail-hook-fails-nothing",
        {CONFIG: (SYNC, 0), PAGE: (FAIL, 0)},
        {CONFIG: D, PAGE: X},
        pending(OPEN),
    ),
    ("only-sync-fail-hooks-is-open", {PAGE: (FAIL, 0)}, {}, pending(OPEN)),
    (
        "the-first-object-of-the-lowest-stage-is-named",
        {WEB: (SYNC, 1), CONFIG: (SYNC, 0), SMOKE: (SYNC, 0)},
        {},
        Gate((SYNC, 0), waiting_on=CONFIG),
    ),
    (
        "the-lowest-stage-wins-whatever-the-order",
        {SMOKE: (POST, 0), WEB: (SYNC, 1), MIGRATE: (PRE, 4)},
        {},
        Gate((PRE, 4), waiting_on=MIGRATE),
    ),
    (
        "namespaces-come-before-pre-hooks",
        {MIGRATE: (PRE, -5), k("Namespace", "apps"): (NAMESPACES, 0)},
        {},
        Gate((NAMESPACES, 0), waiting_on=k("Namespace", "apps")),
    ),
]


@pytest.mark.parametrize(
    ("stages", "states", "expected"),
    [pytest.param(s, st, x, id=i) for i, s, st, x in GATE],
)
def test_gate(
    stages: Mapping[ObjectKey, Stage],
    states: dict[ObjectKey, tuple[bool, bool]],
    expected: Gate,
) -> None:
    asked: list[ObjectKey] = []

    def state_of(key: ObjectKey) -> tuple[bool, bool]:
        asked.append(key)
        return states.get(key, W)

    assert gate(stages, state_of) == expected
    assert sorted(asked) == sorted(stages)  # each object's state asked once


def test_a_failed_object_in_a_later_stage_counts_though_a_lower_one_waits() -> None:
    g = gate(CHART, of({WEB: X}))
    assert g == pending(Gate((PRE, -1), failed=True, waiting_on=MIGRATE))
    assert g.may_write((FAIL, 0))


def test_a_revision_written_stage_by_stage() -> None:
    """The gate as a revision is written: each stage only once the ones before it are done,
    and the sync-fail hook never, since nothing failed."""
    states: dict[ObjectKey, tuple[bool, bool]] = {}
    writable: list[set[ObjectKey]] = []
    for done in [None, MIGRATE, CONFIG, WEB, SMOKE]:
        if done is not None:
            states[done] = D
        g = gate(CHART, of(states))
        writable.append({key for key, stage in CHART.items() if g.may_write(stage)})
    assert writable == [
        {MIGRATE},
        {MIGRATE, CONFIG},
        {MIGRATE, CONFIG, WEB},
        {MIGRATE, CONFIG, WEB, SMOKE},
        {MIGRATE, CONFIG, WEB, SMOKE},
    ]


def test_a_failed_pre_hook_writes_the_sync_fail_hook_and_nothing_after_it() -> None:
    entries = {MIGRATE: DONE}
    health = {MIGRATE: F}
    g = gate(CHART, lambda key: state(entries.get(key), health.get(key, U), "r1"))
    assert g == pending(Gate((PRE, -1), failed=True, waiting_on=MIGRATE))
    assert {key for key, stage in CHART.items() if g.may_write(stage)} == {MIGRATE, PAGE}
    # and so once the hook-failed policy deleted it: its tombstone keeps the failure
    entries = {MIGRATE: RETIRED}
    g = gate(CHART, lambda key: state(entries.get(key), health.get(key, U), "r1"))
    assert g == pending(Gate((PRE, -1), failed=True, waiting_on=MIGRATE))


def test_a_hook_deleted_by_its_policy_after_success_lets_the_next_stage_through() -> None:
    entries = {MIGRATE: RETIRED}
    g = gate(CHART, lambda key: state(entries.get(key), R, "r1"))
    assert g == pending(Gate((SYNC, 0), waiting_on=CONFIG))
    assert phase_done(g, PRE)


def test_a_sync_fail_hook_that_succeeded_may_be_deleted_by_its_policy() -> None:
    page = Hook(FAIL, 0, frozenset([SUCCEEDED]))
    stages = {MIGRATE: (PRE, -1), PAGE: page.stage}
    g = gate(stages, of({MIGRATE: X, PAGE: D}))
    assert g.may_write(page.stage)  # it ran, and succeeded
    # the condition folding.Folder._delete_ended_hook deletes a hook-succeeded hook on
    assert phase_done(g, page.until)


def test_a_hook_kept_through_sync_fail_is_deleted_when_the_revision_succeeds() -> None:
    notify = Hook(POST, 0, frozenset([SUCCEEDED]), FAIL)
    stages = {CONFIG: (SYNC, 0), SMOKE: notify.stage}
    g = gate(stages, of({CONFIG: D, SMOKE: D}))
    assert g == OPEN  # the revision is done and succeeded: the sync-fail phase never comes
    assert phase_done(g, notify.until)


def test_a_retired_tombstone_older_than_the_apply_is_not_this_copys_end() -> None:
    # r1's copy deleted by its policy at rv 10 (its tombstone retired, ended Ready); r2's copy
    # applied at rv 11 and not seen by the watcher yet
    fresh = msgspec.structs.replace(RETIRED, revision="r2", applied_rv=11, server_rv=10)
    assert not fresh.observed  # the tally counts it unobserved, as it is
    assert state(fresh, R, "r2") == (False, False)


def test_a_track_kept_object_by_object_equals_the_gate_counted_afresh() -> None:
    """``Track`` (what the planner keeps: one update per fold) must say what recounting the
    whole revision says, after any sequence of changes."""
    import random

    from services.planner.rule.waves import Track

    rng = random.Random(34)
    keys = [ObjectKey("", "ConfigMap", "ns", f"o{i}") for i in range(40)]
    choices = [(PRE, 0), (PRE, 1), (SYNC, -1), (SYNC, 0), (SYNC, 3), (POST, 0), (FAIL, 0)]
    for _ in range(50):
        stages = {k: rng.choice(choices) for k in keys}
        states = {k: (rng.random() < 0.5, rng.random() < 0.1) for k in keys}
        track = Track(stages, states.__getitem__)
        for _ in range(200):
            k = rng.choice(keys)
            states[k] = (rng.random() < 0.6, rng.random() < 0.05)
            track.update(k, *states[k])
            fresh = gate(stages, states.__getitem__)
            got = track.gate()
            assert (got.frontier, got.failed, got.fail_pending) == (
                fresh.frontier,
                fresh.failed,
                fresh.fail_pending,
            )
            assert got.waiting_on is None or stages[got.waiting_on] == got.frontier
            assert got.waiting_on is None or not states[got.waiting_on][0]
