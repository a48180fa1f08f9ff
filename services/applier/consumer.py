"""Taking intents off the cluster's shared durable consumer, at most ``concurrency`` at a time,
and keeping each claimed while it is worked on.

Any number of replicas bind the same pull consumer; JetStream hands each message to one of them
and redelivers it if that replica dies before acking, so adding or killing replicas loses
nothing. A message is one intent alone or a batch of them (``IntentBatch``, issue 44). A replica
fetches only as many messages as it can start at once (one after a batch): the rest stay in the
stream for the other replicas. A batch is acknowledged once each of its intents is done
(``BatchRun``); an intent of it that must be retried is retried here, after its delay, not by a
redelivery of the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from services.common import bus

log = logging.getLogger("driftbus.applier")


class InFlight:
    """The intents being handled: at most ``size`` at once, and how many more could start now."""

    def __init__(self, size: int, stopping: asyncio.Event | None = None) -> None:
        if size < 0:
            raise ValueError(f"concurrency must be 0 or more, not {size}")
        self.stopping = stopping
        """Set: nothing more starts (``start`` returns False)."""
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

    async def start(self, work: Coroutine[Any, Any, None], name: str) -> bool:
        """Start ``work`` as soon as a slot is free; False (and ``work`` dropped) if the
        replica is stopping first."""
        await self.at_least(1, self.stopping)
        if self.stopping is not None and self.stopping.is_set():
            work.close()
            return False
        self.free -= 1
        task = asyncio.create_task(work, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return True

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        _log_failure(task)
        self.free += 1
        self._freed.set()


IDLE_WAIT = 30.0
"""Seconds one pull request waits for an intent once a fetch found none. The server answers it
as soon as an intent is queued, so this costs no latency; it is what a quiet cluster's
applier costs the bus: a request every 30 s instead of one a second (at 1,000 clusters, 1,000
requests a second to nats-server for nothing)."""


def fetch_size(concurrency: int) -> int:
    """Free slots a replica waits for before it fetches again: a quarter of its concurrency,
    so one fetch request brings several intents instead of one per finished apply, while the
    slots that stay busy keep the API server fed."""
    return max(1, concurrency // 4)


Dispatch = Callable[[bus.Message, InFlight], Coroutine[Any, Any, bool]]
"""Starts the intents of one message (waiting for slots); True when it was a batch."""


async def consume(
    js: bus.JetStream,
    *,
    cluster: str,
    concurrency: int,
    ack_wait: float,
    max_deliver: int,
    dispatch: Dispatch,
    stopping: asyncio.Event,
    bound: asyncio.Event,
    runs: set[BatchRun],
) -> None:
    """Bind the cluster's intent consumer and hand its messages to ``dispatch`` until
    ``stopping`` is set; then finish what was started (anything not started stays in the
    stream, and a batch not done goes back to it)."""
    queue = await bus.bind_intents(
        js, cluster, bus.IntentConsumerSettings(ack_wait=ack_wait, max_deliver=max_deliver)
    )
    bound.set()
    inflight = InFlight(concurrency, stopping)
    wanted = fetch_size(concurrency)
    batches = True  # until a lone intent comes: one message may be 32 intents
    quiet = False  # the last fetch found nothing
    while not stopping.is_set():
        await inflight.at_least(wanted, stopping)
        if stopping.is_set():
            break
        try:
            if quiet:  # one request waits for the next intent, answered as it is queued
                msgs = await queue.wait(longest=IDLE_WAIT, stopping=stopping)
            else:  # fetch only what we can start now: one batch, or as many lone intents
                msgs = await queue.fetch(1 if batches else max(1, inflight.free), timeout=1.0)
        except Exception:  # a broken connection must not end the replica: log, retry
            log.exception("fetching intents failed; retrying")
            await asyncio.sleep(1.0)
            continue
        quiet = not msgs
        # each is kept claimed from now on: a batch fetched among lone intents may wait for
        # slots longer than ack_wait (then its run, or the intent's handler, keeps it claimed)
        waiting = [asyncio.create_task(keep_claimed(m, ack_wait=ack_wait)) for m in msgs]
        for msg, claimed in zip(msgs, waiting, strict=True):
            try:
                batches = await dispatch(msg, inflight)
            except Exception:
                log.exception("starting the intents of %s failed", msg.subject)
            finally:
                claimed.cancel()
    # SIGTERM: finish what was started; anything not started stays in the stream.
    if inflight.tasks:
        await asyncio.wait(inflight.tasks, timeout=ack_wait / 2)
    for run in list(runs):
        await run.abandon()
    await queue.close()


@dataclasses.dataclass(eq=False)
class BatchRun:
    """One batch message being carried out: acknowledged when each of its ``left`` intents is
    done, kept claimed until then."""

    msg: bus.Message
    left: int
    inflight: InFlight
    runs: set[BatchRun]
    ack_wait: float
    _claim: asyncio.Task[None] | None = None
    _timers: set[asyncio.TimerHandle] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        self.runs.add(self)
        self._claim = asyncio.create_task(keep_claimed(self.msg, ack_wait=self.ack_wait))

    @property
    def running(self) -> bool:
        """Not abandoned (it went back to the stream): its intents may still start."""
        return self in self.runs

    async def one_done(self) -> None:
        """One intent of the batch is done (its fact durable); the last one acks the batch."""
        self.left -= 1
        if self.left == 0 and self.running:  # (an abandoned one went back to the stream)
            self._end()
            await bus.ack(self.msg)

    def later(self, delay: float, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start ``work`` again after ``delay`` seconds, in a free slot (a retry)."""
        loop = asyncio.get_running_loop()

        def restart() -> None:
            self._timers.discard(timer)
            if self.running:
                task = asyncio.create_task(self.inflight.start(work(), self.msg.subject))
                task.add_done_callback(_log_failure)

        timer = loop.call_later(delay, restart)
        self._timers.add(timer)

    async def abandon(self) -> None:
        """The batch goes back to the stream at once (the replica is stopping, or an intent of
        it crashed); once only. Its intents done here are done again when it comes back: a
        replica that reported one recognises it, another applies its manifest again."""
        if not self.running:
            return
        self._end()
        with contextlib.suppress(Exception):
            await bus.nak(self.msg, delay=0)

    def _end(self) -> None:
        self.runs.discard(self)
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._claim is not None:
            self._claim.cancel()


@dataclasses.dataclass(eq=False)
class Claim:
    """One intent as this replica holds it: alone in its message, or item ``index`` of a batch."""

    msg: bus.Message
    index: int = -1
    run: BatchRun | None = None
    trace: dict[str, str] | None = None
    """The trace context it was decided in (a retry continues that trace)."""
    retries: int = 0
    """Retries of a batch's intent here (a lone intent's are redeliveries)."""

    @property
    def seq(self) -> int:
        """The stream sequence of its message (its batch's, for an intent in a batch)."""
        return bus.stream_sequence(self.msg)

    @property
    def attempt(self) -> int:
        return self.msg.metadata.num_delivered + self.retries

    @property
    def redelivered(self) -> bool:
        return self.msg.metadata.num_delivered > 1

    @property
    def ident(self) -> tuple[int, int]:
        """Its identity across redeliveries: (stream sequence, place in its batch)."""
        return self.seq, self.index

    @property
    def stamp(self) -> str:
        """Its identity as text, for message ids."""
        return f"{self.seq}" if self.index < 0 else f"{self.seq}.{self.index}"

    async def done(self) -> None:
        """Its fact is durable: ack it (or count it done in its batch)."""
        if self.run is None:
            await bus.ack(self.msg)
        else:
            await self.run.one_done()


async def keep_claimed(msg: bus.Message, *, ack_wait: float) -> None:
    """Tell NATS the intent is still being worked on, so a short ack_wait redelivers the
    work of a dead replica quickly without redelivering a slow but live apply."""
    while True:
        await asyncio.sleep(ack_wait / 3)
        with contextlib.suppress(Exception):  # a lost signal only risks a redelivery
            await bus.in_progress(msg)


def _log_failure(task: asyncio.Task[Any]) -> None:
    """An intent whose handling crashed stays unacked (it is redelivered); never silent."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("handling intent %s failed: %s: %s", task.get_name(), type(exc).__name__, exc)
