"""What the planner holds of each object beside its packed SHA entry: the desired manifest, the
watcher's health and the applier's last word, in one record per object (pure).

One record instead of three dicts keyed by the same slot: each object's key is held once (the
dicts each held their own copy, from a different message), and a record goes as soon as it has
nothing left to say, so objects neither desired nor live nor failing cost nothing here.
"""

from __future__ import annotations

from schemas.messages import Health, OutcomeEvent
from schemas.subjects import ObjectKey
from services.planner.memory.codebook import Codebook
from services.planner.rule.entry import Slot


class Detail:
    """One object's record (``__slots__``: 72 bytes; the fields are shared, not copied)."""

    __slots__ = ("book", "health", "health_message", "manifest", "outcome")

    def __init__(self) -> None:
        self.manifest: bytes | None = None
        """The desired manifest as compact JSON, deflated by ``book`` when there is one: read
        only for the rare intent (a miss), or to read a CRD's kind when it is pruned."""
        self.book: Codebook | None = None
        self.health: Health | None = None
        """The watcher's kstatus health of the live object; None when not live (or not seen)."""
        self.health_message = ""
        self.outcome: OutcomeEvent | None = None
        """The last word of an applier that was not an applied fact (failed, conflict, waiting,
        retrying), until an applied fact replaces it: what the status says about the object."""

    def empty(self) -> bool:
        return self.manifest is None and self.health is None and self.outcome is None


class Details:
    """``Slot -> Detail``: set and dropped field by field; empty records are removed."""

    def __init__(self) -> None:
        self._of: dict[Slot, Detail] = {}
        self.changed: set[Slot] | None = None
        """Once a reader sets it (``ledger``): every slot whose health or outcome changed since
        it last looked (the manifest is not counted: no status reads it)."""

    def __len__(self) -> int:
        return len(self._of)

    def __contains__(self, slot: Slot) -> bool:
        return slot in self._of

    # --- reading --------------------------------------------------------------------------

    def manifest(self, slot: Slot) -> bytes | None:
        """The desired manifest as compact JSON."""
        d = self._of.get(slot)
        if d is None or d.manifest is None:
            return None
        return d.manifest if d.book is None else d.book.unpack(d.manifest)

    def health(self, slot: Slot) -> tuple[Health, str]:
        """The live object's health and why; ``Unknown`` when it is not live or not seen."""
        d = self._of.get(slot)
        if d is None or d.health is None:
            return Health.UNKNOWN, ""
        return d.health, d.health_message

    def outcome(self, slot: Slot) -> OutcomeEvent | None:
        d = self._of.get(slot)
        return d.outcome if d is not None else None

    def from_facts(self, slot: Slot) -> tuple[Health | None, str, OutcomeEvent | None]:
        """What the facts left here — the watcher's health (None: not live, or not seen) and
        why, the applier's last word — as a checkpoint keeps it."""
        d = self._of.get(slot)
        if d is None:
            return None, "", None
        return d.health, d.health_message, d.outcome

    def kept(self, cluster: str) -> dict[ObjectKey, tuple[Health | None, str, OutcomeEvent | None]]:
        """``from_facts`` of each object of ``cluster`` that has something, as it is now (a copy:
        a checkpoint taken in steps reads it while the records change on)."""
        return {
            slot[1]: (d.health, d.health_message, d.outcome)
            for slot, d in self._of.items()
            if slot[0] == cluster and (d.health is not None or d.outcome is not None)
        }

    # --- writing --------------------------------------------------------------------------

    def set_manifest(self, slot: Slot, manifest: bytes, book: Codebook | None = None) -> None:
        """Hold ``manifest``, deflated by its revision's ``book`` if given (``codebook``)."""
        d = self._record(slot)
        d.manifest, d.book = (manifest if book is None else book.pack(manifest)), book

    def drop_manifest(self, slot: Slot) -> None:
        if (d := self._of.get(slot)) is not None:
            d.manifest = d.book = None
            self._drop_if_empty(slot, d)

    def set_health(self, slot: Slot, health: Health, message: str) -> None:
        d = self._record(slot)
        d.health, d.health_message = health, message
        self._note(slot)

    def drop_health(self, slot: Slot) -> None:
        """The object is gone from the cluster (a tombstone)."""
        if (d := self._of.get(slot)) is not None:
            d.health, d.health_message = None, ""
            self._drop_if_empty(slot, d)
            self._note(slot)

    def set_outcome(self, slot: Slot, outcome: OutcomeEvent) -> None:
        self._record(slot).outcome = outcome
        self._note(slot)

    def drop_outcome(self, slot: Slot) -> None:
        """An applied fact replaces the applier's earlier word."""
        if (d := self._of.get(slot)) is not None:
            d.outcome = None
            self._drop_if_empty(slot, d)
            self._note(slot)

    def _note(self, slot: Slot) -> None:
        if self.changed is not None:
            self.changed.add(slot)

    def _record(self, slot: Slot) -> Detail:
        d = self._of.get(slot)
        if d is None:
            d = self._of[slot] = Detail()
        return d

    def _drop_if_empty(self, slot: Slot, d: Detail) -> None:
        if d.empty():
            del self._of[slot]
