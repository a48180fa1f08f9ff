"""Long work in the planner's one event loop, let run beside the rest: a burst of items paced
by time (``pace``), a pure computation done in steps (``stepped``). Heartbeats, lease renewals
and every other cluster's messages wait for whatever holds the loop; a replica that holds it
longer than its heartbeat timeout loses its claims (``common.stalls`` names what held it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Iterable
from typing import Any, TypeVar

T = TypeVar("T")

SLICE = 0.05
"""Seconds a burst (a big publish, the go-live) runs between two yields to the event loop: a
heartbeat round needs a few turns of the loop (a timer, a request, its reply), and yielding by
count let a slow machine starve it past the lease's timeout (the `memory` benchmark's planner
lost its claim mid-burst; ``tests/integration/test_lapsed_claim.py``). Not much shorter: each
yield lets the batches decided so far go, and their decision records with them, a message per
shelf per moment (10 ms made 0.34 DECISIONS messages per object of a 200-object cold apply
instead of 0.08)."""
_CHECK_EVERY = 16
_yielded = time.monotonic()


async def pace(i: int) -> None:
    """Yield to the event loop within a burst once it ran ``SLICE`` seconds (item ``i``)."""
    global _yielded  # one event loop per process: one clock for its bursts
    if i % _CHECK_EVERY == _CHECK_EVERY - 1 and time.monotonic() - _yielded >= SLICE:
        await asyncio.sleep(0)
        _yielded = time.monotonic()


async def stepped(steps: Generator[None, None, T]) -> T:
    """The value of a pure computation done in steps (``rule.revision.checking``), with the
    event loop let run between them."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        await asyncio.sleep(0)


async def in_order(items: Iterable[T], key: Callable[[T], Any]) -> list[T]:
    """``sorted(items, key=key)`` with the keys computed paced (``pace``); the sort itself, of
    the keys alone, takes ~0.1 s for 100,000 (the keys of a big revision took seconds)."""
    keyed: list[tuple[Any, int, T]] = []
    # taken first: a generator over a store's dicts must not see them change between yields
    for i, item in enumerate(list(items)):
        keyed.append((key(item), i, item))  # i: equal keys keep their order, items never compared
        await pace(i)
    keyed.sort()  # by key, then position: two items are never compared themselves
    return [item for _, _, item in keyed]
