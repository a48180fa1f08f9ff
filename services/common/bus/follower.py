"""Replaying a compacted view (deliver-last-per-subject), then following live messages, telling
when the replay caught up; and reading a subject's last message, a message by its sequence, or
what a stream still keeps of a subject.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    NotFoundError,
)

from services.common.bus.durable import num_pending
from services.common.bus.streams import BUS_AWAY

log = logging.getLogger("driftbus.bus")


IDLE_WAIT = 10.0
"""Seconds a follower waits for its next message before it waits again."""
IDLE_HEARTBEAT = 5.0
"""Seconds between the server's heartbeats to a quiet follower (nats-py's default): two missed
ones and nats-py makes the consumer again (a server restart loses it)."""
QUIET_HEARTBEAT = 30.0
"""The idle heartbeat of a follower there is one of per cluster (a watcher's bundles). An idle
heartbeat costs nats-server far more than a message: 1,000 quiet ordered consumers took 0.03
core at 5 s and 0.0025 at 30 s (a bare nats-server, 2026-11-30). What the heartbeat is there
for — noticing a consumer lost with its server — a follower also notices on its own: after a
reconnection it makes its consumer again within ``IDLE_WAIT`` of quiet."""
CONSUMER_NOT_FOUND = 10014
"""JetStream's error code for a consumer that does not exist (any more)."""


def _consumer_lost(exc: BaseException) -> bool:
    """The consumer just made is gone: the server restarted between its creation and the first
    question about it (an ephemeral consumer does not survive that). Subscribing again is the
    answer; a missing *stream* is another code, and is raised."""
    return isinstance(exc, NotFoundError) and getattr(exc, "err_code", None) == CONSUMER_NOT_FOUND


class Follower:
    """Replay the last message per subject of a filter, then follow live messages.

    ``caught_up`` is set once everything that existed at subscription time was delivered, which
    is when a service may start deciding (the planner) or publishing (the watcher).
    """

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        subject: str,
        *,
        last_per_subject: bool = True,
        idle_heartbeat: float = IDLE_HEARTBEAT,
        history: bool = False,
        headers_only: bool = False,
        since: dt.datetime | None = None,
        start_seq: int | None = None,
        from_now: bool = False,
    ) -> None:
        self._js = js
        self._stream = stream
        self._subject = subject
        # history: every message (an audit log); otherwise the compacted view (last per subject)
        # or, without last_per_subject, only new messages
        # since: every message from that time on (the status page's last hour)
        # start_seq: every message from that stream sequence on
        # from_now: every message after the stream's last one at subscription (a live tap)
        self._from_now = from_now
        self._since = since
        self._start_seq = start_seq
        self._policy = (
            js_api.DeliverPolicy.BY_START_SEQUENCE
            if start_seq is not None
            else js_api.DeliverPolicy.BY_START_TIME
            if since is not None
            else js_api.DeliverPolicy.ALL
            if history
            else js_api.DeliverPolicy.LAST_PER_SUBJECT
            if last_per_subject
            else js_api.DeliverPolicy.NEW
        )
        self._headers_only = headers_only  # subjects and headers, no payloads (cheap to watch)
        self._idle_heartbeat = idle_heartbeat
        self.caught_up = asyncio.Event()
        self._sub: Any = None

    async def _subscribe(self, cb: Callable[[Msg], Any] | None = None) -> Any:
        config = None
        if self._from_now:
            # not DeliverPolicy.NEW: an ordered consumer that is reset before its first message
            # (a missed heartbeat, a server restart) starts again at stream sequence 1 — the
            # whole history — unless it knows where it began
            info = await self._js.stream_info(self._stream)
            self._start_seq = (info.state.last_seq or 0) + 1
            self._policy = js_api.DeliverPolicy.BY_START_SEQUENCE
        if self._start_seq is not None:
            config = js_api.ConsumerConfig(opt_start_seq=max(1, self._start_seq))
        elif self._since is not None:
            config = js_api.ConsumerConfig(opt_start_time=self._since)
        sub = await self._js.subscribe(
            self._subject,
            stream=self._stream,
            ordered_consumer=True,
            deliver_policy=self._policy,
            cb=cb,
            idle_heartbeat=self._idle_heartbeat,
            headers_only=self._headers_only or None,
            config=config,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1024**3,
        )
        jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
        if self._start_seq is not None:
            # where nats-py's ordered consumer resumes after a reset: it counts from 0, the
            # stream's first message, whatever sequence the consumer was asked to start at
            # (tests/integration/test_hub.py resets one and checks nothing old comes again)
            if jsi is None or not hasattr(jsi, "_sseq"):
                log.warning(
                    "following %s: this nats-py does not say where an ordered consumer resumes; "
                    "after a reset it may deliver the stream again from its start",
                    self._subject,
                )
            else:
                jsi._sseq = max(jsi._sseq, self._start_seq - 1)
        return sub

    def _reconnects(self) -> int:
        nc = getattr(self._js, "_nc", None)
        return int(nc.stats.get("reconnects", 0)) if nc is not None else 0

    @staticmethod
    async def _empty(sub: Any) -> bool:
        """True only if the view is empty. A push consumer starts delivering as soon as it
        exists, so ``num_pending == 0`` alone may just mean "all already in our buffer"; the
        view is empty only if nothing was delivered either. Otherwise the message whose own
        metadata says ``num_pending == 0`` is the last one of the view."""
        info = await sub.consumer_info()
        return (info.num_pending or 0) == 0 and (info.delivered.consumer_seq or 0) == 0

    async def _start(
        self, within: float | None, cb: Callable[[Msg], Any] | None = None
    ) -> tuple[Any, bool]:
        """Subscribe, and learn whether the view is empty. A bus away for a moment (a restart,
        a stream electing its leader) is waited out: a service must not die of it, and a
        follower that gave up would leave its service deaf (``within``: seconds, then raise)."""
        loop = asyncio.get_running_loop()
        give_up = None if within is None else loop.time() + within
        delay = 0.2
        while True:
            sub = None
            try:
                sub = await self._subscribe(cb)
                return sub, await self._empty(sub)
            except BaseException as exc:
                # never left subscribed: the consumer would buffer messages nobody reads
                if sub is not None:
                    with contextlib.suppress(Exception):
                        await sub.unsubscribe()
                if not (isinstance(exc, BUS_AWAY) or _consumer_lost(exc)):
                    raise
                if give_up is not None and loop.time() + delay > give_up:
                    raise
                log.warning(
                    "following %s: NATS did not answer (%s); subscribing again in %.1fs",
                    self._subject,
                    type(exc).__name__,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def messages(self) -> AsyncIterator[Msg]:
        """The current view, then live messages, forever; ``caught_up`` marks the boundary."""
        sub, empty = await self._start(None)
        reader = _Reader(sub)
        reconnects = self._reconnects()
        try:
            if empty:
                self.caught_up.set()
            while True:
                try:
                    # a long wait: each one is a task and a timer, and a service follows
                    # several subjects per cluster (a closed connection ends it sooner)
                    msg = await reader.next(IDLE_WAIT)
                except (NatsTimeout, TimeoutError):
                    if (now := self._reconnects()) != reconnects:
                        # quiet since a reconnection: the consumer may have gone with its
                        # server; made again from where it was (harmless if it was not lost)
                        reconnects = now
                        await _resume(sub)
                    continue
                yield msg
                if not self.caught_up.is_set() and num_pending(msg) == 0:
                    self.caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def each(self, handle: Callable[[Msg], None], *, timeout: float = 30.0) -> None:  # noqa: ASYNC109
        """Only the current view, as ``snapshot``, each message handed to ``handle`` as it is
        delivered (no awaited wait per message: a view of hundreds of thousands of messages, a
        fleet's facts, reads several times faster). ``handle`` must not block; what it raises
        is raised here. TimeoutError when no message came for ``timeout`` seconds."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        seen = 0

        async def on_msg(msg: Msg) -> None:
            nonlocal seen
            if done.done():
                return
            seen += 1
            try:
                handle(msg)
            except Exception as exc:  # noqa: BLE001 - the caller's: raised by each()
                done.set_exception(exc)
                return
            if num_pending(msg) == 0:
                done.set_result(None)

        sub, empty = await self._start(timeout, on_msg)
        try:
            last = -1
            while not empty and not done.done():
                if seen == last:
                    raise TimeoutError(f"{self._subject}: no message for {timeout:g}s")
                last = seen
                await asyncio.wait([done], timeout=timeout)
            if done.done():
                done.result()
            self.caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def snapshot(self, *, timeout: float = 30.0) -> AsyncIterator[Msg]:  # noqa: ASYNC109
        """Only the current view (last message per subject), then stop."""
        sub, empty = await self._start(timeout)
        try:
            if not empty:
                reader = _Reader(sub)
                while True:
                    msg = await reader.next(timeout)
                    yield msg
                    if num_pending(msg) == 0:
                        break
            self.caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


TAKEN_IN_A_ROW = 64
"""Messages a follower takes from its buffer before it lets the event loop turn once."""


class _Reader:
    """A subscription's next message: one it has already received is taken at once, and only
    an empty buffer is waited on (``next_msg``).

    nats-py's ``next_msg`` makes a task, a timer and a uuid for every message, and each message
    then costs its reader several turns of the event loop. A planner busy with a fleet rollout
    turns its loop a few times a second, so its followers fell behind: the members' heartbeats
    reached it over 40 s late (sent every 20 s, stale after 60 s, each cluster's watcher read
    as gone between two of them), and the rollout's Ready count fell from 100 to 0 (fleet-sim,
    1,000 clusters, 2026-11-30). What ``next_msg`` does beside waiting is done here
    too: the buffer's byte count, and the reply a JetStream push consumer owes for flow
    control. A nats-py without these internals is waited on as before."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub
        self.inner = getattr(sub, "_sub", sub)  # a JetStream subscription wraps the core one
        self.taken = 0
        """Messages taken from the buffer since the loop last turned."""

    async def next(self, timeout: float) -> Msg:  # noqa: ASYNC109 - nats-py's own timeout
        inner = self.inner
        queue = getattr(inner, "_pending_queue", None)
        jsi = getattr(inner, "_jsi", None)
        if self.taken >= TAKEN_IN_A_ROW:  # a long backlog does not hold the loop
            self.taken = 0
            await asyncio.sleep(0)
        if (
            queue is None
            or queue.empty()
            or not hasattr(inner, "_pending_size")
            or (jsi is not None and not hasattr(jsi, "_fcr"))
        ):
            self.taken = 0
            waited: Msg = await self.sub.next_msg(timeout=timeout)
            return waited
        self.taken += 1
        msg: Msg = queue.get_nowait()
        inner._pending_size -= len(msg.data)
        queue.task_done()
        if jsi is not None:
            jsi._active = True
            if jsi.get_js_delivered() >= jsi._fciseq and (reply := jsi._fcr):
                await inner._conn.publish(reply)
                jsi._fcr = None
        return msg


async def _resume(sub: Any) -> None:
    """Make an ordered consumer again from the stream sequence after its last delivery, as
    nats-py does itself after two missed idle heartbeats."""
    jsi = getattr(getattr(sub, "_sub", None), "_jsi", None)
    if jsi is None or not hasattr(jsi, "reset_ordered_consumer"):
        return  # another nats-py: its own heartbeat check is all there is
    with contextlib.suppress(Exception):  # a bus still away: the next quiet wait tries again
        await jsi.reset_ordered_consumer(jsi._sseq + 1)


async def last_message(
    js: JetStreamContext, stream: str, subject: str
) -> js_api.RawStreamMsg | None:
    try:
        return await js.get_last_msg(stream, subject, direct=True)
    except NotFoundError:
        return None


async def message_at(js: JetStreamContext, stream: str, seq: int) -> js_api.RawStreamMsg | None:
    """The message of ``stream`` at sequence ``seq`` (None: gone, or never there)."""
    try:
        return await js.get_msg(stream, seq, direct=True)
    except NotFoundError:
        return None


async def next_message(
    js: JetStreamContext, stream: str, subject: str, seq: int
) -> js_api.RawStreamMsg | None:
    """The first message of ``stream`` on ``subject`` (a filter: wildcards allowed) at or after
    sequence ``seq``, by one direct get (None: there is none)."""
    try:
        return await js.get_msg(stream, max(1, seq), subject=subject, next=True, direct=True)
    except NotFoundError:
        return None


async def subject_history(
    js: JetStreamContext, stream: str, subject: str, *, upto: int
) -> list[js_api.RawStreamMsg]:
    """Every message ``stream`` still keeps on ``subject`` up to sequence ``upto``, oldest first
    (one direct get each: a stream keeping a few messages per subject costs a few requests)."""
    out: list[js_api.RawStreamMsg] = []
    seq = 1
    while seq <= upto:
        try:
            msg = await js.get_msg(stream, seq, subject=subject, next=True, direct=True)
        except NotFoundError:
            break
        if msg.seq is None or msg.seq > upto:
            break
        out.append(msg)
        seq = msg.seq + 1
    return out
