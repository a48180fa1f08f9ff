"""Scenario `planner`: decisions per second and memory per cached object (issue 5, item 5).

100,000 objects are built into the planner's packed cache (``EntryStore``) exactly as a rebuild
does (``restore`` of the desired, applied and server facts), then every object is decided once as
a republish does (unpack, ``step`` with the same Desired: all cache hits, pack back). Run in this
process on one core. Bytes per object are what tracemalloc sees still allocated after the
rebuild, with the facts themselves allocated before tracing started.

Peers are the targets themselves (100,000 decisions/s, issue 18; 300 bytes per cached object);
the ratio column is driftbus / target (≥ 1 is good for decisions/s, ≤ 1 for bytes).
"""

from __future__ import annotations

import gc
import hashlib
import time
import tracemalloc

from bench.report import Result
from schemas.subjects import ObjectKey
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import Applied, Desired, Entry, Observed, restore, step
from services.planner.rule.entry import Slot


def _sha(i: int, salt: bytes) -> bytes:
    return hashlib.sha256(salt + i.to_bytes(8, "big")).digest()


def _facts(n: int) -> list[tuple[Slot, Desired, Applied, Observed]]:
    """What the streams hold for n objects: fresh objects per fact, as decoding gives them."""
    facts = []
    for i in range(n):
        key = ObjectKey(
            "apps" if i % 3 else "",
            "Deployment" if i % 3 else "ConfigMap",
            f"ns-{i % 200}",
            f"obj-{i}",
        )
        m, a = _sha(i, b"m"), _sha(i, b"a")
        facts.append(
            (
                ("c", key),
                Desired("bench", "r1", m),
                Applied(bytes(m), bytes(a), 10 + i, at=1.0),
                Observed(10 + i, bytes(a), owner_bundle="bench"),
            )
        )
    return facts


def _rebuild(facts: list[tuple[Slot, Desired, Applied, Observed]]) -> EntryStore:
    store = EntryStore()
    for (cluster, k), d, a, o in facts:
        # a fresh name string, as decoding a message gives: the store keeps it, so it counts
        key = ObjectKey(k.group, k.kind, k.namespace, k.name.encode().decode())
        store[cluster, key] = restore(restore(restore(Entry(key), d), a), o)
    return store


def run(*, objects: int = 100_000, repetitions: int = 3) -> list[Result]:
    rates: list[float] = []
    per_object: list[float] = []
    for _ in range(repetitions):
        facts = _facts(objects)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        store = _rebuild(facts)
        gc.collect()
        # only the store survives the rebuild: what is held now is the planner's cache
        per_object.append((tracemalloc.get_traced_memory()[0] - before) / objects)
        tracemalloc.stop()
        start = time.perf_counter()
        hits = 0
        for slot, d, _, _ in facts:
            store[slot], decision = step(store[slot], d)
            hits += decision is not None and not decision.writes
        rates.append(objects / (time.perf_counter() - start))
        assert hits == objects, "every republished object should be a cache hit"
        del store, facts
    params = {"objects": objects, "state": "desired+applied+server per object, all hits"}
    return [
        Result(
            name="planner-decisions",
            unit="decisions/s",
            driftbus_samples=rates,
            peer_name="target",
            peer_samples=[100_000.0] * repetitions,
            parameters=params,
            target="ratio ≥ 1",
        ),
        Result(
            name="planner-bytes-per-object",
            unit="bytes",
            driftbus_samples=per_object,
            peer_name="target",
            peer_samples=[300.0] * repetitions,
            parameters=params,
            higher_is_better=False,
            target="ratio ≤ 1",
        ),
    ]
