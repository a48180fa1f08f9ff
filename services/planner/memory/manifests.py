"""Stored manifests kept in memory, the least recently used dropped first, within a byte
budget (pure).

A fleet revision's manifests are stored once in the Object Store and named by every cluster's
placement with the same reference (bucket, object name, SHA-256, size): a replica serving 1,000
clusters of the fleet would read and parse them 1,000 times. What was read for one cluster is
kept here, by its reference, for the next (``shell.manifests`` reads, shares and counts).
What is kept is only what is the same for every cluster: the bytes, checked against their
SHA-256, split into the array's elements. What checking them gave is kept apart, keyed by
what the check reads (``checked``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Kept(Generic[K, V]):
    """Values by key, each with its cost in bytes, holding at most ``budget`` bytes in all:
    keeping one over the budget drops the least recently used (kept or got) first. A value
    costing more than ``largest`` (the whole budget unless given) is not kept (nor does it
    drop anything)."""

    __slots__ = ("_costs", "_values", "budget", "held", "largest")

    def __init__(self, budget: int, *, largest: int | None = None) -> None:
        if budget < 0:
            raise ValueError(f"a budget of {budget} bytes")
        self.budget = budget
        self.largest = budget if largest is None else min(largest, budget)
        """The most one value may cost and be kept."""
        self.held = 0
        """Bytes of the values kept now."""
        self._values: OrderedDict[K, V] = OrderedDict()
        self._costs: dict[K, int] = {}

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        if key not in self._values:
            return None
        self._values.move_to_end(key)
        return self._values[key]

    def keep(self, key: K, value: V, cost: int) -> list[K]:
        """Keep ``value`` for ``key`` (replacing what was kept for it); the keys dropped to
        make room, least recently used first. Not kept when ``cost`` exceeds ``largest``."""
        if cost < 0:
            raise ValueError(f"a cost of {cost} bytes")
        if not self.fits(cost):
            return []
        self.drop(key)
        dropped: list[K] = []
        while self.held + cost > self.budget:
            oldest = next(iter(self._values))
            self.drop(oldest)
            dropped.append(oldest)
        self._values[key] = value
        self._costs[key] = cost
        self.held += cost
        return dropped

    def fits(self, cost: int) -> bool:
        """Whether a value of ``cost`` bytes would be kept (asked before making a costly one)."""
        return cost <= self.largest

    def drop(self, key: K) -> None:
        if key in self._values:
            del self._values[key]
            self.held -= self._costs.pop(key)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> list[K]:
        """The keys kept, least recently used first."""
        return list(self._values)
