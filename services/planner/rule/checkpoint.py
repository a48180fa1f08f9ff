"""A cluster's checkpoint, as the planner writes it and as a reader takes it back (pure).

The planner's entries hold what the fact streams said of each object (the applied, live and
failed fields) next to what only the planner decides (the desired manifest, what is in flight).
A checkpoint keeps the first kind only, and beside it what else the facts left (``Kept``: the
watcher's health, the applier's last word): read back, each object is the entry a planner would
rebuild from the facts folded up to the checkpoint's sequences (``Checkpoint.read_up_to``), and
what came after is on the streams above them (``tail_start``). ``driftbus plan`` reads a fleet's
recorded state this way, and a planner taking a cluster rebuilds from it: a message per cluster
instead of one per object and stream.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping

import msgspec

from schemas.checkpoint import (
    CHECKPOINT_VERSION,
    PART_BYTES,
    CheckpointError,
    CheckpointObject,
    CheckpointPart,
    deflate,
    encode_part,
    inflate,
    whole,
)
from schemas.codec import WireError, decode, encode
from schemas.messages import Health, OutcomeEvent
from schemas.subjects import ObjectKey, checkpoint_subject
from services.core.steps import finished
from services.planner.rule.entry import Entry

FACT_KINDS = ("applied", "server", "outcome")
"""The fact streams a checkpoint stands for, by the kind the planner reads them as."""


Kept = tuple[Health | None, str, OutcomeEvent | None]
"""What the facts left beside an object's entry: the watcher's health of the live object (None:
not live, or not seen) and why, and the applier's last word no applied fact replaced yet."""
NOTHING_KEPT: Kept = (None, "", None)


def to_object(key: ObjectKey, e: Entry, kept: Kept = NOTHING_KEPT) -> CheckpointObject:
    """What the facts left in ``e`` and beside it (``kept``)."""
    health, message, outcome = kept
    return CheckpointObject(
        key.group, key.kind, key.namespace, key.name,
        e.applied_manifest_sha, e.apply_sha, e.applied_rv, e.applied_bundle, e.applied_revision,
        e.applied_at, e.server_sha, e.server_deleted, e.server_rv, e.owner_bundle,
        e.api_version, e.keep, e.server_retired, e.failed, e.failed_at,
        str(health) if health is not None else "", message,
        encode(outcome) if outcome is not None else b"",
    )  # fmt: skip


def kept_of(o: CheckpointObject) -> Kept:
    """What ``o`` keeps beside its entry; a health or a last word this build cannot read is
    unknown (the status then says so), never a reason to drop the checkpoint."""
    health: Health | None = None
    if o.health:
        health = Health(o.health) if o.health in _HEALTH else Health.UNKNOWN
    outcome = None
    if o.outcome:
        with contextlib.suppress(WireError):
            outcome = decode(o.outcome, OutcomeEvent)
    return health, o.health_message, outcome


_HEALTH = frozenset(h.value for h in Health)
_NO_KEY = ObjectKey("", "", "", "")
_NOTHING = msgspec.structs.astuple(to_object(_NO_KEY, Entry(_NO_KEY)))[4:]
"""An object no fact has spoken of yet (desired only): left out, a reader's default."""


def to_entry(o: CheckpointObject) -> Entry:
    """The entry a planner rebuilding from the same facts holds (nothing desired, nothing in
    flight: the rebuild never marks anything in flight either; no failure a later apply
    superseded: ``said``)."""
    return said(
        Entry(
            ObjectKey.shared(o.group, o.kind, o.namespace, o.name),
            applied_manifest_sha=o.applied_manifest_sha,
            apply_sha=o.apply_sha,
            applied_rv=o.applied_rv,
            applied_bundle=o.applied_bundle,
            applied_revision=o.applied_revision,
            applied_at=o.applied_at,
            server_sha=o.server_sha,
            server_deleted=o.server_deleted,
            server_rv=o.server_rv,
            owner_bundle=o.owner_bundle,
            api_version=o.api_version,
            keep=o.keep,
            server_retired=o.server_retired,
            failed=o.failed,
            failed_at=o.failed_at,
        )
    )


def said(e: Entry) -> Entry:
    """What the decision rule can read of ``e``'s facts, without the traces the order they
    came in left, which a rebuild from the compacted streams (folding the last fact of each
    alone) has not: the time of an apply a deletion since undid (``restore`` keeps no time
    from a deletion), a failure older than the last apply (``facts.outcome`` never folds one
    in), and of an object gone, the label, apiVersion and keep annotation it had while it
    lived (a tombstone may carry none; every rule that reads them asks ``live`` first).

    An entry read back from a checkpoint, with the facts since folded in, is ``said`` of the
    entry a rebuild from every fact gives (``tests/unit/test_checkpoint.py``)."""
    if e.applied_manifest_sha is None and e.applied_at:
        e = msgspec.structs.replace(e, applied_at=0.0)
    if e.failed is not None and e.failed_at < e.applied_at:
        e = msgspec.structs.replace(e, failed=None, failed_at=0.0)
    if e.server_deleted and (e.owner_bundle or e.api_version or e.keep):
        e = msgspec.structs.replace(e, owner_bundle="", api_version="", keep=False)
    return e


def objects_of(
    entries: Iterable[tuple[ObjectKey, Entry]], kept: Callable[[ObjectKey], Kept] | None = None
) -> Iterator[CheckpointObject]:
    """What a checkpoint keeps of each entry (and beside it, ``kept``): none of an object no fact
    has spoken of yet."""
    for k, e in entries:
        o = to_object(k, e, kept(k) if kept else NOTHING_KEPT)
        if msgspec.structs.astuple(o)[4:] != _NOTHING:
            yield o


def parts(
    cluster: str,
    entries: Iterable[tuple[ObjectKey, Entry]],
    read_up_to: Mapping[str, int],
    *,
    now: dt.datetime,
    generation: str | None = None,
    part_bytes: int = PART_BYTES,
    kept: Callable[[ObjectKey], Kept] | None = None,
) -> list[tuple[str, bytes]]:
    """The messages of one checkpoint, as (subject, payload), in the order to publish them:
    part 0 last, so that a reader who sees it sees the others of its generation too.
    ``kept``: what the facts left beside each object's entry (none when not given)."""
    objects = list(objects_of(entries, kept))
    return split(
        cluster, objects, read_up_to, now=now, generation=generation, part_bytes=part_bytes
    )


def split(
    cluster: str,
    objects: list[CheckpointObject],
    read_up_to: Mapping[str, int],
    *,
    now: dt.datetime,
    generation: str | None = None,
    part_bytes: int = PART_BYTES,
    count: int = 1,
) -> list[tuple[str, bytes]]:
    """``parts`` of the ``objects`` already taken (``objects_of``); ``count``: the parts to
    try first (the last checkpoint's: each try deflates everything)."""
    generation = generation or uuid.uuid4().hex
    count = max(1, count)
    while True:
        size = -(-len(objects) // count) if objects else 0
        chunks = [objects[i : i + size] for i in range(0, len(objects), size)] if size else [[]]
        deflated = [deflate(c) for c in chunks]
        if max(map(len, deflated)) <= part_bytes or size <= 1:
            break
        count = max(count + 1, count * max(map(len, deflated)) // part_bytes + 1)
    seqs = {k: int(read_up_to.get(k, 0)) for k in FACT_KINDS}
    out = [
        (
            checkpoint_subject(cluster, i),
            encode_part(
                CheckpointPart(
                    CHECKPOINT_VERSION, cluster, generation, i, len(deflated), seqs, now, data
                )
            ),
        )
        for i, data in enumerate(deflated)
    ]
    return out[1:] + out[:1]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A cluster's objects as its planner had folded the fact streams up to ``read_up_to``."""

    cluster: str
    read_up_to: dict[str, int]
    entries: dict[ObjectKey, Entry]
    written_at: dt.datetime
    kept: dict[ObjectKey, Kept] = dataclasses.field(default_factory=dict)
    """Beside each entry, what the facts left that is not ``NOTHING_KEPT``."""


def assemble(found: Iterable[CheckpointPart]) -> tuple[dict[str, Checkpoint], dict[str, str]]:
    """The whole checkpoints among ``found`` (every cluster's last part of each index), and
    per cluster whose checkpoint cannot be used, why (a part missing, parts of two writes, one
    that does not inflate): that cluster is read from the fact streams instead."""
    return finished(assembling(found))


def assembling(
    found: Iterable[CheckpointPart],
) -> Generator[None, None, tuple[dict[str, Checkpoint], dict[str, str]]]:
    """``assemble`` in steps of one part (a few thousand objects): a planner reading back
    100,000 objects lets its event loop run between them."""
    wholes, unusable = whole(found)
    good: dict[str, Checkpoint] = {}
    for cluster, mine in wholes.items():
        head = mine[0]
        entries: dict[ObjectKey, Entry] = {}
        kept: dict[ObjectKey, Kept] = {}
        try:
            for q in mine:
                for o in inflate(q):
                    e = to_entry(o)
                    entries[e.key] = e
                    if o.health or o.outcome:
                        kept[e.key] = kept_of(o)
                yield
        except CheckpointError as exc:
            unusable[cluster] = str(exc)
            continue
        good[cluster] = Checkpoint(cluster, dict(head.read_up_to), entries, head.written_at, kept)
    return good, unusable


def tail_start(checkpoints: Mapping[str, Checkpoint], clusters: Iterable[str], kind: str) -> int:
    """The first sequence of stream ``kind`` a reader of ``clusters`` needs: the lowest that
    any of their checkpoints does not cover (1, the whole stream, when one has none)."""
    covered = [checkpoints[c].read_up_to.get(kind, 0) if c in checkpoints else 0 for c in clusters]
    return 1 + min(covered, default=0)
