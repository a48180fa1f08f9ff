"""The packed SHA cache gives back exactly the entries it was given, and reclaims old strings."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import ObjectKey
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import DELETE_INFLIGHT, Entry

KEY = ObjectKey("apps", "Deployment", "ns", "web")


def sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


M, A, S, OTHER = sha("m"), sha("a"), sha("s"), sha("other")

# the digests a field may hold: none, one equal to another field (packed as a flag), its own
digests = st.sampled_from([None, M, A, S, OTHER])
names = st.sampled_from(["", "b", "bundle-2"])
entries = st.builds(
    Entry,
    key=st.just(KEY),
    bundle=names,
    revision=st.sampled_from(["", "r1", "0123456789abcdef0123456789abcdef01234567"]),
    manifest_sha=digests,
    prune=st.booleans(),
    applied_manifest_sha=digests,
    apply_sha=digests,
    applied_rv=st.integers(0, 2**63 - 1),
    server_sha=digests,
    server_deleted=st.booleans(),
    server_rv=st.integers(0, 2**63 - 1),
    owner_bundle=names,
    api_version=st.sampled_from(["", "v1", "apps/v1"]),
    keep=st.booleans(),
    server_retired=st.booleans(),
    correct_drift=st.booleans(),
    inflight=st.sampled_from([None, M, OTHER, DELETE_INFLIGHT]),
    inflight_at=st.floats(0, 2e9),
    failed=digests,
    failed_at=st.floats(0, 2e9),
    applied_at=st.floats(0, 2e9),
)


@given(entries)
def test_round_trip(entry: Entry) -> None:
    store = EntryStore()
    store["c", KEY] = entry
    assert store["c", KEY] == entry
    assert list(store.items()) == [(("c", KEY), entry)]
    # the header-only reading agrees with the entry it was packed from
    progress = store.progress(("c", KEY))
    if entry.manifest_sha is None:
        assert progress is None
    else:
        assert progress == (
            entry.applied_manifest_sha == entry.manifest_sha and entry.inflight is None,
            entry.failing,
            entry.observed,
            entry.inflight is not None,
            entry.drifted,
            entry.server_deleted and entry.server_retired,
        )
    # overdue: exactly the entries with an intent in flight since before the cut
    assert list(store.overdue(1e9)) == (
        [("c", KEY)] if entry.inflight is not None and entry.inflight_at < 1e9 else []
    )


@pytest.mark.parametrize(
    ("label", "entry", "size"),
    [
        ("empty", Entry(KEY), 66),
        ("desired only", Entry(KEY, manifest_sha=M), 66 + 32),
        (
            "steady state: applied = desired, live = applied",
            Entry(KEY, manifest_sha=M, applied_manifest_sha=M, apply_sha=A, server_sha=A),
            66 + 64,
        ),
        (
            "drifted: the live digest differs",
            Entry(KEY, manifest_sha=M, applied_manifest_sha=M, apply_sha=A, server_sha=S),
            66 + 96,
        ),
        ("prune in flight", Entry(KEY, inflight=DELETE_INFLIGHT), 66),
    ],
)
def test_record_sizes(label: str, entry: Entry, size: int) -> None:
    store = EntryStore()
    store["c", KEY] = entry
    (record,) = store._groups["c", "apps", "Deployment", "ns"].values()
    assert len(record) == size, label
    assert store["c", KEY] == entry


def test_mapping_behaviour() -> None:
    store = EntryStore()
    a, b = ObjectKey("", "ConfigMap", "ns", "a"), ObjectKey("", "ConfigMap", "ns", "b")
    store["c1", a] = Entry(a, manifest_sha=M)
    store["c2", a] = Entry(a, manifest_sha=A)
    store["c1", b] = Entry(b)
    store["c1", b] = Entry(b, bundle="x")  # replacing does not count twice
    assert len(store) == 3
    assert ("c1", a) in store
    assert ("c3", a) not in store
    assert store.get(("c3", a)) is None
    with pytest.raises(KeyError):
        store["c3", a]
    assert store["c2", a].manifest_sha == A
    assert sorted(store.slots()) == sorted([("c1", a), ("c2", a), ("c1", b)])
    del store["c1", a]
    assert len(store) == 2
    assert ("c1", a) not in store


def test_old_revisions_are_swept_from_the_string_table() -> None:
    store = EntryStore()
    keys = [ObjectKey("", "ConfigMap", "ns", f"cm-{i}") for i in range(10)]

    for revision in range(3000):  # 3,000 publishes, each a new revision of the same 10 objects
        for k in keys:
            store["c", k] = Entry(k, bundle="b", revision=f"rev-{revision}", manifest_sha=M)
    # 3,000 distinct revisions were interned; the automatic sweeps kept the table bounded
    assert len(store._strings) <= 1025
    assert all(store["c", k].revision == "rev-2999" for k in keys)
    store._sweep()
    assert len(store._strings) == 3  # "", "b", "rev-2999"
    # freed ids are reused and still resolve to the right strings
    store["c", keys[0]] = msgspec.structs.replace(store["c", keys[0]], revision="rev-3000")
    assert store["c", keys[0]].revision == "rev-3000"
    assert store["c", keys[1]].revision == "rev-2999"


def test_an_entry_written_back_unchanged_keeps_its_record_and_a_changed_one_is_packed() -> None:
    """A hit (``step`` returns the very entry it got) is not packed again; anything else is,
    including the same entry written after its record was replaced or deleted."""
    store = EntryStore()
    slot = ("c", KEY)
    store[slot] = Entry(KEY, bundle="b", revision="r1", manifest_sha=sha("m"))
    record = store._record(slot)

    store[slot] = store[slot]  # unchanged: the record object itself stays
    assert store._record(slot) is record

    e = store[slot]
    store[slot] = msgspec.structs.replace(e, revision="r2")  # changed: packed
    assert store._record(slot) is not record
    assert store[slot].revision == "r2"

    stale = store[slot]
    store[slot] = msgspec.structs.replace(stale, inflight=sha("m"))
    store[slot] = stale  # the record was replaced since ``stale`` was read: written again
    assert store[slot] == stale

    gone = store[slot]
    del store[slot]
    store[slot] = gone  # deleted since it was read: stored again, and counted
    assert store[slot] == gone
    assert len(store) == 1


_OBJECTS = [ObjectKey("", "ConfigMap", ns, n) for ns in ("a", "b") for n in ("x", "y", "z")]
_WRITES = st.lists(
    st.tuples(st.sampled_from(_OBJECTS), st.one_of(st.none(), entries), st.floats(0, 3e9)),
    max_size=40,
)


@given(_WRITES)
def test_the_inflight_index_follows_every_write(
    writes: list[tuple[ObjectKey, Entry | None, float]],
) -> None:
    """Whatever is written, deleted or kept in flight, the index says what a scan of every
    record says: which objects are in flight, since when, and how many."""
    store = EntryStore()
    for key, entry, at in writes:
        slot = ("c", key)
        if entry is None:
            if slot in store:
                del store[slot]
            continue
        store[slot] = msgspec.structs.replace(entry, key=key)
        before = store[slot]
        kept = store.still_inflight(slot, at)
        assert kept == (before.inflight is not None)
        after = store[slot]
        # only inflight_at moves, and only forward, as ``decide``'s Working does
        assert after == msgspec.structs.replace(
            before, inflight_at=max(before.inflight_at, at) if kept else before.inflight_at
        )
    scanned = {slot: e.inflight_at for slot, e in store.items() if e.inflight is not None}
    assert store.inflight == len(scanned)
    for cut in (0.0, 1e9, 4e9):
        assert sorted(store.overdue(cut)) == sorted(s for s, at in scanned.items() if at < cut)


def test_a_frozen_cluster_reads_as_it_was_while_the_store_changes_on() -> None:
    """A checkpoint taken in steps reads the records as they were when it began: later writes,
    deletions and a sweep that hands the old revision's string id to a new one change nothing
    of it, and other clusters are not in it."""
    store = EntryStore()
    keys = [ObjectKey("", "ConfigMap", "ns", f"cm-{i}") for i in range(3)]
    for k in keys:
        store["c", k] = Entry(k, bundle="b", revision="r-old", manifest_sha=M)
    store["other", keys[0]] = Entry(keys[0], bundle="b", revision="r-old")
    before = {k: store["c", k] for k in keys}
    frozen = store.frozen("c")
    del store["c", keys[0]], store["other", keys[0]]
    store["c", keys[2]] = msgspec.structs.replace(
        before[keys[2]], revision="r-new", inflight=M, inflight_at=5.0
    )
    for i in range(2000):  # "r-old" is used by no record now: a sweep gives its id to another
        store["c", keys[1]] = Entry(keys[1], bundle="b", revision=f"r-{i}", manifest_sha=A)
    assert len(frozen) == 3
    assert dict(frozen.items()) == before


@given(st.lists(st.tuples(st.sampled_from(_OBJECTS), entries), max_size=20))
def test_labelled_and_applied_live_are_what_a_prune_and_its_budget_read(
    writes: list[tuple[ObjectKey, Entry]],
) -> None:
    """The header's prune candidates of a bundle are exactly the live objects carrying its label
    that no manifest desires: every object ``prune.strays_from`` may take is among them."""
    store = EntryStore()
    for key, entry in writes:
        store["c", key] = msgspec.structs.replace(entry, key=key)
        store["other", key] = msgspec.structs.replace(entry, key=key)
    for bundle in ("", "b", "bundle-2", "never-seen"):
        expected = {
            slot
            for slot, e in store.items(cluster="c")
            if bundle and e.owner_bundle == bundle and e.live and e.manifest_sha is None
        }
        assert set(store.labelled("c", bundle)) == expected
        applied = {
            slot
            for slot, e in store.items(cluster="c")
            if bundle and e.applied_bundle == bundle and e.live
        }
        assert set(store.applied_live("c", bundle)) == applied
