"""How an applier replica fetches: several intents per fetch request, never more than it can
start (``services/applier/consumer.py``)."""

from __future__ import annotations

import asyncio

import pytest

from services.applier.consumer import InFlight, fetch_size


@pytest.mark.parametrize(
    ("concurrency", "size"), [(0, 1), (1, 1), (3, 1), (4, 1), (8, 2), (16, 4), (64, 16)]
)
def test_a_replica_fetches_a_quarter_of_its_slots_at_once(concurrency: int, size: int) -> None:
    assert fetch_size(concurrency) == size


async def test_waiting_for_free_slots_ends_when_enough_are_free_or_on_stop() -> None:
    slots = InFlight(4)
    release = asyncio.Event()

    async def busy() -> None:
        await release.wait()

    for i in range(4):
        await slots.start(busy(), f"s{i}")
    assert slots.free == 0
    waiting = asyncio.create_task(slots.at_least(2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    release.set()
    await asyncio.wait_for(waiting, 2)
    assert slots.free >= 2

    full = InFlight(0)
    stopping = asyncio.Event()
    stopped = asyncio.create_task(full.at_least(1, stopping))
    await asyncio.sleep(0.05)
    assert not stopped.done()
    stopping.set()
    await asyncio.wait_for(stopped, 2)
