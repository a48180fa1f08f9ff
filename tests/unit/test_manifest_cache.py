"""Stored manifests read once per replica (issue 43, "fleet revisions checked once"): the pure
byte-bounded LRU (``memory.manifests.Kept``) and the shell's cache in front of the Object Store
(``shell.manifests.ManifestCache``): one read for many asks, failures never kept, each bundle
told of its own errors, and each cluster still checking the revision itself."""

from __future__ import annotations

import asyncio
import hashlib
import types
from typing import Any

import orjson
import pytest

from schemas.codec import encode
from schemas.messages import Bundle, BundleOptions, ObjectStoreRef
from services.common import bus
from services.common.bus import OBJECT_STORE_BUCKET
from services.planner.memory.cluster import ClusterState
from services.planner.memory.manifests import Kept
from services.planner.shell.intake import BundleIntake
from services.planner.shell.manifests import ELEMENT_BYTES, KEPT_BYTES, ManifestCache
from services.planner.shell.status_board import StatusBoard
from services.revisions.publish import (
    BundleError,
    StoredError,
    StoredManifests,
    load_manifests,
    stored_manifests,
)

# --- the pure core: values by key within a byte budget, least recently used dropped first --

Op = tuple[str, str, int]  # ("keep", key, cost) or ("get", key, 0)


@pytest.mark.parametrize(
    ("budget", "ops", "kept", "held", "dropped"),
    [
        (10, [("keep", "a", 4), ("keep", "b", 4)], ["a", "b"], 8, []),
        (10, [("keep", "a", 4), ("keep", "b", 4), ("keep", "c", 4)], ["b", "c"], 8, ["a"]),
        # a get makes a key the most recently used: the other one goes
        (
            10,
            [("keep", "a", 4), ("keep", "b", 4), ("get", "a", 0), ("keep", "c", 4)],
            ["a", "c"],
            8,
            ["b"],
        ),
        # as many dropped as it takes, oldest first
        (10, [("keep", "a", 3), ("keep", "b", 3), ("keep", "c", 9)], ["c"], 9, ["a", "b"]),
        # exactly the budget fits
        (10, [("keep", "a", 10)], ["a"], 10, []),
        # over the whole budget: not kept, and nothing dropped for it
        (10, [("keep", "a", 4), ("keep", "big", 11)], ["a"], 4, []),
        # kept again: replaced, its old cost given back first
        (10, [("keep", "a", 4), ("keep", "b", 4), ("keep", "a", 6)], ["b", "a"], 10, []),
        # a budget of 0 keeps nothing (an intake's own cache) but what costs nothing
        (0, [("keep", "a", 1), ("keep", "b", 1)], [], 0, []),
        # a miss changes nothing
        (10, [("keep", "a", 4), ("get", "z", 0)], ["a"], 4, []),
    ],
    ids=[
        "within",
        "lru-dropped",
        "get-refreshes",
        "several-dropped",
        "exact-fit",
        "too-big-not-kept",
        "replaced",
        "zero-budget",
        "miss",
    ],
)
def test_kept_within_its_budget(
    budget: int, ops: list[Op], kept: list[str], held: int, dropped: list[str]
) -> None:
    lru: Kept[str, str] = Kept(budget)
    all_dropped: list[str] = []
    for op, key, c in ops:
        if op == "keep":
            all_dropped += lru.keep(key, key.upper(), c)
        else:
            assert lru.get(key) == (key.upper() if key in lru else None)
    assert lru.keys() == kept
    assert lru.held == held
    assert all_dropped == dropped
    assert len(lru) == len(kept)


@pytest.mark.parametrize(
    ("largest", "cost", "fits"),
    [(4, 4, True), (4, 5, False), (None, 10, True), (None, 11, False), (20, 11, False)],
    ids=["at-largest", "over-largest", "whole-budget", "over-budget", "largest-capped-by-budget"],
)
def test_kept_keeps_no_value_over_its_largest(largest: int | None, cost: int, fits: bool) -> None:
    lru: Kept[str, str] = Kept(10, largest=largest)
    assert lru.fits(cost) is fits
    lru.keep("v", "V", cost)
    assert lru.keys() == (["v"] if fits else [])


def test_kept_refuses_negative_bytes() -> None:
    with pytest.raises(ValueError, match="a budget of -1 bytes"):
        Kept(-1)
    lru: Kept[str, str] = Kept(10)
    with pytest.raises(ValueError, match="a cost of -1 bytes"):
        lru.keep("a", "A", -1)


def test_kept_drop() -> None:
    lru: Kept[str, str] = Kept(10)
    lru.keep("a", "A", 4)
    lru.drop("a")
    lru.drop("never")
    assert (lru.keys(), lru.held) == ([], 0)


# --- the shell's cache: one read per reference ----------------------------------------------

MANIFESTS = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm{i}"}, "data": {"k": "v"}}
    for i in range(3)
]
DATA = orjson.dumps(MANIFESTS)


def _ref(data: bytes = DATA, *, count: int = 3, name: str = "") -> ObjectStoreRef:
    sha = hashlib.sha256(data).hexdigest()
    return ObjectStoreRef(
        bucket=OBJECT_STORE_BUCKET,
        name=name or f"fleet/web/{sha}",
        sha=sha,
        size=len(data),
        count=count,
    )


REF = _ref()


def _bundle(cluster: str, ref: ObjectStoreRef | None = REF, **kw: Any) -> Bundle:
    return Bundle(
        cluster=cluster,
        bundle="web",
        revision="r1",
        options=BundleOptions(namespace="apps"),
        manifests_ref=ref,
        fleet=True,
        **kw,
    )


class Store:
    """A fake Object Store: what each read returns or raises, and how many reads were made."""

    def __init__(self, *fails: BaseException) -> None:
        self.reads = 0
        self.fails = list(fails)
        self.gate = asyncio.Event()
        self.gate.set()

    async def read(self, js: bus.JetStream, ref: ObjectStoreRef) -> StoredManifests:
        self.reads += 1
        await asyncio.sleep(0)  # every concurrent asker arrives while the read is under way
        await self.gate.wait()
        if self.fails:
            raise self.fails.pop(0)
        return stored_manifests(DATA, "stored")


JS: Any = None  # the fake store's reads never touch it


async def test_a_thousand_concurrent_asks_for_one_revision_read_it_once() -> None:
    store = Store()
    cache = ManifestCache(read=store.read)
    loaded = await asyncio.gather(*(cache.load(JS, _bundle(f"c{i}")) for i in range(1000)))
    assert store.reads == 1
    assert (cache.counts.reads, cache.counts.hits, cache.counts.shared) == (1, 999, 999)
    assert all(list(m) == MANIFESTS for m in loaded)
    assert (len(cache), cache.held) == (1, len(DATA) + 3 * ELEMENT_BYTES)


async def test_a_thousand_asks_one_after_another_read_it_once() -> None:
    store = Store()
    cache = ManifestCache(read=store.read)
    for i in range(1000):
        assert list(await cache.load(JS, _bundle(f"c{i}"))) == MANIFESTS
    assert store.reads == 1
    assert (cache.counts.reads, cache.counts.hits, cache.counts.shared) == (1, 999, 0)


async def test_each_asker_gets_fresh_objects() -> None:
    """Shared bytes, never shared dicts: one cluster normalising its copy changes no other's."""
    cache = ManifestCache(read=Store().read)
    first = list(await cache.load(JS, _bundle("c1")))
    first[0]["metadata"]["namespace"] = "changed"
    assert list(await cache.load(JS, _bundle("c2"))) == MANIFESTS


async def test_another_reference_is_another_read() -> None:
    """Keyed by the whole reference: another SHA, or the same bytes under a name that may not
    exist, is read (and refused, if it must be) as without the cache."""
    store = Store()
    cache = ManifestCache(read=store.read)
    await cache.load(JS, _bundle("c1"))
    await cache.load(JS, _bundle("c1", _ref(name="fleet/other/x")))
    await cache.load(JS, _bundle("c1", _ref(DATA + b" ")))
    assert store.reads == 3


async def test_inline_manifests_are_not_read_nor_kept() -> None:
    store = Store()
    cache = ManifestCache(read=store.read)
    inline = _bundle("c1", None, manifests=MANIFESTS)
    assert list(await cache.load(JS, inline)) == MANIFESTS
    assert (store.reads, len(cache), cache.counts.hits) == (0, 0, 0)


async def test_the_least_recently_used_revision_is_read_again() -> None:
    store = Store()
    refs = [_ref(DATA + b" " * i) for i in range(5)]
    largest = len(DATA) + 4 + 3 * ELEMENT_BYTES
    cache = ManifestCache(4 * largest, read=store.read)  # room for four
    for ref in refs:
        await cache.load(JS, _bundle("c1", ref))  # the fifth drops the first
    await cache.load(JS, _bundle("c1", refs[4]))
    await cache.load(JS, _bundle("c1", refs[0]))
    assert store.reads == 6


async def test_a_revision_over_a_quarter_of_the_budget_is_read_per_ask_not_kept() -> None:
    """One cluster's big revision would hold its bytes for clusters that may never come."""
    store = Store()
    cost = len(DATA) + 3 * ELEMENT_BYTES
    cache = ManifestCache(4 * cost - 1, read=store.read)
    await cache.load(JS, _bundle("c1"))
    await cache.load(JS, _bundle("c2"))
    assert (store.reads, len(cache), cache.held) == (2, 0, 0)
    cache = ManifestCache(4 * cost, read=store.read)
    await cache.load(JS, _bundle("c1"))
    await cache.load(JS, _bundle("c2"))
    assert (store.reads, len(cache), cache.held) == (3, 1, cost)


async def test_a_revision_costs_its_elements_as_read_not_as_declared() -> None:
    """A reference's count is the publisher's word: a revision claiming none costs them all."""
    cache = ManifestCache(read=Store().read)
    await cache.load(JS, _bundle("c1", _ref(count=0)))
    assert cache.held == len(DATA) + 3 * ELEMENT_BYTES


async def test_a_revision_over_the_budget_is_shared_while_read_never_kept() -> None:
    store = Store()
    cache = ManifestCache(0, read=store.read)  # what an intake given no cache makes
    await asyncio.gather(*(cache.load(JS, _bundle(f"c{i}")) for i in range(10)))
    assert store.reads == 1
    await cache.load(JS, _bundle("c1"))
    assert (store.reads, len(cache), cache.held) == (2, 0, 0)


@pytest.mark.parametrize(
    "failure",
    [StoredError("object store reference x/y does not exist"), TimeoutError("nats: timeout")],
    ids=["the-object's", "nats's"],
)
async def test_a_failed_read_is_kept_by_nobody(failure: Exception) -> None:
    """Everyone waiting on the read is told, each of its own bundle; the next ask reads again."""
    store = Store(failure)
    cache = ManifestCache(read=store.read)
    got = await asyncio.gather(
        *(cache.load(JS, _bundle(f"c{i}")) for i in range(3)), return_exceptions=True
    )
    assert store.reads == 1
    assert cache.counts.failed == 1
    if isinstance(failure, StoredError):
        assert [str(e) for e in got] == [
            f"bundle c{i}/web@r1: object store reference x/y does not exist" for i in range(3)
        ]
        assert all(type(e) is BundleError for e in got)
    else:
        assert all(e is failure for e in got)
    assert len(cache) == 0
    assert list(await cache.load(JS, _bundle("c9"))) == MANIFESTS
    assert (store.reads, cache.counts.reads) == (2, 2)


async def test_a_bad_element_names_the_bundle_that_read_it() -> None:
    data = b'[{"kind": "ConfigMap"}, "\xff"]'  # an array, but not UTF-8 (orjson's check)
    ref = _ref(data, count=2)

    async def read(js: bus.JetStream, r: ObjectStoreRef) -> StoredManifests:
        return stored_manifests(data, "stored")

    cache = ManifestCache(read=read)
    for cluster in ("c1", "c2"):
        manifests = await cache.load(JS, _bundle(cluster, ref))
        with pytest.raises(BundleError, match=f"^bundle {cluster}/web@r1: a stored manifest"):
            list(manifests)


async def test_an_asker_cancelled_does_not_cancel_the_read() -> None:
    store = Store()
    store.gate.clear()
    cache = ManifestCache(read=store.read)
    first = asyncio.create_task(cache.load(JS, _bundle("c1")))
    second = asyncio.create_task(cache.load(JS, _bundle("c2")))
    await asyncio.sleep(0.01)
    first.cancel()
    store.gate.set()
    assert list(await second) == MANIFESTS
    assert first.cancelled()
    assert store.reads == 1


async def test_load_manifests_refuses_a_reference_outside_the_bucket_naming_the_bundle() -> None:
    """The read without a cache (``read_stored``) says what it said before the cache."""
    ref = ObjectStoreRef(bucket="elsewhere", name="x", sha="0" * 64, size=1, count=1)
    with pytest.raises(BundleError) as err:
        await load_manifests(JS, _bundle("c1", ref))
    assert str(err.value) == (
        "bundle c1/web@r1: object store reference elsewhere/x is outside the "
        f"{OBJECT_STORE_BUCKET} bucket, the only one bundles are read from"
    )


def test_the_budget_holds_many_fleet_revisions() -> None:
    """A revision of 100 objects of ~500 bytes: the budget keeps well over a hundred."""
    assert KEPT_BYTES // (100 * 500 + 100 * ELEMENT_BYTES) > 1000


# --- wired into the intake: one read for many clusters, each checking its own ---------------


class Publisher:
    async def publish(self, subject: str, data: bytes, **kw: Any) -> None:
        raise AssertionError(f"nothing is published here: {subject}")


def _intake(cluster: str, cache: ManifestCache | None) -> BundleIntake:
    state = ClusterState(cluster)
    pub: Any = Publisher()

    async def nothing(*args: Any) -> None:
        return None

    return BundleIntake(
        state=state,
        js=JS,
        publisher=pub,
        board=StatusBoard(state=state, publisher=pub),
        queue=asyncio.Queue(),
        fold=nothing,
        prune=nothing,
        manifests=cache,
    )


def _message(bundle: Bundle) -> Any:
    return types.SimpleNamespace(
        subject=f"driftbus.bundle.{bundle.cluster}.{bundle.bundle}",
        data=encode(bundle),
        metadata=types.SimpleNamespace(sequence=types.SimpleNamespace(stream=1)),
    )


async def test_intakes_sharing_a_cache_read_once_and_check_each_for_its_cluster() -> None:
    store = Store()
    cache = ManifestCache(read=store.read)
    clusters = [f"c{i}" for i in range(50)]
    checked = await asyncio.gather(
        *(_intake(c, cache)._checked(_message(_bundle(c)), (c, "web")) for c in clusters)
    )
    assert store.reads == 1
    for c, result in zip(clusters, checked, strict=True):
        assert result is not None
        _, desired, _ = result
        assert [slot[0] for slot, _, _ in desired] == [c] * 3
        assert [slot[1].namespace for slot, _, _ in desired] == ["apps"] * 3


async def test_intakes_sharing_a_cache_check_a_fleet_revision_once() -> None:
    """Issue 43, "fleet revisions checked once": 50 clusters taking one revision at once wait
    on one read and one check; each gets what checking it alone gives it."""
    cache = ManifestCache(read=Store().read)
    clusters = [f"c{i:02}" for i in range(50)]
    shared = await asyncio.gather(
        *(_intake(c, cache)._checked(_message(_bundle(c)), (c, "web")) for c in clusters)
    )
    assert (cache.checked.counts.kept, cache.checked.counts.hits) == (1, 49)
    for c, got in zip(clusters, shared, strict=True):
        alone = await _intake(c, ManifestCache(read=Store().read))._checked(
            _message(_bundle(c)), (c, "web")
        )
        assert got is not None
        assert alone is not None
        assert got[1] == alone[1]  # slots, manifests, SHAs
        assert (got[2].stages, got[2].hooks) == (alone[2].stages, alone[2].hooks)


async def test_an_intake_given_no_cache_keeps_nothing() -> None:
    intake = _intake("c1", None)
    assert intake.manifests.held == 0
    assert intake.manifests.budget == 0
    assert len(intake.manifests.checked) == 0


async def test_a_cache_keeping_no_revisions_keeps_no_checks() -> None:
    cache = ManifestCache(0, read=Store().read)
    for c in ("c1", "c2"):
        assert await _intake(c, cache)._checked(_message(_bundle(c)), (c, "web")) is not None
    assert (len(cache.checked), cache.checked.counts.hits) == (0, 0)
