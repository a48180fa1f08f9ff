"""Which objects have an intent in flight, and since when: the entry store's index of them.

A lost-intent round asks for the intents in flight longer than a timeout, and the pending count
asks how many are in flight, several times a second while a queue drains. Reading every packed
record for that (100,000 of them in the ``memory`` bench) was a fifth of a planner draining its
queue; this index costs what is in flight, and nothing for a quiet cluster. Per group (the
store's ``(cluster, group, kind, namespace)``), name → ``inflight_at``. Pure.
"""

from __future__ import annotations

from schemas.subjects import ObjectKey
from services.planner.rule.entry import Slot

Group = tuple[str, str, str, str]
"""(cluster, API group, kind, namespace): the store's group of records."""


class InflightIndex:
    """name → in flight since, per group; kept by ``EntryStore`` on every write."""

    def __init__(self) -> None:
        self._of: dict[Group, dict[str, float]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def since(self, group: Group, name: str) -> float | None:
        held = self._of.get(group)
        return held.get(name) if held is not None else None

    def track(self, group: Group, name: str, at: float | None) -> None:
        """A record written: in flight since ``at``, or not in flight (None)."""
        held = self._of.get(group)
        if at is None:
            if held is not None and held.pop(name, None) is not None:
                self._count -= 1
                if not held:
                    del self._of[group]
            return
        if held is None:
            held = self._of[group] = {}
        if name not in held:
            self._count += 1
        held[name] = at

    def overdue(self, before: float) -> list[Slot]:
        """The slots in flight since before ``before``."""
        return [
            (cluster, ObjectKey(group, kind, namespace, name))
            for (cluster, group, kind, namespace), names in self._of.items()
            for name, at in names.items()
            if at < before
        ]
