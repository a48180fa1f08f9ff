"""A cluster's checkpoint: what its planner knows of every object from the fact streams
(APPLIED, SERVER, OUTCOMES) — SHAs, resourceVersions, inventory, the watcher's health, the
applier's last word — and up to which stream sequence of each it had read (DESIGN §14: event
sourcing with snapshots).

Published by the planner on ``driftbus.checkpoint.<cluster>.<part>`` (stream CHECKPOINTS, the
last message per subject), in parts of at most ``PART_BYTES`` so that a cluster of 100,000
objects fits NATS's message size. A reader takes part 0 (written last) and every other part of
the same ``generation``; a checkpoint with a part missing or of another generation, or of
another ``version``, is not used (the reader replays the fact streams instead, as before). What
the facts said after ``read_up_to`` is on the fact streams still, above those sequences.

Encoded as MessagePack (``msgspec.msgpack``), the objects of a part as one zlib-deflated array
of ``CheckpointObject`` (positional): 100 objects are ≈ 5 KB, not 100 messages.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable
from typing import Final

import msgspec

CHECKPOINT_VERSION: Final = 1
"""Bumped whenever what a field means changes; a reader ignores other versions."""
PART_BYTES: Final = 256 * 1024
"""The most deflated object bytes one part carries (NATS's default message limit is 1 MiB)."""
MAX_PARTS: Final = 4096
"""The most parts a checkpoint has (1 GiB deflated): a part claiming more is refused, not
followed by a reader asking for each."""


class CheckpointError(ValueError):
    """Bytes on a checkpoint subject are not a checkpoint part this build reads."""


class CheckpointObject(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One object as the facts left it: the fields of the planner's entry that APPLIED, SERVER
    and OUTCOMES set (``planner.rule.entry.Entry``), SHAs as 32 raw bytes."""

    group: str
    kind: str
    namespace: str
    name: str
    applied_manifest_sha: bytes | None
    apply_sha: bytes | None
    applied_rv: int
    applied_bundle: str
    applied_revision: str
    applied_at: float
    server_sha: bytes | None
    server_deleted: bool
    server_rv: int
    owner_bundle: str
    api_version: str
    keep: bool
    server_retired: bool
    failed: bytes | None
    failed_at: float
    health: str = ""
    """The watcher's health of the live object (``Health``), "" when not live or not seen."""
    health_message: str = ""
    outcome: bytes = b""
    """The applier's last word that no applied fact replaced yet (an ``OutcomeEvent`` as
    ``schemas.codec`` encodes it), b"" when none: what the status says of the object."""


class CheckpointPart(msgspec.Struct, frozen=True):
    """One part of a cluster's checkpoint."""

    version: int
    cluster: str
    generation: str
    """Which write this part belongs to: a reader uses parts of one generation only."""
    part: int
    parts: int
    read_up_to: dict[str, int]
    """Per fact stream (``applied``, ``server``, ``outcome``), the sequence of the cluster's
    last message of it the planner had folded when it wrote this: every earlier one is in."""
    written_at: dt.datetime
    objects: bytes
    """zlib-deflated MessagePack array of ``CheckpointObject``."""


_ENCODER: Final = msgspec.msgpack.Encoder()
_PART: Final = msgspec.msgpack.Decoder(CheckpointPart)
_OBJECTS: Final = msgspec.msgpack.Decoder(list[CheckpointObject])


def deflate(objects: list[CheckpointObject]) -> bytes:
    return zlib.compress(_ENCODER.encode(objects), 1)


def encode_part(part: CheckpointPart) -> bytes:
    return _ENCODER.encode(part)


def decode_part(data: bytes) -> CheckpointPart:
    """The part, or CheckpointError (not a part, or of another version)."""
    try:
        part = _PART.decode(data)
    except msgspec.DecodeError as exc:
        raise CheckpointError(f"not a checkpoint part: {exc}") from None
    if part.version != CHECKPOINT_VERSION:
        raise CheckpointError(
            f"checkpoint version {part.version}; this build reads {CHECKPOINT_VERSION}"
        )
    if not 0 <= part.part < part.parts <= MAX_PARTS:
        raise CheckpointError(
            f"checkpoint of {part.cluster}: part {part.part} of {part.parts} (at most {MAX_PARTS})"
        )
    return part


def inflate(part: CheckpointPart) -> list[CheckpointObject]:
    """The objects of a part, or CheckpointError."""
    try:
        return _OBJECTS.decode(zlib.decompress(part.objects))
    except (zlib.error, msgspec.DecodeError) as exc:
        raise CheckpointError(f"checkpoint of {part.cluster}, part {part.part}: {exc}") from None


def whole(
    found: Iterable[CheckpointPart],
) -> tuple[dict[str, list[CheckpointPart]], dict[str, str]]:
    """Per cluster, the parts of its checkpoint in order if they are whole (part 0 and every
    part it names, all of one ``generation``), and per cluster whose checkpoint is not, why: a
    reader takes that cluster from the fact streams instead."""
    by_cluster: dict[str, dict[int, CheckpointPart]] = {}
    for p in found:
        by_cluster.setdefault(p.cluster, {})[p.part] = p
    good: dict[str, list[CheckpointPart]] = {}
    unusable: dict[str, str] = {}
    for cluster, got in by_cluster.items():
        head = got.get(0)
        if head is None:
            unusable[cluster] = "its first part is missing"
            continue
        mine = [q for i in range(head.parts) if (q := got.get(i)) is not None]
        if len(mine) < head.parts or any(q.generation != head.generation for q in mine):
            unusable[cluster] = "its parts are of different writes (one is being written)"
            continue
        good[cluster] = mine
    return good, unusable
