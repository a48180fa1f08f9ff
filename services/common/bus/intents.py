"""The intent work queue: one durable pull consumer per cluster, shared by its appliers."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

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


@dataclasses.dataclass(frozen=True)
class IntentConsumerSettings:
    ack_wait: float = 60.0
    max_deliver: int = -1
    max_ack_pending: int = 4096


def intent_consumer_name(cluster: str) -> str:
    # consumer names may not contain '.', '*', '>' — the token encoding guarantees that
    return "appliers-" + encode_token(cluster).replace("=", "_")


async def intents_pending(js: JetStreamContext, cluster: str) -> int | None:
    """Intents of ``cluster`` queued or being applied (the autoscaling signal); None while
    there is no consumer yet (no applier has started) or NATS does not answer."""
    try:
        info = await js.consumer_info(INTENTS, intent_consumer_name(cluster))
    except (NotFoundError, ServiceUnavailableError, NatsTimeout, TimeoutError):
        return None
    return (info.num_pending or 0) + (info.num_ack_pending or 0)


async def ensure_intent_consumer(
    js: JetStreamContext, cluster: str, s: IntentConsumerSettings
) -> str:
    """The one durable pull consumer per cluster that every applier replica shares."""
    name = intent_consumer_name(cluster)
    config = js_api.ConsumerConfig(
        # name + filter: nats-py then creates it on $JS.API.CONSUMER.CREATE.<stream>.<name>.
        # <filter>, which lets NATS permissions pin an applier to its own cluster's intents
        name=name,
        durable_name=name,
        description=f"appliers of cluster {cluster}",
        filter_subject=cluster_filter("intent", cluster),
        ack_policy=js_api.AckPolicy.EXPLICIT,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_wait=s.ack_wait,
        max_deliver=s.max_deliver,
        # No consumer backoff: NATS would use its first step as the ack deadline of the first
        # delivery, redelivering any apply slower than that. Appliers nak with their own delay.
        max_ack_pending=s.max_ack_pending,
        max_waiting=512,
        replay_policy=js_api.ReplayPolicy.INSTANT,
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
