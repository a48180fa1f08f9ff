"""The ledger's tally, kept current from what changed, equals the tally counted from scratch after
any sequence of changes (services/planner/status/ledger.py)."""

from __future__ import annotations

import hashlib
import random

import pytest

from schemas.messages import Bundle, BundlePhase, Health, ObjectPhase, OutcomeEvent
from schemas.subjects import ObjectKey
from services.planner.memory.cluster import ClusterState
from services.planner.memory.object_details import Details
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import DELETE_INFLIGHT, Entry
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.planner.status import ledger as ledger_module
from services.planner.status.ledger import Ledger
from services.planner.status.report import bundle_status
from services.planner.status.tally import Known, tally

C = "c"
BUNDLES = ["a", "b", "c"]
SHAS = [hashlib.sha256(s).digest() for s in (b"m", b"n", b"x")]
KEYS = [
    ObjectKey(g, k, ns, f"o{i}")
    for i in range(12)
    for g, k, ns in [("", "ConfigMap", "ns"), ("apps", "Deployment", "ns"), ("", "Namespace", "")]
]


def sha(rng: random.Random) -> bytes | None:
    return rng.choice([None, *SHAS])


def random_entry(rng: random.Random, key: ObjectKey) -> Entry:
    """Any combination of what the progress of an object reads (not only reachable ones)."""
    manifest = sha(rng)
    return Entry(
        key,
        bundle=rng.choice(["", *BUNDLES]),
        revision=rng.choice(["r1", "r2"]),
        manifest_sha=manifest,
        prune=rng.random() < 0.8,
        correct_drift=rng.random() < 0.8,
        applied_manifest_sha=rng.choice([manifest, manifest, sha(rng)]),
        apply_sha=sha(rng),
        applied_rv=rng.randrange(4),
        server_sha=sha(rng),
        server_deleted=rng.random() < 0.2,
        server_rv=rng.randrange(4),
        owner_bundle=rng.choice(["", "", *BUNDLES]),
        applied_bundle=rng.choice(["", *BUNDLES, *BUNDLES]),
        keep=rng.random() < 0.2,
        server_retired=rng.random() < 0.1,
        inflight=rng.choice([None, None, manifest, DELETE_INFLIGHT, sha(rng)]),
        inflight_at=rng.random(),
        failed=rng.choice([None, manifest, DELETE_INFLIGHT, sha(rng)]),
        failed_at=rng.randrange(3),
        applied_at=rng.randrange(3),
    )


def outcome(rng: random.Random, key: ObjectKey) -> OutcomeEvent:
    return OutcomeEvent(
        cluster=C,
        key=key,
        bundle="a",
        revision="r1",
        manifest_sha=SHAS[0],
        phase=rng.choice(list(ObjectPhase)),
        message=rng.choice(["", "because"]),
    )


def random_view(rng: random.Random, name: str) -> BundleView:
    v = BundleView.of(Bundle(cluster=C, bundle=name, revision=f"r{rng.randrange(3)}"), 1)
    v.keys.update(rng.sample(KEYS, rng.randrange(len(KEYS) // 2)))
    v.prune = rng.random() < 0.8
    v.deleting = rng.random() < 0.15
    if rng.random() < 0.2:
        v.errors.append("x: already declared by bundle b")
    return v


def change(rng: random.Random, entries: EntryStore, details: Details, views: dict) -> None:
    """One change of the kind the planner makes: an entry written or dropped, a health or an
    applier's word set or dropped, a revision replaced, a key taken over by another bundle."""
    r = rng.random()
    if r < 0.85:
        object_change(rng, entries, details)
    elif r < 0.92:
        name = rng.choice(BUNDLES)
        views[C, name] = random_view(rng, name)
    else:
        view = rng.choice(list(views.values()))
        view.keys.discard(rng.choice(KEYS))  # taken over by another bundle


def object_change(rng: random.Random, entries: EntryStore, details: Details) -> None:
    """A change of one object only: its entry, its health, the applier's word."""
    key = rng.choice(KEYS)
    slot: Slot = (C, key)
    r = rng.random()
    if r < 0.53:
        entries[slot] = random_entry(rng, key)
    elif r < 0.59 and slot in entries:
        del entries[slot]
    elif r < 0.73:
        details.set_health(slot, rng.choice(list(Health)), rng.choice(["", "why"]))
    elif r < 0.8:
        details.drop_health(slot)
    elif r < 0.94:
        details.set_outcome(slot, outcome(rng, key))
    else:
        details.drop_outcome(slot)


@pytest.mark.parametrize("seed", range(40))
def test_the_ledger_counts_what_a_count_from_scratch_counts(seed: int) -> None:
    rng = random.Random(seed)
    entries, details = EntryStore(), Details()
    views = {(C, name): random_view(rng, name) for name in BUNDLES}
    ledger = Ledger()
    synced = rng.random() < 0.7
    known = Known(
        entries, details, [], synced, lambda slot, view: "in use" if slot[1].name < "o4" else ""
    )
    for _ in range(60):
        for _ in range(rng.randrange(1, 12)):
            change(rng, entries, details, views)
        for view in rng.sample(list(views.values()), rng.randrange(1, len(views) + 1)):
            assert ledger.tally(view, known, views) == tally(view, known), view.name


def test_a_replaced_store_is_counted_anew() -> None:
    key = KEYS[0]
    view = BundleView.of(Bundle(cluster=C, bundle="a", revision="r1"), 1)
    view.keys.add(key)
    views = {(C, "a"): view}
    ready = Entry(
        key,
        bundle="a",
        manifest_sha=SHAS[0],
        applied_manifest_sha=SHAS[0],
        apply_sha=SHAS[1],
        applied_rv=1,
        server_sha=SHAS[1],
        server_rv=1,
    )
    st = ClusterState(C, watcher_synced=True)
    ledger = Ledger()  # follows st across calls, as the status board's does
    st.bundles = views
    st.entries[C, key] = ready
    st.details.set_health((C, key), Health.READY, "")
    assert bundle_status(st, view, ledger).phase is BundlePhase.READY
    st.entries = EntryStore()  # e.g. a take-over of the cluster rebuilt from the streams
    assert bundle_status(st, view, ledger).counts.applied == 0


@pytest.mark.parametrize("seed", range(20))
def test_a_ledger_caught_up_in_steps_counts_what_a_count_from_scratch_counts(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status board catches the ledger up in steps (``preparing``), and objects change
    between the steps (another task folds, the hub marks): the tally after them is still the
    count from scratch."""
    monkeypatch.setattr(ledger_module, "STEP", 1)
    rng = random.Random(seed)
    entries, details = EntryStore(), Details()
    views = {(C, name): random_view(rng, name) for name in BUNDLES}
    ledger = Ledger()
    known = Known(entries, details, [], True, lambda slot, view: "")
    for _ in range(40):
        for _ in range(rng.randrange(1, 12)):
            change(rng, entries, details, views)
        view = rng.choice(list(views.values()))
        for _ in ledger.preparing(view, known, views):
            if rng.random() < 0.5:  # objects change between two steps, the views do not
                object_change(rng, entries, details)
        assert ledger.tally(view, known, views) == tally(view, known), view.name
