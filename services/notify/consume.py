"""Following the bus: what each message of the three followed streams is sent as, and by which
replica, across restarts.

Each stream (bundle statuses, planner decisions, rollout transitions) is read two ways:

- a *view*: every replica reads every message, in the stream's order, and decides what it is
  sent as (``Notifier.decide``: match, then the gate at the message's own time). The gate's
  memory is thus the same in every replica: whichever replica gets a message decides as any
  other would have, so a phase sent by one replica is not sent again by another;
- a *durable consumer* the replicas share (``bus.NOTIFY_CONSUMERS``): each message goes to one
  replica, which sends what the view decided for it, and acknowledges it once every send is
  over (delivered, refused, given up on or dropped). What was published while no replica ran
  stays in the consumer and is sent when one starts, unless older than ``max_age``; a replica
  that dies mid-send leaves its messages unacknowledged, delivered again (to it or another) after
  the consumer's ``ack_wait``, ``max_deliver`` times at most.

At start, a replica's view begins after the consumer's ack floor (everything before was
handled); the bundle statuses before it are replayed, last per bundle, only to learn the phase
each provider was last told (``Notifier.handle``, not live).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any, Final

from schemas.codec import WireError, decision_records, decode
from schemas.fleet import RolloutEvent
from schemas.messages import BundleStatus
from services.common import bus
from services.notify import events
from services.notify.notifier import LabelCache, Notifier, Send

log = logging.getLogger(__name__)
KEPT: Final = 100_000
"""Decisions of a view kept for messages the consumer has not delivered here (yet)."""
VIEW_WAIT: Final = 60.0
"""Seconds a delivered message waits for the view to reach it before it is given back."""


def events_of(stream: str, msg: bus.Message) -> list[events.Event]:
    """The events a message of ``stream`` is, in order (a batch of decision records may be
    several; none: nothing to notify, or unreadable, logged)."""
    try:
        if stream == bus.STATUS:
            found = [events.from_bundle_status(decode(msg.data, BundleStatus))]
        elif stream == bus.DECISIONS:
            found = [events.from_decision(r) for r in decision_records(msg.subject, msg.data)]
        else:
            found = [events.from_rollout(decode(msg.data, RolloutEvent))]
    except WireError as exc:
        log.warning("ignoring an unreadable message on %s: %s", msg.subject, exc)
        return []
    return [e for e in found if e is not None]


@dataclasses.dataclass(frozen=True)
class Decided:
    sends: tuple[tuple[events.Event, tuple[Send, ...]], ...]
    """Each event of the message that sends something, with what it sends."""


class Decisions:
    """What the view decided per stream sequence, until the replica that gets it takes it."""

    def __init__(self) -> None:
        self._by_seq: collections.OrderedDict[int, Decided] = collections.OrderedDict()
        self.last = 0
        self._moved = asyncio.Condition()

    async def put(self, seq: int, decided: Decided | None) -> None:
        if decided is not None:
            self._by_seq[seq] = decided
            while len(self._by_seq) > KEPT:
                self._by_seq.popitem(last=False)
        async with self._moved:
            self.last = max(self.last, seq)
            self._moved.notify_all()

    async def take(self, seq: int, within: float) -> Decided | None:
        """What to send for message ``seq`` (None: nothing), once the view reached it;
        TimeoutError if it did not within ``within`` seconds."""
        async with self._moved:
            await asyncio.wait_for(self._moved.wait_for(lambda: self.last >= seq), within)
        return self._by_seq.pop(seq, None)


async def _set_when(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def learn_phases(js: bus.JetStream, n: Notifier, labels: LabelCache, floor: int) -> None:
    """Replay the last status of every bundle up to ``floor`` (handled by an earlier life):
    each provider's last phase is learnt, nothing is sent."""
    subject = bus.NOTIFY_CONSUMERS[bus.STATUS][1]
    async for msg in bus.Follower(js, bus.STATUS, subject).snapshot():
        if bus.stream_sequence(msg) > floor:
            continue
        for event in events_of(bus.STATUS, msg):
            if n.needs_labels():
                await labels.refresh(event.where)
            n.handle(event, live=False)


async def view(
    js: bus.JetStream,
    n: Notifier,
    labels: LabelCache,
    stream: str,
    floor: int,
    decisions: Decisions,
    following: asyncio.Event,
) -> None:
    """Decide every message of ``stream`` after ``floor``, in order, for ever."""
    subject = bus.NOTIFY_CONSUMERS[stream][1]
    follower = bus.Follower(js, stream, subject, start_seq=floor + 1, last_per_subject=False)
    watching = asyncio.create_task(_set_when(follower.caught_up, following))
    try:
        async for msg in follower.messages():
            decided = []
            for event in events_of(stream, msg):
                if n.needs_labels():
                    await labels.refresh(event.where)
                if sends := n.decide(event, bus.published_at(msg).timestamp()):
                    decided.append((event, tuple(sends)))
            await decisions.put(
                bus.stream_sequence(msg), Decided(tuple(decided)) if decided else None
            )
    finally:
        watching.cancel()


async def _ack(msg: bus.Message) -> None:
    """Acknowledge; an ack lost (the bus away) only means the message comes again."""
    with contextlib.suppress(bus.NatsError):
        await bus.ack(msg)


class Worker:
    """This replica's share of a durable consumer: send what the view decided, acknowledge."""

    def __init__(
        self,
        n: Notifier,
        stream: str,
        decisions: Decisions,
        *,
        max_age: float,
        ack_wait: float,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._n, self._stream, self._decisions = n, stream, decisions
        self._max_age, self._ack_wait, self._clock = max_age, ack_wait, clock
        self.pending: dict[int, bus.Message] = {}
        self._acks: set[asyncio.Task[Any]] = set()

    async def run(self, queue: bus.WorkQueue) -> None:
        keeping = asyncio.create_task(self._keep_alive())
        try:
            while True:
                try:
                    msgs = await queue.fetch(64, timeout=5.0)
                except bus.NatsError as exc:  # the bus away for a moment: not the end
                    log.warning("%s: NATS did not answer (%s)", self._stream, type(exc).__name__)
                    await asyncio.sleep(1.0)
                    continue
                for msg in msgs:
                    await self.handle(msg)
        finally:
            keeping.cancel()
            await queue.close()

    async def handle(self, msg: bus.Message) -> None:
        seq = bus.stream_sequence(msg)
        try:
            decided = await self._decisions.take(seq, VIEW_WAIT)
        except TimeoutError:
            log.warning("%s message %d: not decided yet, given back", self._stream, seq)
            with contextlib.suppress(bus.NatsError):
                await bus.nak(msg, delay=5.0)
            return
        if decided is None:
            await _ack(msg)
            return
        age = (self._clock() - bus.published_at(msg)).total_seconds()
        if age > self._max_age:
            log.warning(
                "notification not sent: older than its age limit",
                extra={
                    "event": decided.sends[0][0].title(),
                    "age": round(age),
                    "max_age": self._max_age,
                },
            )
            await _ack(msg)
            return
        self.pending[seq] = msg
        left = [len(decided.sends)]

        def one_done() -> None:  # the message is acked once every event of it is sent
            left[0] -= 1
            if left[0] == 0:
                self._done(seq)

        for event, sends in decided.sends:
            self._n.dispatch(event, sends, one_done)

    def _done(self, seq: int) -> None:
        msg = self.pending.pop(seq, None)
        if msg is not None:
            task = asyncio.create_task(_ack(msg))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)

    async def _keep_alive(self) -> None:
        """Messages still being sent (retries, a queue) are not delivered again meanwhile."""
        while True:
            await asyncio.sleep(self._ack_wait / 3)
            for msg in list(self.pending.values()):
                with contextlib.suppress(Exception):
                    await bus.in_progress(msg)


async def follow(
    js: bus.JetStream,
    n: Notifier,
    labels: LabelCache,
    stream: str,
    following: asyncio.Event,
    consumer: bus.DurableSettings,
    max_age: float,
) -> None:
    """Follow ``stream`` for ever: its view, and this replica's share of its consumer."""
    name, subject = bus.NOTIFY_CONSUMERS[stream]
    floor = await bus.ensure_durable(js, stream, name, subject, consumer)
    if stream == bus.STATUS:
        await learn_phases(js, n, labels, floor)
    decisions = Decisions()
    worker = Worker(n, stream, decisions, max_age=max_age, ack_wait=consumer.ack_wait)
    views = asyncio.create_task(view(js, n, labels, stream, floor, decisions, following))
    try:
        await asyncio.gather(views, worker.run(await bus.bind_durable(js, stream, name)))
    finally:
        views.cancel()
