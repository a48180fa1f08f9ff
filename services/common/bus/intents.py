"""The intent work queue: one durable pull consumer per cluster, shared by its appliers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    BadRequestError,
    NotFoundError,
    ServiceUnavailableError,
)

from schemas.subjects import cluster_filter, encode_token
from services.common.bus.streams import INTENTS, BusError

log = logging.getLogger("driftbus.bus")

_RECONNECT_CHECK = 2.0
"""Seconds between looks, during a long wait for an intent, at whether the connection came
back from a disconnection (a look at a counter: no request)."""


@dataclasses.dataclass(frozen=True)
class IntentConsumerSettings:
    ack_wait: float = 60.0
    max_deliver: int = -1
    max_ack_pending: int = 4096


def intent_consumer_name(cluster: str) -> str:
    # consumer names may not contain '.', '*', '>' — the token encoding guarantees that
    return "appliers-" + encode_token(cluster).replace("=", "_")


async def intents_pending(js: JetStreamContext, cluster: str) -> int | None:
    """Messages of intents of ``cluster`` queued or being applied (a batch counts once: the
    planner's ``driftbus_intents_pending`` counts intents); None while there is no consumer yet
    (no applier has started) or NATS does not answer."""
    try:
        info = await js.consumer_info(INTENTS, intent_consumer_name(cluster))
    except (NotFoundError, ServiceUnavailableError, NatsTimeout, TimeoutError):
        return None
    return (info.num_pending or 0) + (info.num_ack_pending or 0)


def shared_consumer_config(
    name: str,
    subject: str,
    *,
    description: str,
    deliver_policy: js_api.DeliverPolicy,
    ack_wait: float,
    max_deliver: int,
    max_ack_pending: int,
) -> js_api.ConsumerConfig:
    """A durable pull consumer that a service's replicas share, acknowledging each message.

    Named and filtered: nats-py then creates it on
    ``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``, which lets NATS permissions pin a
    replica to its own subjects. No consumer backoff: NATS would use its first step as the ack
    deadline of the first delivery, redelivering any message handled slower than that (appliers
    nak with their own delay)."""
    return js_api.ConsumerConfig(
        name=name,
        durable_name=name,
        description=description,
        filter_subject=subject,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        deliver_policy=deliver_policy,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        max_ack_pending=max_ack_pending,
        max_waiting=512,
        replay_policy=js_api.ReplayPolicy.INSTANT,
    )


async def ensure_intent_consumer(
    js: JetStreamContext, cluster: str, s: IntentConsumerSettings
) -> str:
    """The one durable pull consumer per cluster that every applier replica shares."""
    name = intent_consumer_name(cluster)
    config = shared_consumer_config(
        name,
        cluster_filter("intent", cluster),
        description=f"appliers of cluster {cluster}",
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_wait=s.ack_wait,
        max_deliver=s.max_deliver,
        max_ack_pending=s.max_ack_pending,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120.0
    while True:
        try:
            try:
                await js.add_consumer(INTENTS, config=config)
            except BadRequestError:
                await js.update_consumer(INTENTS, config=config)  # type: ignore[attr-defined]
            return name
        except (ServiceUnavailableError, NatsTimeout, TimeoutError) as exc:
            # a NATS cluster still electing the stream's leader: not an error yet
            if loop.time() > deadline:
                raise BusError(f"intent consumer {name} cannot be created: {exc!r}") from None
            await asyncio.sleep(1.0)


class IntentQueue:
    """A replica bound to its cluster's shared intent consumer."""

    def __init__(self, sub: JetStreamContext.PullSubscription, nc: Client) -> None:
        self._sub = sub
        self._nc = nc

    async def fetch(self, n: int, *, timeout: float) -> list[Msg]:  # noqa: ASYNC109
        """Up to ``n`` intents, waiting at most ``timeout`` seconds; none when none came."""
        try:
            msgs = list(await self._sub.fetch(batch=n, timeout=timeout))
        except (NatsTimeout, TimeoutError):  # nats-py raises either when nothing is pending
            return []
        # nats-py hands over whatever it buffered (an abandoned long poll's late deliveries
        # too), which may be more than asked for. Those would wait for a slot with nothing
        # keeping them claimed, and a fresh delivery is trusted to be the object's latest
        # intent (no supersession read): give them back, to be redelivered.
        for extra in msgs[n:]:
            with contextlib.suppress(Exception):
                await extra.nak()
        return msgs[:n]

    async def wait(self, *, longest: float, stopping: asyncio.Event) -> list[Msg]:
        """One intent, waiting up to ``longest`` seconds for it: a single pull request that
        the server answers the moment one is queued, so a quiet cluster costs one request per
        ``longest`` instead of one a second (nats.go's consumers wait 30 s the same way).
        Given up early when ``stopping`` is set, or when the connection came back from a
        disconnection: the server that held the request may have lost it. After an
        unsubscribe the server drops a pending request unanswered (it checks for interest
        before it delivers)."""
        reconnects = self._nc.stats["reconnects"]
        fetch = asyncio.ensure_future(self.fetch(1, timeout=longest))
        stop = asyncio.ensure_future(stopping.wait())
        try:
            while not fetch.done():
                await asyncio.wait({fetch, stop}, timeout=_RECONNECT_CHECK,
                                   return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                if stop.done() or self._nc.stats["reconnects"] != reconnects:
                    break
            if fetch.done():
                return fetch.result()
            fetch.cancel()  # a message it was handed stays buffered: the next fetch takes it
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
            return []
        finally:
            stop.cancel()
            if not fetch.done():  # this wait itself cancelled: no request left behind
                fetch.cancel()

    async def close(self) -> None:
        """nats-py's drain never completes for a pull subscription and waits out its whole
        drain timeout (30 s) on exit: unsubscribe instead (acks need no subscription)."""
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()


async def bind_intents(
    js: JetStreamContext, cluster: str, s: IntentConsumerSettings
) -> IntentQueue:
    """Bind the cluster's intent consumer (made if missing), as every applier replica does."""
    consumer = await ensure_intent_consumer(js, cluster, s)
    sub = await js.pull_subscribe_bind(consumer, stream=INTENTS)
    return IntentQueue(sub, js._nc)  # nats-py's own connection of the context


async def ack(msg: Msg) -> None:
    """Done with the intent; no round trip (a lost ack redelivers, and a redelivery checks
    whether it was carried out)."""
    await msg.ack()


async def nak(msg: Msg, *, delay: float) -> None:
    """Not now: deliver it again after ``delay`` seconds."""
    await msg.nak(delay=delay)


async def term(msg: Msg) -> None:
    """Never again (an intent that cannot be read)."""
    await msg.term()


async def in_progress(msg: Msg) -> None:
    """Still being worked on: restart its ack wait."""
    await msg.in_progress()
