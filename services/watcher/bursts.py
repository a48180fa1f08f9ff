"""Watch events taken in bursts, and facts cut into batches (issue 44: objects share messages).

A watch stream hands events one at a time; a cold apply of 1,000 objects is 1,000 of them within
a second or two. ``bursts`` gives what has arrived together — every event already waiting, and
whatever follows within ``linger`` seconds — as one list, so the watcher publishes one message
per burst instead of one per object. ``batches`` cuts a burst or a list page into messages NATS
takes (by count and encoded size).

The watch stream is read by a task of its own: a burst's wait for more is a timed read of a
queue, never a cancelled read of the HTTP stream.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Final, TypeVar

T = TypeVar("T")

BATCH_EVENTS: Final = 1000
"""The most facts one message carries."""
BATCH_BYTES: Final = 512 * 1024
"""The most encoded fact bytes one message carries (NATS's default payload limit is 1 MiB)."""
LINGER: Final = 0.02
"""Seconds a burst waits for more events after the last one: a drift is published 20 ms
later, and a stream of events a few milliseconds apart becomes one message, not many."""


class _Ended:
    """The stream ended (normally, or with ``error``)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


async def bursts(
    events: AsyncIterator[T], *, most: int = BATCH_EVENTS, linger: float = LINGER
) -> AsyncGenerator[list[T], None]:
    """The events of ``events`` in bursts of at most ``most``, in order. An error of the stream
    is raised after the events that came before it were given (the caller publishes them, then
    handles the error as it would have handled it alone)."""
    queue: asyncio.Queue[T | _Ended] = asyncio.Queue(maxsize=max(1, 2 * most))

    async def pump() -> None:
        try:
            async for ev in events:
                await queue.put(ev)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            await queue.put(_Ended(exc))
        else:
            await queue.put(_Ended())

    reader = asyncio.create_task(pump(), name="watch stream")
    try:
        ended: _Ended | None = None
        while ended is None:
            first = await queue.get()
            if isinstance(first, _Ended):
                ended = first
                break
            burst = [first]
            while len(burst) < most:
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    try:
                        item = await asyncio.wait_for(queue.get(), linger)
                    except TimeoutError:
                        break
                if isinstance(item, _Ended):
                    ended = item
                    break
                burst.append(item)
            yield burst
        if ended.error is not None:
            raise ended.error
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader


def batches(
    sizes: Sequence[int], *, most: int = BATCH_EVENTS, max_bytes: int = BATCH_BYTES
) -> list[range]:
    """Consecutive index ranges over items of encoded ``sizes``: each at most ``most`` items and
    ``max_bytes`` bytes, except an item larger than ``max_bytes`` alone, which is a range of its
    own (NATS refuses it if it is over the payload limit; that is the item's error, not its
    neighbours')."""
    out: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= most or total + size > max_bytes):
            out.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out
