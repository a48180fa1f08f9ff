"""Scenario `planner`: decisions per second and memory per cached object (issue 5, item 5).

100,000 objects are built into planner entries exactly as a rebuild does (``restore`` of the
desired, applied and server facts), then every object is decided once as a republish does
(``step`` with the same Desired: all cache hits). Run in this process on one core.

Peers are the targets themselves (50,000 decisions/s; 300 bytes per cached object); the ratio
column is driftbus / target (≥ 1 is good for decisions/s, ≤ 1 for bytes).
"""

from __future__ import annotations

import gc
import hashlib
import time
import tracemalloc

from bench.report import Result
from schemas.subjects import ObjectKey
from services.planner.decide import Applied, Desired, Entry, Observed, restore, step


def _sha(i: int, salt: bytes) -> bytes:
    return hashlib.sha256(salt + i.to_bytes(8, "big")).digest()


def _build(n: int) -> tuple[dict[tuple[str, ObjectKey], Entry], list[Desired]]:
    entries: dict[tuple[str, ObjectKey], Entry] = {}
    desired: list[Desired] = []
    for i in range(n):
        key = ObjectKey(
            "apps" if i % 3 else "",
            "Deployment" if i % 3 else "ConfigMap",
            f"ns-{i % 200}",
            f"obj-{i}",
        )
        m, a = _sha(i, b"m"), _sha(i, b"a")
        d = Desired("bench", "r1", m)
        e = restore(Entry(key), d)
        e = restore(e, Applied(m, a, 10 + i, at=1.0))
        e = restore(e, Observed(10 + i, a, owner_bundle="bench"))
        entries[("c", key)] = e
        desired.append(d)
    return entries, desired


def run(*, objects: int = 100_000, repetitions: int = 3) -> list[Result]:
    rates: list[float] = []
    per_object: list[float] = []
    for _ in range(repetitions):
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        entries, desired = _build(objects)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        # the Desired facts are the bundle, not the cache: count only what the planner keeps
        per_object.append(held / objects - _desired_bytes(desired) / objects)
        slots = list(entries)
        start = time.perf_counter()
        hits = 0
        for slot, d in zip(slots, desired, strict=True):
            entries[slot], decision = step(entries[slot], d)
            hits += decision is not None and not decision.writes
        rates.append(objects / (time.perf_counter() - start))
        assert hits == objects, "every republished object should be a cache hit"
        del entries, desired, slots
    params = {"objects": objects, "state": "desired+applied+server per object, all hits"}
    return [
        Result(
            name="planner-decisions",
            unit="decisions/s",
            driftbus_samples=rates,
            peer_name="target",
            peer_samples=[50_000.0] * repetitions,
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


def _desired_bytes(desired: list[Desired]) -> int:
    import sys

    # the 32-byte manifest digests are shared with the entries; the Desired shells are not
    return sum(sys.getsizeof(d) for d in desired)
