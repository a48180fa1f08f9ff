"""The planner's SHA cache, packed: one ``bytes`` record per object instead of an ``Entry``.

A frozen dataclass per object with its key tuple, its ``ObjectKey`` and five 32-byte digest
objects costs ~650 bytes; issue 5 budgets 300. ``EntryStore`` keeps, per object, only its name
string and one record (``record``: 130 bytes in steady state). Strings that repeat across
objects (bundle names, revisions) are interned to small ids; ids no record uses any more are
reclaimed by an occasional sweep, so publishing revision after revision does not grow the table.
Beside the records, the index of what is in flight (``inflight``).

``decide`` keeps working on ``Entry`` values: ``get`` unpacks one, ``step`` folds into it, and
the result is packed back. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from schemas.subjects import ObjectKey
from services.planner.memory import record
from services.planner.memory.inflight import InflightIndex
from services.planner.memory.interned import Interned
from services.planner.memory.record import Progress
from services.planner.rule.entry import Entry, Slot

__all__ = ["EntryStore", "Progress"]


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
        self._inflight = InflightIndex()
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
        held = self._record(slot)
        if held is None:
            return None
        entry = record.unpack(slot[1], held, self._strings.by_id)
        # an entry written back unchanged (a hit: ``step`` returns the very entry it was given)
        # is not packed again
        self._last = (entry, held)
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
        names[k.name] = record.pack(entry, self._strings)
        self._inflight.track(group, k.name, None if entry.inflight is None else entry.inflight_at)
        if self.changed is not None:
            self.changed.add(slot)
        if len(self._strings) > self._sweep_at:
            self._sweep()

    def __delitem__(self, slot: Slot) -> None:
        cluster, k = slot
        group = (cluster, k.group, k.kind, k.namespace)
        del self._groups[group][k.name]
        self._inflight.track(group, k.name, None)
        self._count -= 1
        if not self._groups[group]:
            del self._groups[group]
        if self.changed is not None:
            self.changed.add(slot)

    @property
    def inflight(self) -> int:
        """How many objects have an intent in flight."""
        return len(self._inflight)

    def still_inflight(self, slot: Slot, at: float) -> bool:
        """The object's intent in flight is still on its way at ``at`` (queued, not lost): its
        ``inflight_at`` moves there, as ``decide``'s ``Working`` does, in the header alone —
        nothing the status or a decision reads changes. False when nothing is in flight."""
        group = (slot[0], slot[1].group, slot[1].kind, slot[1].namespace)
        k = slot[1]
        if (since := self._inflight.since(group, k.name)) is None:
            return False
        if at > since:
            names = self._groups[group]
            names[k.name] = record.with_inflight_at(names[k.name], at)
            self._inflight.track(group, k.name, at)
            self._last = (None, None)
        return True

    def progress(self, slot: Slot) -> Progress | None:
        """How far one desired object got, read from the record's header alone
        (``record.progress``): the bundle status asks this of every object of a bundle several
        times a second while it reconciles; unpacking whole entries for it was a quarter of the
        planner's CPU."""
        held = self._record(slot)
        return record.progress(held) if held is not None else None

    def declaring(self, slot: Slot) -> str:
        """The bundle whose revision desires the object ("" when none does); read from the
        header alone: a revision taken in asks it of each of its objects (``rule.takeover``),
        100,000 of them at a planner's restart."""
        held = self._record(slot)
        return self._strings.by_id[record.declaring_id(held)] if held is not None else ""

    def desired_slots(self) -> Iterator[Slot]:
        """Every slot with a desired manifest (header only)."""
        for (cluster, group, kind, namespace), names in self._groups.items():
            for name, held in names.items():
                if record.is_desired(held):
                    yield cluster, ObjectKey(group, kind, namespace, name)

    def stray_of(self, slot: Slot) -> str:
        """The bundle whose label the object carries if it is a stray of it (a prune candidate:
        live, carrying the label, declared by no bundle), else ""; read from the header alone."""
        held = self._record(slot)
        return self._strings.by_id[record.stray_of(held)] if held is not None else ""

    def all_strays(self) -> Iterator[tuple[Slot, str]]:
        """Every stray with the bundle whose label it carries."""
        by_id = self._strings.by_id
        for (c, group, kind, namespace), names in self._groups.items():
            for name, held in names.items():
                if owner_id := record.stray_of(held):
                    yield (c, ObjectKey(group, kind, namespace, name)), by_id[owner_id]

    def labelled(self, cluster: str, bundle: str) -> list[Slot]:
        """The live objects of ``cluster`` carrying ``bundle``'s label that no manifest desires
        (``record.labelled``, header only): a prune unpacks these, not all 100,000."""
        return self._with_bundle(cluster, bundle, record.labelled)

    def applied_live(self, cluster: str, bundle: str) -> list[Slot]:
        """The live objects of ``cluster`` last applied for ``bundle`` (``record.applied_live``,
        header only): what its prune budget weighs."""
        return self._with_bundle(cluster, bundle, record.applied_live)

    def _with_bundle(
        self, cluster: str, bundle: str, test: Callable[[bytes, int], bool]
    ) -> list[Slot]:
        """The slots of ``cluster`` whose record passes ``test`` with ``bundle``'s string id."""
        bundle_id = self._strings.ids.get(bundle) if bundle else None
        if not bundle_id:
            return []  # no record names it
        return [
            (c, ObjectKey(group, kind, namespace, name))
            for (c, group, kind, namespace), names in self._groups.items()
            if c == cluster
            for name, held in names.items()
            if test(held, bundle_id)
        ]

    def overdue(self, before: float) -> list[Slot]:
        """Slots with an intent in flight since before ``before`` (``inflight``: it costs what
        is in flight, not what is known)."""
        return self._inflight.overdue(before)

    def slots(self) -> Iterator[Slot]:
        for (cluster, group, kind, namespace), names in self._groups.items():
            for name in names:
                yield cluster, ObjectKey(group, kind, namespace, name)

    def items(self, *, cluster: str | None = None) -> Iterator[tuple[Slot, Entry]]:
        """Every (slot, entry), or those of one cluster."""
        for (c, group, kind, namespace), names in self._groups.items():
            if cluster is not None and c != cluster:
                continue
            for name, held in names.items():
                key = ObjectKey(group, kind, namespace, name)
                yield (c, key), record.unpack(key, held, self._strings.by_id)

    def frozen(self, cluster: str) -> Frozen:
        """The cluster's records as they are now, to read while the store changes on (a
        checkpoint taken in steps): the records are immutable, so this copies references only
        (a few ms for 100,000), and the string table, which the sweep reuses."""
        return Frozen(
            [(g, dict(names)) for g, names in self._groups.items() if g[0] == cluster],
            list(self._strings.by_id),
        )

    def _sweep(self) -> None:
        """Free the string ids no record uses (old revisions); amortised O(1) per write."""
        used: set[int] = set()
        for names in self._groups.values():
            for held in names.values():
                used.update(record.string_ids(held))
        self._strings.keep_only(used)
        self._sweep_at = max(1024, 2 * len(self._strings))


class Frozen:
    """The records of a cluster as ``EntryStore.frozen`` took them."""

    def __init__(
        self, groups: list[tuple[tuple[str, str, str, str], dict[str, bytes]]], by_id: list[str]
    ) -> None:
        self._groups = groups
        self._by_id = by_id

    def __len__(self) -> int:
        return sum(len(names) for _, names in self._groups)

    def items(self) -> Iterator[tuple[ObjectKey, Entry]]:
        for (_, group, kind, namespace), names in self._groups:
            for name, held in names.items():
                key = ObjectKey(group, kind, namespace, name)
                yield key, record.unpack(key, held, self._by_id)
