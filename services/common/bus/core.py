"""The plain calls, one request each: core NATS (a request, a subscription, answering the
requests of a subject) and the JetStream calls a caller makes once (a publish awaited for its
ack, the subjects a stream holds). Here so that timeouts, retries and (later) batching are
decided in one place, not at each caller (DESIGN §12, issue 33).

Each does exactly the call it names, with the caller's timeout or else the client's default,
and raises what the client raises (``NatsTimeout``, ``NatsError``, ``ApiError``, ...).
Bounded, deduplicated, retried publishing is ``Publisher``'s.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js import JetStreamContext
from nats.js.api import PubAck
from nats.nuid import NUID

Subscription = NatsSubscription
"""A live subscription (``subscribe``), ended by ``unsubscribe``."""
Handler = Callable[[Msg], Awaitable[None]]
"""What a subscription calls with each message."""
Answer = Callable[[Msg], Awaitable[bytes]]
"""What ``serve`` calls with each request: the reply's payload."""


async def request(
    nc: Client,
    subject: str,
    data: bytes,
    *,
    timeout: float,  # noqa: ASYNC109 - the client's own wait: NatsTimeout, as callers catch
) -> Msg:
    """Ask on ``subject`` and wait ``timeout`` seconds for the first answer (``NatsTimeout``;
    ``NatsError`` when nobody listens)."""
    return await nc.request(subject, data, timeout=timeout)


async def subscribe(
    nc: Client, subject: str, cb: Handler, *, unbounded: bool = False
) -> Subscription:
    """Call ``cb`` with each live message on ``subject`` (a filter). ``unbounded``: no limit on
    what waits for ``cb`` (a slow terminal must not make the client drop messages); otherwise
    the client's limits."""
    if unbounded:
        return await nc.subscribe(subject, cb=cb, pending_msgs_limit=-1, pending_bytes_limit=-1)
    return await nc.subscribe(subject, cb=cb)


async def unsubscribe(sub: Subscription) -> None:
    """End a subscription (what it delivered stays delivered)."""
    await sub.unsubscribe()


async def serve(nc: Client, subject: str, *, queue: str, answer: Answer) -> None:
    """Answer each request on ``subject`` with ``answer(msg)``, until cancelled. In the queue
    group ``queue`` one member answers each request; a reply that cannot be sent (the requester
    gave up) is dropped, and the subscription always ends with the call."""
    sub = await nc.subscribe(subject, queue=queue)
    try:
        async for msg in sub.messages:
            data = await answer(msg)
            if msg.reply:
                with contextlib.suppress(Exception):
                    await nc.publish(msg.reply, data)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def publish(
    js: JetStreamContext, subject: str, data: bytes, *, headers: dict[str, str] | None = None
) -> PubAck:
    """One JetStream publish, awaited for its ack within the context's timeout; not retried
    (the caller says what a failure means: reported, or best effort)."""
    return await js.publish(subject, data, headers=headers)


async def last_sequence(js: JetStreamContext, stream: str) -> int:
    """The sequence of the last message ``stream`` holds (0: none; ``StreamMissing`` before the
    stream exists)."""
    info = await js.stream_info(stream)
    return int(info.state.last_seq or 0) if info.state else 0


_IDS = NUID()
# A process forked after this import (a pre-forking server, the test suite's warm starts)
# would otherwise hand out the ids its parent and its siblings do: a batch subject is also the
# message's Nats-Msg-Id, and JetStream drops a repeated one as a duplicate, so a second
# applier's reports vanished as the first one's.
os.register_at_fork(after_in_child=_IDS.randomize_prefix)


def unique_id() -> str:
    """A new id unique across processes (22 characters, ``[0-9A-Za-z]``): a batch's subject."""
    return _IDS.next().decode()


async def purge_below(js: JetStreamContext, stream: str, subjects: str, seq: int) -> None:
    """Remove the messages of ``stream`` on ``subjects`` whose sequence is below ``seq``."""
    if seq > 1:
        await js.purge_stream(stream, seq=seq, subject=subjects)


async def stream_subjects(js: JetStreamContext, stream: str, subjects: str) -> dict[str, int]:
    """The subjects of ``stream`` matching the filter ``subjects``, each with its message count
    (``StreamMissing`` before the stream exists)."""
    info = await js.stream_info(stream, subjects_filter=subjects)
    return dict(info.state.subjects or {}) if info.state else {}
