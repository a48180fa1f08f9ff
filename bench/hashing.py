"""Scenario `hashing`: prune + canonical JSON + SHA-256 throughput of the driftbus SHA core.

Peer: the straightforward implementation — the same owned-field projection (the rule, issue 15),
then ``copy.deepcopy``, prune by mutation,
``json.dumps(sort_keys=True)``, ``hashlib`` — configured to produce the *same canonical bytes*
(compact separators, no ASCII escaping), so the run first checks that both compute identical
digests for every object and only then times them. Repetitions alternate the two so noise from
the shared machine falls on both.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from bench import corpus
from bench.report import Result
from services.core.ignore import pointers_of, without
from services.core.owned import owned_projection
from services.core.sha import object_sha

_KEEP = ("name", "namespace", "labels", "annotations", "deletionTimestamp")


def baseline_sha(obj: dict[str, Any]) -> bytes:
    # the owned-field projection (issue 15) is the rule, not the technique compared: both sides
    # run the same function for it
    projected = owned_projection(obj)
    pruned = copy.deepcopy(dict(without(projected, pointers_of(projected))))
    pruned.pop("status", None)
    meta = pruned.get("metadata", {})
    pruned["metadata"] = {k: meta[k] for k in _KEEP if meta.get(k) not in (None, {}, "")}
    text = json.dumps(pruned, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).digest()


def _rate(fn: Callable[[dict[str, Any]], bytes], objects: list[dict[str, Any]]) -> float:
    start = time.perf_counter()
    for obj in objects:
        fn(obj)
    return len(objects) / (time.perf_counter() - start)


def run(*, objects: int = 10_000, repetitions: int = 5) -> list[Result]:
    objs = corpus.build(objects)
    mismatched = sum(object_sha(o) != baseline_sha(o) for o in objs)
    if mismatched:
        raise SystemExit(
            f"hashing: {mismatched} objects hash differently in the baseline; "
            "the comparison would not be like for like"
        )
    ours: list[float] = []
    peer: list[float] = []
    for _ in range(repetitions):
        ours.append(_rate(object_sha, objs))
        peer.append(_rate(baseline_sha, objs))
    size = sum(len(json.dumps(o)) for o in objs)
    kinds: dict[str, int] = {}
    for o in objs:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    return [
        Result(
            name="hashing",
            unit="objects/s",
            driftbus_samples=ours,
            peer_name="deepcopy+json.dumps+hashlib",
            peer_samples=peer,
            parameters={"objects": objects, "kinds": kinds, "corpus_bytes": size},
            target="ratio ≥ 3",
        )
    ]
