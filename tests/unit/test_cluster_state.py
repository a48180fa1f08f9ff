"""The questions the planner's parts ask of one cluster's state (planner/memory/cluster.py)."""

from __future__ import annotations

import collections
import hashlib

import pytest

from schemas.messages import Bundle, BundlePhase, Health
from schemas.subjects import ObjectKey
from services.planner.memory.cluster import ClusterState, cache_stats
from services.planner.rule.decide import Entry
from services.planner.rule.revision import BundleView
from services.planner.status.ledger import Ledger
from services.planner.status.report import bundle_status

KEY = ObjectKey("", "ConfigMap", "ns", "a")
M = hashlib.sha256(b"m").digest()
A = hashlib.sha256(b"a").digest()


@pytest.mark.parametrize(
    ("counters", "expected"),
    [
        pytest.param(
            {},
            {"hits": 0, "misses": {}, "hit_ratio": None, "objects": 3, "bad_messages": 0},
            id="nothing-decided-has-no-ratio",
        ),
        pytest.param(
            {"hit:hit": 3, "apply:new": 1, "keep:not-owned": 5, "bundles_refused": 2},
            {"hits": 3, "misses": {"new": 1}, "hit_ratio": 0.75, "objects": 3, "bad_messages": 0},
            id="only-applies-and-deletes-are-misses",
        ),
        pytest.param(
            {"hit:hit": 1, "apply:drift": 1, "delete:pruned": 1, "bad_messages": 4},
            {
                "hits": 1,
                "misses": {"drift": 1, "pruned": 1},
                "hit_ratio": 0.3333,
                "objects": 3,
                "bad_messages": 4,
            },
            id="misses-by-reason",
        ),
    ],
)
def test_cache_stats(counters: dict[str, int], expected: dict[str, object]) -> None:
    assert cache_stats(collections.Counter(counters), 3) == expected


@pytest.mark.parametrize(
    ("live", "synced", "expected"),
    [(False, False, False), (False, True, False), (True, False, False), (True, True, True)],
)
def test_prune_only_live_from_a_complete_view(live: bool, synced: bool, expected: bool) -> None:
    st = ClusterState("c", live=live, watcher_synced=synced)
    assert st.may_prune() is expected


def view(name: str) -> BundleView:
    v = BundleView.of(Bundle(cluster="c", bundle=name, revision="r1"), 1)
    v.keys.add(KEY)
    return v


def test_view_of_prefers_the_declaring_bundle_over_the_label() -> None:
    st = ClusterState("c")
    st.bundles = {("c", "a"): view("a"), ("c", "b"): view("b")}
    slot = ("c", KEY)
    assert st.view_of(slot, Entry(KEY, bundle="a", owner_bundle="b")) is st.bundles["c", "a"]
    assert st.view_of(slot, Entry(KEY, owner_bundle="b")) is st.bundles["c", "b"]
    assert st.view_of(slot, Entry(KEY, owner_bundle="gone")) is None
    # a prune cancelling an apply still on its way: the object is in no bundle and carries no
    # label yet; the delete is the bundle's it left (and is made with that bundle's identity)
    assert st.view_of(slot, Entry(KEY), removed_from="b") is st.bundles["c", "b"]
    assert st.view_of(slot, Entry(KEY, owner_bundle="a"), removed_from="b") is st.bundles["c", "a"]


def test_bundle_status_reads_health_from_the_details() -> None:
    st = ClusterState("c", watcher_synced=True)
    ledger = Ledger()  # follows st across calls, as the status board's does
    v = view("a")
    st.bundles[("c", "a")] = v
    slot = ("c", KEY)
    st.entries[slot] = Entry(
        KEY,
        bundle="a",
        revision="r1",
        manifest_sha=M,
        applied_manifest_sha=M,
        apply_sha=A,
        applied_rv=5,
        server_sha=A,
        server_rv=5,
        owner_bundle="a",
    )
    status = bundle_status(st, v, ledger)
    assert status.phase is BundlePhase.RECONCILING  # applied, health not seen yet
    assert status.failed_objects == ["ConfigMap/ns/a: not ready (Unknown)"]
    st.details.set_health(slot, Health.IN_PROGRESS, "Available: 0/1 replicas")
    status = bundle_status(st, v, ledger)
    assert status.phase is BundlePhase.RECONCILING
    # what a Reconciling bundle waits for is named, with the health's own reason
    assert status.failed_objects == [
        "ConfigMap/ns/a: not ready (InProgress): Available: 0/1 replicas"
    ]
    st.details.set_health(slot, Health.READY, "")
    assert bundle_status(st, v, ledger).phase is BundlePhase.READY
    assert bundle_status(st, v, ledger).failed_objects == []
    st.details.set_health(slot, Health.FAILED, "CrashLoopBackOff")
    status = bundle_status(st, v, ledger)
    assert status.phase is BundlePhase.DEGRADED
    assert status.failed_objects == ["ConfigMap/ns/a: unhealthy: CrashLoopBackOff"]


def deletion(name: str) -> BundleView:
    return BundleView.of(Bundle(cluster="c", bundle=name, revision="del", delete=True), 2)


@pytest.mark.parametrize(
    ("entry", "synced", "phase", "says"),
    [
        pytest.param(None, False, BundlePhase.RECONCILING, "initial lists", id="not-synced"),
        pytest.param(None, True, BundlePhase.DELETED, "objects are pruned", id="nothing-left"),
        pytest.param(
            Entry(KEY, revision="del", inflight=M), True, BundlePhase.RECONCILING, "on its way",
            id="an-apply-still-on-its-way",
        ),
        pytest.param(
            Entry(KEY, revision="del", apply_sha=A, applied_rv=5),
            True,
            BundlePhase.RECONCILING,
            "not seen yet",
            id="applied-never-seen-by-the-watcher",
        ),
        pytest.param(
            Entry(KEY, revision="del", apply_sha=A, applied_rv=5, server_sha=A, server_rv=6,
                  server_deleted=True),
            True,
            BundlePhase.DELETED,
            "objects are pruned",
            id="seen-deleted",
        ),
        pytest.param(
            Entry(KEY, revision="r7", inflight=M, bundle="other"), True, BundlePhase.DELETED, "",
            id="another-bundles-work-does-not-count",
        ),
    ],
)  # fmt: skip
def test_a_deletion_is_deleted_only_when_nothing_of_it_is_pending_or_unseen(
    entry: Entry | None, synced: bool, phase: BundlePhase, says: str
) -> None:
    st = ClusterState("c", live=True, watcher_synced=synced)
    ledger = Ledger()  # follows st across calls, as the status board's does
    v = deletion("gone")
    st.bundles[("c", "gone")] = v
    if entry is not None:
        st.entries[("c", entry.key)] = entry
    status = bundle_status(st, v, ledger)
    assert status.phase is phase, status
    assert says in status.message + " ".join(status.failed_objects)


def test_a_deletion_counts_each_prune_once() -> None:
    """A live object of the bundle whose delete is on its way is one prune, not two (the
    deletion's pending work and the prune candidates are the same object)."""
    from services.planner.rule.decide import DELETE_INFLIGHT

    st = ClusterState("c", live=True, watcher_synced=True)

    ledger = Ledger()  # follows st across calls, as the status board's does
    v = deletion("gone")
    st.bundles[("c", "gone")] = v
    st.entries[("c", KEY)] = Entry(
        KEY,
        revision="del",
        inflight=DELETE_INFLIGHT,
        apply_sha=A,
        applied_rv=5,
        server_sha=A,
        server_rv=5,
        owner_bundle="gone",
        applied_bundle="gone",
    )
    status = bundle_status(st, v, ledger)
    assert (status.phase, status.counts.pruning) == (BundlePhase.RECONCILING, 1), status
