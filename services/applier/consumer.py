"""Taking intents off the cluster's shared durable consumer, at most ``concurrency`` at a time,
and keeping each claimed while it is worked on.

Any number of replicas bind the same pull consumer; JetStream hands each intent to one of them
and redelivers it if that replica dies before acking, so adding or killing replicas loses
nothing. A replica fetches only as many intents as it can start at once: the rest stay in the
stream for the other replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from services.common import bus

log = logging.getLogger("driftbus.applier")
Handler = Callable[[bus.Message], Coroutine[Any, Any, None]]


class InFlight:
    """The intents being handled: at most ``size`` at once, and how many more could start now."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"concurrency must be 0 or more, not {size}")
        self.free = size
        """Slots free right now: what the next fetch may ask for."""
        self.tasks: set[asyncio.Task[None]] = set()
        self._freed = asyncio.Event()

    async def at_least(self, n: int, stopping: asyncio.Event | None = None) -> None:
        """Wait until ``n`` slots are free (or ``stopping`` is set)."""
        while self.free < n and not (stopping is not None and stopping.is_set()):
            self._freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._freed.wait(), 1.0)

    async def start(self, handle: Handler, msg: bus.Message) -> None:
        """Start handling ``msg`` as soon as a slot is free."""
        await self.at_least(1)
        self.free -= 1
        task = asyncio.create_task(handle(msg), name=msg.subject)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        _log_failure(task)
        self.free += 1
        self._freed.set()


def fetch_size(concurrency: int) -> int:
    """Free slots a replica waits for before it fetches again: a quarter of its concurrency,
    so one fetch request brings several intents instead of one per finished apply, while the
    slots that stay busy keep the API server fed."""
    return max(1, concurrency // 4)


async def consume(
    js: bus.JetStream,
    *,
    cluster: str,
    concurrency: int,
    ack_wait: float,
    max_deliver: int,
    handle: Handler,
    stopping: asyncio.Event,
    bound: asyncio.Event,
) -> None:
    """Bind the cluster's intent consumer and hand its intents to ``handle`` until ``stopping``
    is set; then finish what was started (anything not started stays in the stream)."""
    queue = await bus.bind_intents(
        js, cluster, bus.IntentConsumerSettings(ack_wait=ack_wait, max_deliver=max_deliver)
    )
    bound.set()
    inflight = InFlight(concurrency)
    wanted = fetch_size(concurrency)
    while not stopping.is_set():
        await inflight.at_least(wanted, stopping)
        if stopping.is_set():
            break
        try:  # fetch only what we can start now
            msgs = await queue.fetch(max(1, inflight.free), timeout=1.0)
        except Exception:  # a broken connection must not end the replica: log, retry
            log.exception("fetching intents failed; retrying")
            await asyncio.sleep(1.0)
            continue
        for msg in msgs:
            await inflight.start(handle, msg)
    # SIGTERM: finish what was started; anything not started stays in the stream.
    if inflight.tasks:
        await asyncio.wait(inflight.tasks, timeout=ack_wait / 2)
    await queue.close()


async def keep_claimed(msg: bus.Message, *, ack_wait: float) -> None:
    """Tell NATS the intent is still being worked on, so a short ack_wait redelivers the
    work of a dead replica quickly without redelivering a slow but live apply."""
    while True:
        await asyncio.sleep(ack_wait / 3)
        with contextlib.suppress(Exception):  # a lost signal only risks a redelivery
            await bus.in_progress(msg)


def seq(msg: bus.Message) -> int:
    """The intent's stream sequence: its identity across redeliveries."""
    return bus.stream_sequence(msg)


def _log_failure(task: asyncio.Task[None]) -> None:
    """An intent whose handling crashed stays unacked (it is redelivered); never silent."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("handling intent %s failed: %s: %s", task.get_name(), type(exc).__name__, exc)
