"""A durable pull consumer a service's replicas share: each message of a filter goes to one of
them, is acknowledged once handled, and what was published while none ran waits for them.

The notify service follows statuses, decisions and rollouts this way (docs/notifications.md):
a restarted service sends what happened while it was down, and two replicas each send a share.
Delivery is at least once: a message not acknowledged within ``ack_wait`` (a replica that died
while sending) is delivered again, at most ``max_deliver`` times in all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import BadRequestError, NotFoundError

from services.common.bus.intents import IntentQueue, shared_consumer_config
from services.common.bus.streams import BUS_AWAY, BusError

WorkQueue = IntentQueue
"""A replica bound to a shared durable consumer: ``fetch`` up to n messages, ``close``."""


@dataclasses.dataclass(frozen=True)
class DurableSettings:
    ack_wait: float = 60.0
    """Seconds a delivered message may go unacknowledged (``in_progress`` restarts it) before
    it is delivered again."""
    max_deliver: int = 5
    """Deliveries of one message in all: a message no replica manages is not tried forever."""
    max_ack_pending: int = 20_000
    """Messages delivered and not yet acknowledged, over every replica. Above the tenants'
    queue shares together (the notify service's are 1,000 each), so a few tenants whose
    messages wait on slow receivers do not stop the consumer for everyone."""


def durable_config(name: str, subject: str, s: DurableSettings) -> js_api.ConsumerConfig:
    """The consumer: named and filtered, so nats-py creates it on
    ``$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>``, which permissions can pin; messages
    from its creation on (``NEW``), later ones kept for it until acknowledged."""
    return shared_consumer_config(
        name,
        subject,
        description=f"driftbus {name}",
        deliver_policy=js_api.DeliverPolicy.NEW,
        ack_wait=s.ack_wait,
        max_deliver=s.max_deliver,
        max_ack_pending=s.max_ack_pending,
    )


async def ensure_durable(
    js: JetStreamContext, stream: str, name: str, subject: str, s: DurableSettings
) -> int:
    """Create (or keep, or update) the shared consumer ``name`` of ``stream``; the stream
    sequence below which every message was acknowledged (its ack floor: for a new consumer,
    the stream's last message). A bus away for a moment is waited out, up to two minutes."""
    config = durable_config(name, subject, s)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120.0
    while True:
        try:
            try:
                await js.add_consumer(stream, config=config)
            except BadRequestError:  # it exists with other settings: ours from now on
                await js.update_consumer(stream, config=config)  # type: ignore[attr-defined]
            info = await js.consumer_info(stream, name)
            return int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0
        except BUS_AWAY as exc:
            if loop.time() > deadline:
                raise BusError(f"consumer {name} of {stream} cannot be created: {exc!r}") from None
            await asyncio.sleep(1.0)


async def durables_exist(js: JetStreamContext, consumers: dict[str, tuple[str, str]]) -> bool:
    """Whether every consumer (stream → (name, filter)) exists (False too when NATS does not
    answer, or refuses)."""
    for stream, (name, _) in consumers.items():
        try:
            await js.consumer_info(stream, name, timeout=5)
        except NotFoundError:
            return False
        except BUS_AWAY:
            return False
    return True


async def bind_durable(js: JetStreamContext, stream: str, name: str) -> IntentQueue:
    """Bind the shared consumer (``ensure_durable`` made it)."""
    sub = await js.pull_subscribe_bind(name, stream=stream)
    return IntentQueue(sub, js._nc)


_V1_TOKENS = 9
"""``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>``:
the reply subject nats-server gives a delivered JetStream message (no domain)."""


def _v1_token(msg: Msg, index: int) -> int | None:
    """Token ``index`` of a v1 reply subject as a number, None for any other form. nats-py's
    ``Msg.metadata`` parses every token and builds a datetime and two objects per message:
    a fifth of a fleet plan's time reading 200,000 facts, and a hot spot of the planner's hub."""
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    return int(tokens[index]) if len(tokens) == _V1_TOKENS else None


def stream_sequence(msg: Msg) -> int:
    """The message's sequence in its stream."""
    seq = _v1_token(msg, 5)
    return seq if seq is not None else int(msg.metadata.sequence.stream)


def num_pending(msg: Msg) -> int:
    """How many messages of the consumer's view are still to come after this one."""
    pending = _v1_token(msg, 8)
    return pending if pending is not None else int(msg.metadata.num_pending)


def published_at(msg: Msg) -> dt.datetime:
    """When the stream stored the message (UTC)."""
    at = msg.metadata.timestamp
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def deliveries(msg: Msg) -> int:
    """How many times the message was delivered, this time included."""
    return int(msg.metadata.num_delivered or 1)
