"""A cluster's checkpoint (``rule.checkpoint``): written in parts, put back together only
when whole, and — the property ``driftbus plan`` rests on — the entry read back with the later
facts folded in is the entry a rebuild from all the facts gives."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import msgspec
import pytest

from schemas.checkpoint import CHECKPOINT_VERSION, CheckpointError, decode_part, encode_part
from schemas.messages import AppliedEvent, Health, ObjectPhase, OutcomeEvent, ServerEvent
from schemas.subjects import ObjectKey
from services.planner.rule import checkpoint, facts
from services.planner.rule.decide import Desired, restore, step
from services.planner.rule.entry import Entry

NOW = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def key(i: int) -> ObjectKey:
    return ObjectKey("", "ConfigMap", "ns", f"cm-{i}")


def entry(i: int) -> Entry:
    return Entry(
        key(i),
        bundle="desired-only",  # not the facts': not kept
        applied_manifest_sha=random.Random(i).randbytes(32),
        apply_sha=bytes([i % 251]) * 32,
        applied_rv=i + 1,
        applied_bundle="b",
        applied_revision="r1",
        server_sha=bytes([i % 251]) * 32,
        server_rv=i + 1,
        owner_bundle="b",
        api_version="v1",
        inflight=b"\2" * 32,  # the planner's bookkeeping: not kept
    )


def decoded(found: list[tuple[str, bytes]]) -> list[checkpoint.CheckpointPart]:
    return [decode_part(data) for _, data in found]


def test_a_checkpoint_round_trips_the_facts_part_of_each_entry() -> None:
    entries = [(key(i), entry(i)) for i in range(50)]
    entries.append((key(99), Entry(key(99), bundle="b", manifest_sha=b"\1" * 32)))  # no fact
    found = checkpoint.parts("c1", entries, {"server": 7, "applied": 5}, now=NOW)
    assert [s for s, _ in found] == ["driftbus.checkpoint.c1.0"]
    good, unusable = checkpoint.assemble(decoded(found))
    assert not unusable
    cp = good["c1"]
    assert cp.read_up_to == {"applied": 5, "server": 7, "outcome": 0}
    assert key(99) not in cp.entries  # nothing the facts said: a reader's default
    for k, e in entries[:50]:
        back = cp.entries[k]
        assert back == msgspec.structs.replace(e, bundle="", inflight=None)


def test_a_big_checkpoint_is_split_and_its_first_part_goes_last() -> None:
    entries = [(key(i), entry(i)) for i in range(3000)]
    found = checkpoint.parts("big", entries, {}, now=NOW, part_bytes=16 * 1024)
    subjects = [s for s, _ in found]
    assert len(found) > 3
    assert subjects[-1] == "driftbus.checkpoint.big.0"
    assert sorted(subjects) == sorted(set(subjects))
    good, _ = checkpoint.assemble(decoded(found))
    assert len(good["big"].entries) == 3000


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("missing first", "first part is missing"),
        ("missing other", "different writes"),
        ("two writes", "different writes"),
    ],
)
def test_a_checkpoint_that_is_not_whole_is_not_used(case: str, why: str) -> None:
    entries = [(key(i), entry(i)) for i in range(3000)]
    old = decoded(checkpoint.parts("c", entries, {}, now=NOW, generation="g1", part_bytes=16384))
    new = decoded(checkpoint.parts("c", entries, {}, now=NOW, generation="g2", part_bytes=16384))
    by_part = {p.part: p for p in new}
    if case == "missing first":
        del by_part[0]
    elif case == "missing other":
        del by_part[1]
    else:  # being written: the new first part seen, one of the others still the old write's
        by_part[1] = next(p for p in old if p.part == 1)
    good, unusable = checkpoint.assemble(by_part.values())
    assert "c" not in good
    assert why in unusable["c"]


def test_another_version_or_garbage_is_refused_with_a_reason() -> None:
    (_, data), *_ = checkpoint.parts("c", [(key(1), entry(1))], {}, now=NOW)
    part = decode_part(data)
    with pytest.raises(CheckpointError, match="version 99"):
        decode_part(encode_part(msgspec.structs.replace(part, version=99)))
    with pytest.raises(CheckpointError, match="not a checkpoint part"):
        decode_part(b"\x93garbage")
    for part_no, parts in ((0, 10**9), (3, 2), (-1, 1)):  # a reader would ask for each part
        forged = msgspec.structs.replace(part, part=part_no, parts=parts)
        with pytest.raises(CheckpointError, match="at most"):
            decode_part(encode_part(forged))
    broken = msgspec.structs.replace(part, objects=b"not deflated")
    good, unusable = checkpoint.assemble([broken])
    assert not good
    assert "part 0" in unusable["c"]
    assert part.version == CHECKPOINT_VERSION


def test_the_tail_starts_where_the_least_recent_checkpoint_stops() -> None:
    cps = {c: checkpoint.Checkpoint(c, {"server": n}, {}, NOW) for c, n in (("a", 40), ("b", 12))}
    assert checkpoint.tail_start(cps, ["a", "b"], "server") == 13
    assert checkpoint.tail_start(cps, ["a"], "server") == 41
    assert checkpoint.tail_start(cps, ["a", "never-written"], "server") == 1
    assert checkpoint.tail_start(cps, ["a"], "applied") == 1
    assert checkpoint.tail_start(cps, [], "server") == 1


K = key(1)
SHA_A, SHA_B = "a" * 64, "b" * 64


def applied(rv: int, sha: str, at: int) -> AppliedEvent:
    return AppliedEvent(
        cluster="c", key=K, bundle="b", revision=f"r{rv}", manifest_sha=sha, apply_sha=sha,
        resource_version=str(rv), applied_at=NOW + dt.timedelta(seconds=at),
    )  # fmt: skip


def server(rv: int, sha: str | None, deleted: bool = False) -> ServerEvent:
    return ServerEvent(
        cluster="c", key=K, resource_version=str(rv), bundle="b", watcher="w",
        server_sha=sha, deleted=deleted,
    )  # fmt: skip


def failed(sha: str, at: int) -> OutcomeEvent:
    return OutcomeEvent(
        cluster="c", key=K, bundle="b", revision="r", manifest_sha=sha,
        phase=ObjectPhase.FAILED, message="x",
        at=NOW + dt.timedelta(seconds=at),
    )  # fmt: skip


def _seen(rv: int, sha: str, api_version: str, *, keep: bool) -> ServerEvent:
    return msgspec.structs.replace(server(rv, sha), api_version=api_version, keep=keep)


def _deleted(rv: int, at: int) -> AppliedEvent:
    return msgspec.structs.replace(
        applied(rv, SHA_A, at), deleted=True, apply_sha=None, manifest_sha=bytes(32).hex()
    )


HISTORIES = {
    "applied then seen": ([applied(5, SHA_A, 1)], [server(5, SHA_A)]),
    "drift after the checkpoint": ([applied(5, SHA_A, 1), server(5, SHA_A)], [server(9, SHA_B)]),
    "re-applied after": (
        [applied(5, SHA_A, 1), server(5, SHA_A)],
        [applied(11, SHA_B, 3), server(11, SHA_B)],
    ),
    "deleted after": ([applied(5, SHA_A, 1), server(5, SHA_A)], [server(12, None, deleted=True)]),
    "failed after": ([applied(5, SHA_A, 1), server(5, SHA_A)], [failed(SHA_B, 4)]),
    "failure then success": ([failed(SHA_A, 1)], [applied(6, SHA_A, 2), server(6, SHA_A)]),
    "gone after": (
        [applied(5, SHA_A, 1), _seen(5, SHA_A, "v1", keep=True)],
        [server(14, None, deleted=True)],
    ),
    "pruned after": (
        [applied(5, SHA_A, 1), server(5, SHA_A)],
        [_deleted(13, 5), server(13, None, deleted=True)],
    ),
    "pruned, then a failure": (
        [applied(5, SHA_A, 1), server(5, SHA_A)],
        [_deleted(13, 5), failed(SHA_B, 2)],
    ),
    "nothing after": ([applied(5, SHA_A, 1), server(5, SHA_A), failed(SHA_B, 4)], []),
}


@pytest.mark.parametrize("name", list(HISTORIES))
def test_a_checkpoint_with_the_later_facts_folded_in_is_the_rebuild(name: str) -> None:
    before, after = HISTORIES[name]
    at_checkpoint = live(before)
    found = checkpoint.parts("c", [(K, at_checkpoint)], {}, now=NOW)
    (cp,) = checkpoint.assemble(decoded(found))[0].values()
    read_back = cp.entries.get(K) or Entry(K)
    for fact in _compacted(after):
        read_back = facts.fold(read_back, fact)
    rebuilt = facts.rebuilt(K, _compacted(before + after))
    assert checkpoint.said(read_back) == checkpoint.said(rebuilt)


def live(history: list[facts.Fact]) -> Entry:
    """The entry of a planner that was live while ``history`` came in, one fact at a time
    (``decide.step``): it remembers more than a rebuild from the compacted streams would."""
    e = Entry(K)
    for f in history:
        match f:
            case ServerEvent():
                event: Any = facts.observed(f)
            case AppliedEvent():
                event = facts.applied(f)
            case _:  # an applier's failure answers the intent for the desired manifest
                e = restore(e, Desired("b", f.revision, bytes.fromhex(f.manifest_sha)))
                event = facts.outcome(f, e)
        if event is not None:
            e, _ = step(e, event, now=0.0)
    return e


def _compacted(history: list[facts.Fact]) -> list[facts.Fact]:
    """The last fact of each stream, in the order a rebuild folds them (applied, server,
    outcome): what the compacted streams hold."""
    last: dict[type, facts.Fact] = {}
    for f in history:
        last[type(f)] = f
    return [last[t] for t in (AppliedEvent, ServerEvent, OutcomeEvent) if t in last]


def test_what_the_facts_left_beside_an_entry_comes_back_with_it() -> None:
    """The watcher's health and the applier's last word: what a planner restarting from the
    checkpoint says in the status without the facts that brought them."""
    last_word = failed(SHA_B, 4)
    kept = {
        key(1): (Health.READY, "", None),
        key(2): (Health.IN_PROGRESS, "rolling out 1 of 3", last_word),
        key(3): checkpoint.NOTHING_KEPT,
    }
    entries = [(key(i), entry(i)) for i in (1, 2, 3)]
    found = checkpoint.parts("c", entries, {}, now=NOW, kept=lambda k: kept[k])
    (cp,) = checkpoint.assemble(decoded(found))[0].values()
    assert cp.kept == {k: v for k, v in kept.items() if v != checkpoint.NOTHING_KEPT}


def test_a_health_this_build_does_not_know_is_unknown_not_a_lost_checkpoint() -> None:
    o = checkpoint.to_object(key(1), entry(1), (Health.READY, "", None))
    odd = msgspec.structs.replace(o, health="Sparkling", outcome=b"{not json")
    assert checkpoint.kept_of(odd) == (Health.UNKNOWN, "", None)
