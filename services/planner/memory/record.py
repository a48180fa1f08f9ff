"""One object's packed record in the planner's SHA cache (``store``): its layout, packing and
unpacking, and what is read from the header alone (pure).

    header  <H I I I I I q q d d d I  flags, bundle id, revision id, owner-bundle id,
                                   apiVersion id, applied-bundle id, applied_rv, server_rv,
                                   failed_at, applied_at, inflight_at,
                                   applied-revision id                         (66 bytes)
    tail    32-byte digests, only those not implied by the flags

In steady state the applied manifest equals the desired one and the live object equals the
applied one, so the tail holds two digests and a record is 130 bytes. Strings (bundle names,
revisions) are ids into the store's ``Interned`` table.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from schemas.subjects import ObjectKey
from services.planner.memory.interned import Interned
from services.planner.rule.entry import DELETE_INFLIGHT, Entry, Sha

_HEADER = struct.Struct("<HIIIIIqqdddI")
_FLAGS_AND_BUNDLE = struct.Struct("<HI")  # the header's first two fields
_INFLIGHT_AT = struct.Struct("<d")
_INFLIGHT_AT_OFFSET = struct.calcsize("<HIIIIIqqdd")  # the header's inflight_at
_SHA = 32

# flag bits
_MANIFEST = 1 << 0
_PRUNE = 1 << 1
_SERVER_DELETED = 1 << 2
# two-bit fields: (shift, values)
_APPLIED_MANIFEST = 3  # 0 none, 1 = manifest_sha, 2 in tail
_APPLY = 5  # 0 none, 2 in tail
_SERVER = 7  # 0 none, 1 = apply_sha, 2 in tail
_INFLIGHT = 9  # 0 none, 1 = manifest_sha, 2 DELETE_INFLIGHT, 3 in tail
_FAILED = 11  # 0 none, 1 = manifest_sha, 2 in tail
_KEEP = 1 << 13
_RETIRED = 1 << 14
_WARN_ONLY = 1 << 15  # drift: warn
_NONE, _SAME, _TAIL, _OTHER = 0, 1, 2, 3


def _sha_mode(value: Sha | None, same_as: Sha | None, tail: list[bytes]) -> int:
    if value is None:
        return _NONE
    if value == same_as:
        return _SAME
    tail.append(value)
    return _TAIL


def stray_of(record: bytes) -> int:
    """The id of the bundle whose label a live object carries when no bundle declares it, else 0
    (whether that bundle ever applied it, its prune candidate, or not: the tally tells them
    apart)."""
    flags, bundle, _, owner_of, _, _, _, server_rv, *_ = _HEADER.unpack_from(record)
    if bundle or flags & (_MANIFEST | _SERVER_DELETED) or server_rv <= 0:
        return 0
    return int(owner_of)


class Progress(NamedTuple):
    """Of an object with a desired manifest (``progress``)."""

    applied: bool
    """the desired manifest is the last applied one and nothing is in flight"""
    failed: bool
    """the desired manifest's apply failed, and nothing succeeded since"""
    observed: bool
    """the watcher has reported the object at or after the last apply"""
    inflight: bool
    """an intent is on its way"""
    drifted: bool
    """the live object seen since the last apply differs from it (or is gone)"""
    retired: bool = False
    """it is gone because it finished (a completed Job its TTL controller removed)"""


def progress(record: bytes) -> Progress | None:
    """How far one desired object got, read from its record's header alone.

    The bundle status asks this of every object of a bundle several times a second while it
    reconciles; unpacking whole entries for it was a quarter of the planner's CPU. Equal
    digests are packed as flags, so equality needs no digest at all.
    """
    flags, _, _, _, _, _, applied_rv, server_rv, failed_at, applied_at, _, _ = _HEADER.unpack_from(
        record
    )
    if not flags & _MANIFEST:
        return None
    inflight = (flags >> _INFLIGHT) & 3 != _NONE
    # The watcher publishes only changes of the pruned SHA or health, so an apply that
    # changed nothing it hashes (a finalizer, an ownerReference) brings no newer fact: a
    # server fact already showing what the apply produced counts as seeing it.
    same_as_applied = (flags >> _SERVER) & 3 == _SAME and not flags & _SERVER_DELETED
    observed = server_rv > 0 and (server_rv >= applied_rv or same_as_applied)
    has_apply = (flags >> _APPLY) & 3 != _NONE
    retired = bool(flags & _SERVER_DELETED and flags & _RETIRED)
    return Progress(
        applied=(flags >> _APPLIED_MANIFEST) & 3 == _SAME and not inflight,
        failed=(flags >> _FAILED) & 3 == _SAME and failed_at >= applied_at,
        observed=observed,
        inflight=inflight,
        drifted=has_apply
        and observed
        and not retired
        and (bool(flags & _SERVER_DELETED) or (flags >> _SERVER) & 3 != _SAME),
        retired=retired,
    )


def pack(e: Entry, strings: Interned) -> bytes:
    """``e``'s record; its strings interned in ``strings``."""
    tail: list[bytes] = []
    flags = 0
    if e.manifest_sha is not None:
        flags |= _MANIFEST
        tail.append(e.manifest_sha)
    if e.prune:
        flags |= _PRUNE
    if e.server_deleted:
        flags |= _SERVER_DELETED
    if e.keep:
        flags |= _KEEP
    if e.server_retired:
        flags |= _RETIRED
    if not e.correct_drift:
        flags |= _WARN_ONLY
    flags |= _sha_mode(e.applied_manifest_sha, e.manifest_sha, tail) << _APPLIED_MANIFEST
    if e.apply_sha is not None:
        flags |= _TAIL << _APPLY
        tail.append(e.apply_sha)
    flags |= _sha_mode(e.server_sha, e.apply_sha, tail) << _SERVER
    if e.inflight is None:
        pass
    elif e.inflight == e.manifest_sha:
        flags |= _SAME << _INFLIGHT
    elif e.inflight == DELETE_INFLIGHT:
        flags |= _TAIL << _INFLIGHT
    else:
        flags |= _OTHER << _INFLIGHT
        tail.append(e.inflight)
    flags |= _sha_mode(e.failed, e.manifest_sha, tail) << _FAILED
    header = _HEADER.pack(
        flags,
        strings.id(e.bundle),
        strings.id(e.revision),
        strings.id(e.owner_bundle),
        strings.id(e.api_version),
        strings.id(e.applied_bundle),
        e.applied_rv,
        e.server_rv,
        e.failed_at,
        e.applied_at,
        e.inflight_at,
        strings.id(e.applied_revision),
    )
    return header + b"".join(tail) if tail else header


def unpack(key: ObjectKey, record: bytes, by_id: Sequence[str]) -> Entry:
    """The entry ``record`` holds, its strings read from ``by_id``."""
    (
        flags,
        bundle,
        revision,
        owner,
        api_version,
        applied_bundle,
        applied_rv,
        server_rv,
        failed_at,
        applied_at,
        inflight_at,
        applied_revision,
    ) = _HEADER.unpack_from(record)
    pos = _HEADER.size

    def take() -> bytes:
        nonlocal pos
        pos += _SHA
        return record[pos - _SHA : pos]

    manifest = take() if flags & _MANIFEST else None
    mode = (flags >> _APPLIED_MANIFEST) & 3
    applied_manifest = manifest if mode == _SAME else take() if mode == _TAIL else None
    apply = take() if (flags >> _APPLY) & 3 else None
    mode = (flags >> _SERVER) & 3
    server = apply if mode == _SAME else take() if mode == _TAIL else None
    mode = (flags >> _INFLIGHT) & 3
    inflight = (
        None
        if mode == _NONE
        else manifest
        if mode == _SAME
        else DELETE_INFLIGHT
        if mode == _TAIL
        else take()
    )
    mode = (flags >> _FAILED) & 3
    failed = manifest if mode == _SAME else take() if mode == _TAIL else None
    return Entry(
        key,
        bundle=by_id[bundle],
        revision=by_id[revision],
        manifest_sha=manifest,
        prune=bool(flags & _PRUNE),
        applied_manifest_sha=applied_manifest,
        apply_sha=apply,
        applied_rv=applied_rv,
        applied_bundle=by_id[applied_bundle],
        applied_revision=by_id[applied_revision],
        server_sha=server,
        server_deleted=bool(flags & _SERVER_DELETED),
        server_retired=bool(flags & _RETIRED),
        correct_drift=not flags & _WARN_ONLY,
        server_rv=server_rv,
        owner_bundle=by_id[owner],
        api_version=by_id[api_version],
        keep=bool(flags & _KEEP),
        inflight=inflight,
        inflight_at=inflight_at,
        failed=failed,
        failed_at=failed_at,
        applied_at=applied_at,
    )


def with_inflight_at(record: bytes, at: float) -> bytes:
    """``record`` with its ``inflight_at`` moved to ``at``, the rest as it was."""
    out = bytearray(record)
    _INFLIGHT_AT.pack_into(out, _INFLIGHT_AT_OFFSET, at)
    return bytes(out)


def string_ids(record: bytes) -> tuple[int, ...]:
    """The interned string ids ``record`` uses."""
    _, bundle, revision, owner, api_version, applied_bundle, *_, applied_revision = (
        _HEADER.unpack_from(record)
    )
    return bundle, revision, owner, api_version, applied_bundle, applied_revision


def is_desired(record: bytes) -> bool:
    return bool(_FLAGS_AND_BUNDLE.unpack_from(record)[0] & _MANIFEST)


def declaring_id(record: bytes) -> int:
    """The id of the bundle whose revision desires the object (0: none)."""
    flags, bundle = _FLAGS_AND_BUNDLE.unpack_from(record)
    return int(bundle) if flags & _MANIFEST else 0


def labelled(record: bytes, owner_id: int) -> bool:
    """Live, desired by no manifest, carrying the label of the bundle ``owner_id``: what a prune
    of that bundle looks at (``prune.strays_from`` reads the rest of the entry)."""
    flags, _, _, owner, _, _, _, server_rv, *_ = _HEADER.unpack_from(record)
    return owner == owner_id and not flags & (_MANIFEST | _SERVER_DELETED) and server_rv > 0


def applied_live(record: bytes, bundle_id: int) -> bool:
    """Live, and last applied for the bundle ``bundle_id``: what its prune budget weighs."""
    flags, _, _, _, _, applied_bundle, _, server_rv, *_ = _HEADER.unpack_from(record)
    return applied_bundle == bundle_id and not flags & _SERVER_DELETED and server_rv > 0
