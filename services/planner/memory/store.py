"""The planner's SHA cache, packed: one ``bytes`` record per object instead of an ``Entry``.

A frozen dataclass per object with its key tuple, its ``ObjectKey`` and five 32-byte digest
objects costs ~650 bytes; issue 5 budgets 300. ``EntryStore`` keeps, per object, only its name
string and one record:

    header  <H I I I I I q q d d d I  flags, bundle id, revision id, owner-bundle id,
                                   apiVersion id, applied-bundle id, applied_rv, server_rv,
                                   failed_at, applied_at, inflight_at,
                                   applied-revision id                         (66 bytes)
    tail    32-byte digests, only those not implied by the flags

In steady state the applied manifest equals the desired one and the live object equals the
applied one, so the tail holds two digests and a record is 130 bytes. Strings that repeat across
objects (bundle names, revisions) are interned to small ids; ids no record uses any more are
reclaimed by an occasional sweep, so publishing revision after revision does not grow the table.

``decide`` keeps working on ``Entry`` values: ``get`` unpacks one, ``step`` folds into it, and
the result is packed back. Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from schemas.subjects import ObjectKey
from services.planner.memory.interned import Interned
from services.planner.rule.entry import DELETE_INFLIGHT, Entry, Sha, Slot

_HEADER = struct.Struct("<HIIIIIqqdddI")
_FLAGS_AND_BUNDLE = struct.Struct("<HI")  # the header's first two fields
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


def _stray_of(record: bytes) -> int:
    """The id of the bundle whose label a live object carries when no bundle declares it, else 0
    (whether that bundle ever applied it, its prune candidate, or not: the tally tells them
    apart)."""
    flags, bundle, _, owner_of, _, _, _, server_rv, *_ = _HEADER.unpack_from(record)
    if bundle or flags & (_MANIFEST | _SERVER_DELETED) or server_rv <= 0:
        return 0
    return int(owner_of)


class Progress(NamedTuple):
    """Of an object with a desired manifest (see ``EntryStore.progress``)."""

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


class EntryStore:
    """``Slot -> Entry`` with the memory of a packed record per object (see the module doc)."""

    def __init__(self) -> None:
        # (cluster, group, kind, namespace) -> name -> record: the group tuple is shared by all
        # the objects of one kind in one namespace, so each object pays only for its name.
        self._groups: dict[tuple[str, str, str, str], dict[str, bytes]] = {}
        self._strings = Interned()
        self._count = 0
        self._last: tuple[Entry | None, bytes | None] = (None, None)
        """The entry ``get`` unpacked last and its record."""
        self._sweep_at = 1024
        self.changed: set[Slot] | None = None
        """Once a reader sets it (``ledger``): each slot written or deleted since it last looked."""

    # --- mapping interface ----------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def _record(self, slot: Slot) -> bytes | None:
        cluster, k = slot
        names = self._groups.get((cluster, k.group, k.kind, k.namespace))
        return names.get(k.name) if names is not None else None

    def __contains__(self, slot: Slot) -> bool:
        return self._record(slot) is not None

    def get(self, slot: Slot) -> Entry | None:
        record = self._record(slot)
        if record is None:
            return None
        entry = self._unpack(slot[1], record)
        # an entry written back unchanged (a hit: ``step`` returns the very entry it was given)
        # is not packed again
        self._last = (entry, record)
        return entry

    def __getitem__(self, slot: Slot) -> Entry:
        entry = self.get(slot)
        if entry is None:
            raise KeyError(slot)
        return entry

    def __setitem__(self, slot: Slot, entry: Entry) -> None:
        cluster, k = slot
        group = (cluster, k.group, k.kind, k.namespace)
        names = self._groups.get(group)
        if names is None:
            names = self._groups[group] = {}
        if k.name not in names:
            self._count += 1
        last_entry, last_record = self._last
        if entry is last_entry and names.get(k.name) is last_record:
            return
        names[k.name] = self._pack(entry)
        if self.changed is not None:
            self.changed.add(slot)
        if len(self._strings) > self._sweep_at:
            self._sweep()

    def __delitem__(self, slot: Slot) -> None:
        cluster, k = slot
        group = (cluster, k.group, k.kind, k.namespace)
        del self._groups[group][k.name]
        self._count -= 1
        if not self._groups[group]:
            del self._groups[group]
        if self.changed is not None:
            self.changed.add(slot)

    def progress(self, slot: Slot) -> Progress | None:
        """How far one desired object got, read from the record's header alone.

        The bundle status asks this of every object of a bundle several times a second while it
        reconciles; unpacking whole entries for it was a quarter of the planner's CPU. Equal
        digests are packed as flags, so equality needs no digest at all.
        """
        record = self._record(slot)
        if record is None:
            return None
        flags, _, _, _, _, _, applied_rv, server_rv, failed_at, applied_at, _, _ = (
            _HEADER.unpack_from(record)
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

    def declaring(self, slot: Slot) -> str:
        """The bundle whose revision desires the object ("" when none does); read from the
        header alone: a revision taken in asks it of each of its objects (``rule.takeover``),
        100,000 of them at a planner's restart."""
        record = self._record(slot)
        if record is None:
            return ""
        flags, bundle = _FLAGS_AND_BUNDLE.unpack_from(record)
        return self._strings.by_id[bundle] if flags & _MANIFEST else ""

    def desired_slots(self) -> Iterator[Slot]:
        """Every slot with a desired manifest (header only)."""
        for (cluster, group, kind, namespace), names in self._groups.items():
            for name, record in names.items():
                if _FLAGS_AND_BUNDLE.unpack_from(record)[0] & _MANIFEST:
                    yield cluster, ObjectKey(group, kind, namespace, name)

    def stray_of(self, slot: Slot) -> str:
        """The bundle whose label the object carries if it is a stray of it (a prune candidate:
        live, carrying the label, declared by no bundle), else ""; read from the header alone."""
        record = self._record(slot)
        return self._strings.by_id[_stray_of(record)] if record is not None else ""

    def all_strays(self) -> Iterator[tuple[Slot, str]]:
        """Every stray with the bundle whose label it carries."""
        by_id = self._strings.by_id
        for (c, group, kind, namespace), names in self._groups.items():
            for name, record in names.items():
                if owner_id := _stray_of(record):
                    yield (c, ObjectKey(group, kind, namespace, name)), by_id[owner_id]

    def overdue(self, before: float) -> Iterator[Slot]:
        """Slots with an intent in flight since before ``before`` (header only: cheap enough to
        ask of every object every few seconds)."""
        for (cluster, group, kind, namespace), names in self._groups.items():
            for name, record in names.items():
                flags, *_, inflight_at, _ = _HEADER.unpack_from(record)
                if (flags >> _INFLIGHT) & 3 != _NONE and inflight_at < before:
                    yield cluster, ObjectKey(group, kind, namespace, name)

    def slots(self) -> Iterator[Slot]:
        for (cluster, group, kind, namespace), names in self._groups.items():
            for name in names:
                yield cluster, ObjectKey(group, kind, namespace, name)

    def items(self, *, cluster: str | None = None) -> Iterator[tuple[Slot, Entry]]:
        """Every (slot, entry), or those of one cluster."""
        for (c, group, kind, namespace), names in self._groups.items():
            if cluster is not None and c != cluster:
                continue
            for name, record in names.items():
                key = ObjectKey(group, kind, namespace, name)
                yield (c, key), self._unpack(key, record)

    # --- packing --------------------------------------------------------------------------

    def _pack(self, e: Entry) -> bytes:
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
        strings = self._strings
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

    def _unpack(self, key: ObjectKey, record: bytes) -> Entry:
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
        by_id = self._strings.by_id
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

    def _sweep(self) -> None:
        """Free the string ids no record uses (old revisions); amortised O(1) per write."""
        used: set[int] = set()
        for names in self._groups.values():
            for record in names.values():
                _, bundle, revision, owner, api_version, applied_bundle, *_, applied_revision = (
                    _HEADER.unpack_from(record)
                )
                used.update(
                    (bundle, revision, owner, api_version, applied_bundle, applied_revision)
                )
        self._strings.keep_only(used)
        self._sweep_at = max(1024, 2 * len(self._strings))
