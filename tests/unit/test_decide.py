"""The planner's decision rule: table-driven sequences and property-based interleavings."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.subjects import ObjectKey
from services.planner.rule.decide import (
    HIT,
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Removed,
    evaluate,
    restore,
    step,
)

KEY = ObjectKey("", "ConfigMap", "ns", "cm")


def sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


M1, M2 = sha("manifest-1"), sha("manifest-2")
S1, S2 = sha("server-after-1"), sha("server-after-2")  # what the server returns for M1/M2
FOREIGN = sha("someone-else-changed-it")


def run(events: list[Event], entry: Entry | None = None) -> tuple[Entry, list[Decision | None]]:
    e = entry or Entry(KEY)
    out = []
    for ev in events:
        e, d = step(e, ev)
        out.append(d)
    return e, out


def apply(reason: R) -> Decision:
    return Decision(A.APPLY, reason)


BASE = [Desired("b", "r1", M1), Applied(M1, S1, 10, bundle="b"), Observed(10, S1, owner_bundle="b")]

CASES: list[tuple[str, list[Event], list[Decision | None]]] = [
    ("new-object-is-applied", [Desired("b", "r1", M1)], [apply(R.NEW)]),
    (
        "own-watch-event-before-applied-event-applies-once",
        [
            Desired("b", "r1", M1),
            Observed(10, S1, owner_bundle="b"),
            Applied(M1, S1, 10),
            Desired("b", "r1", M1),
        ],
        [apply(R.NEW), None, None, HIT],
    ),
    (
        "applied-event-before-own-watch-event-applies-once",
        [*BASE, Desired("b", "r1", M1)],
        [apply(R.NEW), None, None, HIT],
    ),
    (
        "republish-same-revision-is-a-hit",
        [*BASE, Desired("b", "r1", M1), Desired("b", "r1", M1)],
        [apply(R.NEW), None, None, HIT, HIT],
    ),
    (
        "manifest-change-is-applied",
        [*BASE, Desired("b", "r2", M2)],
        [apply(R.NEW), None, None, apply(R.MANIFEST)],
    ),
    (
        "newer-manifest-supersedes-the-one-in-flight",
        [
            Desired("b", "r1", M1),
            Desired("b", "r2", M2),
            Applied(M1, S1, 10),
            Applied(M2, S2, 11),
            Observed(11, S2),
            Desired("b", "r2", M2),
        ],
        [apply(R.NEW), apply(R.MANIFEST), None, None, None, HIT],
    ),
    (
        "drift-is-reapplied",
        [*BASE, Observed(12, FOREIGN)],
        [apply(R.NEW), None, None, apply(R.DRIFT)],
    ),
    (
        "drift-correction-settles",
        [
            *BASE,
            Observed(12, FOREIGN),
            Applied(M1, S1, 13),
            Observed(13, S1),
            Desired("b", "r1", M1),
        ],
        [apply(R.NEW), None, None, apply(R.DRIFT), None, None, HIT],
    ),
    (
        "out-of-band-delete-is-restored",
        [*BASE, Observed(12, None, deleted=True)],
        [apply(R.NEW), None, None, apply(R.DELETED)],
    ),
    (
        "server-event-older-than-our-apply-is-ignored",
        [*BASE, Observed(9, FOREIGN)],
        [apply(R.NEW), None, None, None],
    ),
    (
        "out-of-order-server-event-is-ignored",
        [*BASE, Observed(14, S1), Observed(12, FOREIGN)],
        [apply(R.NEW), None, None, None, None],
    ),
    (
        "duplicate-events-change-nothing",
        [*BASE, Applied(M1, S1, 10), Observed(10, S1), Desired("b", "r1", M1)],
        [apply(R.NEW), None, None, None, None, HIT],
    ),
    (
        "failure-is-not-retried-by-events",
        [Desired("b", "r1", M1), Failed(M1), Observed(3, FOREIGN)],
        [apply(R.NEW), None, None],
    ),
    (
        "republish-retries-a-failure",
        [Desired("b", "r1", M1), Failed(M1), Desired("b", "r1", M1)],
        [apply(R.NEW), None, apply(R.RETRY)],
    ),
    (
        "new-manifest-after-failure-is-applied",
        [Desired("b", "r1", M1), Failed(M1), Desired("b", "r2", M2)],
        [apply(R.NEW), None, apply(R.NEW)],
    ),
    (
        "applies-finishing-in-reverse-order-converge",
        [Desired("b", "r1", M1), Desired("b", "r2", M2), Applied(M1, S1, 11), Applied(M2, S2, 10)],
        [apply(R.NEW), apply(R.MANIFEST), None, apply(R.MANIFEST)],
    ),
    (
        "removed-owned-object-is-pruned",
        [*BASE, Removed("b", "r2")],
        [apply(R.NEW), None, None, Decision(A.DELETE, R.PRUNE)],
    ),
    (
        "prune-disabled-keeps-it",
        [*BASE, Removed("b", "r2", prune=False)],
        [apply(R.NEW), None, None, Decision(A.KEEP, R.PRUNE_DISABLED)],
    ),
    (
        "object-owned-by-another-bundle-is-kept",
        [
            Desired("b", "r1", M1),
            Applied(M1, S1, 10),
            Observed(10, S1, owner_bundle="other"),
            Removed("b", "r2"),
        ],
        [apply(R.NEW), None, None, Decision(A.KEEP, R.NOT_OWNED)],
    ),
    (
        "object-removed-while-its-apply-is-on-its-way-gets-a-delete-that-replaces-the-apply",
        [Desired("b", "r1", M1), Removed("b", "r2")],
        [apply(R.NEW), Decision(A.DELETE, R.PRUNE)],
    ),
    (
        "object-never-seen-live-and-not-in-flight-is-not-deleted",
        [Desired("b", "r1", M1), Failed(M1, 1.0), Removed("b", "r2")],
        [apply(R.NEW), None, Decision(A.KEEP, R.NOT_OWNED)],
    ),
    (
        "pruned-object-stays-gone",
        [
            *BASE,
            Removed("b", "r2"),
            Applied(M1, None, 15, deleted=True),
            Observed(15, None, deleted=True),
        ],
        [apply(R.NEW), None, None, Decision(A.DELETE, R.PRUNE), None, None],
    ),
    ("server-event-without-desired-state-is-ignored", [Observed(5, FOREIGN)], [None]),
    (
        # a kubectl copy of a managed object, or another's label: it carries the bundle's
        # label, but the bundle never applied it — not in its inventory, never deleted
        "labelled-object-the-bundle-never-applied-is-kept",
        [Observed(10, FOREIGN, owner_bundle="b"), Removed("b", "r2")],
        [None, Decision(A.KEEP, R.NOT_DECLARED)],
    ),
    (
        "object-last-applied-for-another-bundle-is-not-this-ones-to-prune",
        [
            Desired("b", "r1", M1),
            Applied(M1, S1, 10, bundle="other"),
            Observed(10, S1, owner_bundle="b"),
            Removed("b", "r2"),
        ],
        [apply(R.NEW), None, None, Decision(A.KEEP, R.NOT_DECLARED)],
    ),
    (
        "a-delete-forgets-the-inventory",
        [
            *BASE,
            Removed("b", "r2"),
            Applied(M1, None, 15, deleted=True),
            Observed(16, S1, owner_bundle="b"),
            Removed("b", "r3"),
        ],
        [
            apply(R.NEW),
            None,
            None,
            Decision(A.DELETE, R.PRUNE),
            None,
            None,
            Decision(A.KEEP, R.NOT_DECLARED),
        ],
    ),
]


@pytest.mark.parametrize(("case", "events", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decisions(case: str, events: list[Event], expected: list[Decision | None]) -> None:
    _, got = run(events)
    assert got == expected


def test_a_failed_drift_correction_is_not_retried_in_a_loop() -> None:
    # force=false and someone else took the field: the correction conflicts. Report it; do not
    # re-apply on every event (a republish or a manifest change tries again).
    e, got = run(
        [
            *BASE,
            Observed(12, FOREIGN, owner_bundle="b"),
            Failed(M1, at=5.0),
            Observed(13, FOREIGN, owner_bundle="b"),
        ],
    )
    assert got[3:] == [apply(R.DRIFT), None, None]
    assert e.inflight is None
    _, d = step(e, Desired("b", "r1", M1))
    assert d == apply(R.RETRY)


def test_restore_orders_failure_and_success_by_time() -> None:
    base = Entry(KEY)
    for f in [Desired("b", "r1", M1)]:
        base = restore(base, f)
    failed_then_applied = restore(restore(base, Failed(M1, at=1.0)), Applied(M1, S1, 10, at=2.0))
    applied_then_failed = restore(restore(base, Applied(M1, S1, 10, at=1.0)), Failed(M1, at=2.0))
    assert evaluate(failed_then_applied) == HIT  # no server event: the apply stands
    assert evaluate(applied_then_failed) is None  # reported, waiting for a republish


def test_an_old_failure_does_not_stop_drift_correction() -> None:
    _, got = run(
        [
            Desired("b", "r1", M1),
            Failed(M1, at=1.0),
            Desired("b", "r1", M1),
            Applied(M1, S1, 10, at=2.0),
            Observed(11, FOREIGN),
        ]
    )
    assert got == [apply(R.NEW), None, apply(R.RETRY), None, apply(R.DRIFT)]


@pytest.mark.parametrize("order", ["bundle-first", "events-first"])
def test_restore_rebuilds_without_deciding_in_any_order(order: str) -> None:
    facts: list[Event] = [
        Desired("b", "r1", M1),
        Applied(M1, S1, 10),
        Observed(10, S1, owner_bundle="b"),
    ]
    if order == "events-first":
        facts = facts[::-1]
    e = Entry(KEY)
    for f in facts:
        e = restore(e, f)
    assert e.inflight is None
    assert step(e, Desired("b", "r1", M1))[1] == HIT


def test_restore_then_evaluate_finds_what_changed_while_down() -> None:
    e = Entry(KEY)
    for f in [Desired("b", "r1", M1), Applied(M1, S1, 10), Observed(12, FOREIGN)]:
        e = restore(e, f)
    assert evaluate(e) == apply(R.DRIFT)


def test_new_object_is_applied_exactly_once_before_its_first_hit() -> None:
    _, got = run([*BASE, *[Desired("b", "r1", M1)] * 5])
    writes = [d for d in got if d is not None and d.writes]
    assert writes == [apply(R.NEW)]
    assert got[-5:] == [HIT] * 5


# --- property: any interleaving converges to the latest desired manifest ----------------------


@dataclasses.dataclass
class World:
    """A model cluster, a bus that reorders and duplicates, and appliers."""

    entry: Entry = dataclasses.field(default_factory=lambda: Entry(KEY))
    content: bytes | None = None  # manifest (or FOREIGN) currently live; None = absent
    rv: int = 1
    inbox: list[Event] = dataclasses.field(default_factory=list)
    intents: list[bytes] = dataclasses.field(default_factory=list)
    latest_intent: bytes | None = None
    desired: bytes | None = None
    writes: int = 0

    def server_sha(self) -> bytes | None:
        return None if self.content is None else sha("server:" + self.content.hex())

    def plan(self, ev: Event) -> None:
        self.entry, d = step(self.entry, ev)
        if d is not None and d.action is A.APPLY:
            assert self.entry.manifest_sha is not None
            self.intents.append(self.entry.manifest_sha)
            self.latest_intent = self.entry.manifest_sha

    def cluster_changed(self) -> None:
        self.rv += 1
        self.inbox.append(
            Observed(self.rv, self.server_sha(), deleted=self.content is None, owner_bundle="b")
        )

    def apply_one(self, index: int, drop_superseded: bool) -> None:
        manifest = self.intents.pop(index % len(self.intents))
        if drop_superseded and manifest != self.latest_intent:
            return  # the applier sees a newer intent on the subject and drops this one
        self.writes += 1
        self.content = manifest
        self.cluster_changed()
        self.inbox.append(Applied(manifest, self.server_sha(), self.rv))


ops = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.sampled_from([M1, M2, sha("m3")])),
        st.tuples(st.just("deliver"), st.integers(0, 50)),
        st.tuples(st.just("duplicate"), st.integers(0, 50)),
        st.tuples(st.just("apply"), st.integers(0, 50)),
        st.tuples(st.just("drift"), st.booleans()),
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(ops, st.booleans(), st.randoms(use_true_random=False))
def test_any_interleaving_converges_to_the_latest_manifest(
    operations: list[tuple[str, Any]], drop_superseded: bool, rnd: Any
) -> None:
    w = World()
    for op, arg in operations:
        if op == "publish":
            w.desired = arg
            w.plan(Desired("b", "r", arg))
        elif op == "deliver" and w.inbox:
            w.plan(w.inbox.pop(arg % len(w.inbox)))
        elif op == "duplicate" and w.inbox:
            w.inbox.append(w.inbox[arg % len(w.inbox)])
        elif op == "apply" and w.intents:
            w.apply_one(arg, drop_superseded)
        elif op == "drift" and w.content is not None:
            w.content = None if arg else FOREIGN  # delete or change out of band
            w.cluster_changed()
    # Quiesce: deliver everything in random order, appliers drain their queue.
    for _ in range(1000):
        if w.inbox:
            w.plan(w.inbox.pop(rnd.randrange(len(w.inbox))))
        elif w.intents:
            w.apply_one(rnd.randrange(len(w.intents)), drop_superseded)
        else:
            break
    else:
        pytest.fail("did not quiesce")
    if w.desired is None:
        assert w.writes == 0
        return
    assert w.content == w.desired, "a stale intent won"
    assert w.entry.inflight is None
    final, d = step(w.entry, Desired("b", "r", w.desired))
    assert d == HIT, f"not settled: {final}"


def test_a_restored_prune_of_an_object_already_gone_ends_the_inventory() -> None:
    """The applier reports a delete of an object already gone with no resourceVersion (0):
    replayed after a restart it must forget the bundle's inventory as the live fold does, or a
    namesake created later with the label would be pruned as the bundle's."""
    applied = restore(Entry(KEY), Applied(M1, S1, 10, bundle="b"))
    assert applied.applied_bundle == "b"
    gone = restore(applied, Applied(M1, None, 0, deleted=True, bundle="b"))
    assert (gone.applied_bundle, gone.apply_sha) == ("", None)
