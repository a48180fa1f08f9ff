"""``driftbus notify``: follow the bus and tell the providers of every configuration what their
alerts ask for.

It follows the configurations (the ``driftbus-notify`` bucket) and the tenant policy (what the
platform's commit statuses may be posted on for a tenant's bundle) first, then three streams:
bundle statuses (``driftbus.status.*.*.*.bundle``), planner decisions (drift corrections) and
rollout transitions, each through a durable consumer its replicas share (``consume``): what was
published while the service was down is sent when it is back (within ``--max-age``), and two
replicas send each message once. Each event is matched against every configuration's alerts
(``match``; a tenant's configuration only ever sees its own bundles), passed through the
configuration's gate (``gate``: de-duplication, rate limits), rendered for the provider
(``render``, with its secrets read from their files then) and queued to the provider's outbox
(``send``: retries with backoff), through its owner's share of connections and queue
(``shares``: one tenant's slow receivers never hold up another's).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import aiohttp

from services.common import bus, telemetry
from services.common.settings import setting
from services.notify import config, consume, egress, rights, store
from services.notify.notifier import LabelCache, Notifier
from services.notify.send import RetryPolicy
from services.notify.shares import Shares
from services.stored.bucket import removed

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class NotifySettings(telemetry.TelemetrySettings, bus.NatsSettings):
    retries: int = setting(
        5,
        "tries per message (the first included) on 5xx, 429, no answer",
        env="DRIFTBUS_NOTIFY_RETRIES",
    )
    retry_base: float = setting(
        1.0,
        "seconds before the second try; doubled for each next",
        env="DRIFTBUS_NOTIFY_RETRY_BASE",
    )
    retry_cap: float = setting(
        60.0,
        "the longest wait between two tries (a 429's up to 300)",
        env="DRIFTBUS_NOTIFY_RETRY_CAP",
    )
    http_timeout: float = setting(
        10.0,
        "seconds one request to a provider may take",
        env="DRIFTBUS_NOTIFY_HTTP_TIMEOUT",
    )
    secrets_dir: str = setting(
        "/etc/driftbus/notify",
        "where tenants' secret files are: a tenant's configuration names files relative to "
        "tenants/TENANT/ in it, and reads nothing outside",
        env="DRIFTBUS_NOTIFY_SECRETS_DIR",
    )
    tenant_egress: tuple[str, ...] = setting(
        (),
        "what a tenant's providers may reach besides public addresses: CIDRs (10.20.0.0/16) "
        "or host name globs (*.corp.example), comma-separated; by default only public "
        "addresses (never the cluster's, the bus's or a metadata endpoint)",
        env="DRIFTBUS_NOTIFY_TENANT_EGRESS",
    )
    tenant_connections: int = setting(
        10,
        "connections one tenant's notifications may hold open at once (each tenant has its own; "
        "the platform's configuration has 100)",
        env="DRIFTBUS_NOTIFY_TENANT_CONNECTIONS",
    )
    tenant_queue: int = setting(
        1000,
        "messages one tenant's notifications may have waiting to be sent, over all its "
        "providers; beyond that they are dropped (and logged)",
        env="DRIFTBUS_NOTIFY_TENANT_QUEUE",
    )
    max_age: float = setting(
        3600.0,
        "seconds after its publication an event is still sent (one published while the service "
        "was down, sent when it is back): older ones are dropped, and logged",
        env="DRIFTBUS_NOTIFY_MAX_AGE",
    )
    ack_wait: float = setting(
        60.0,
        "seconds a replica that stopped answering holds a message before the bus gives it to "
        "another (or to it, restarted)",
        env="DRIFTBUS_NOTIFY_ACK_WAIT",
    )


async def follow_configs(js: bus.JetStream, n: Notifier, ready: asyncio.Event) -> None:
    follower = bus.Follower(js, store.STREAM, store.SUBJECTS + ">")
    watching = asyncio.create_task(_set_when(follower.caught_up, ready))
    try:
        async for msg in follower.messages():
            key = store.key_of_message(msg)
            if removed(msg):
                n.configure(key, None)
                continue
            try:
                n.configure(key, config.decode_stored(msg.data or b"", key))
            except config.ConfigError as exc:
                log.error("notifications %s not in force: %s", key, exc)
                n.configure(key, None)  # the closed side: nothing sent on a broken one
    finally:
        watching.cancel()


async def _set_when(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()


async def _all_set(*events: asyncio.Event) -> None:
    for e in events:
        await e.wait()


async def run(settings: NotifySettings) -> None:
    telemetry.setup("notify", settings)
    health = telemetry.Health()
    nc = await bus.connect(settings, name="driftbus-notify", inbox=bus.inbox_prefix("notify"))
    js = nc.jetstream()
    health.add("nats connected", lambda: nc.is_connected)
    runner = await telemetry.serve(settings.http_port, health)
    policy = RetryPolicy(settings.retries, settings.retry_base, settings.retry_cap)
    session = aiohttp.ClientSession()
    allow = egress.Allowance(settings.tenant_egress)

    def tenant_session() -> aiohttp.ClientSession:
        return aiohttp.ClientSession(**egress.session_kwargs(allow, settings.tenant_connections))

    labels = LabelCache(js)
    n = Notifier(
        session=session,
        policy=policy,
        timeout=settings.http_timeout,
        labels=labels,
        secrets_dir=Path(settings.secrets_dir),
        tenant_egress=allow,
        shares=Shares(session, tenant_session, tenant_queued=settings.tenant_queue),
    )
    consumer = bus.DurableSettings(ack_wait=settings.ack_wait)
    ready = asyncio.Event()
    health.add("notifications read", ready.is_set)
    try:
        await bus.ensure_streams(js, manage=False)  # the planner creates them
        await bus.wait_for_stream(js, store.STREAM)  # and its bucket, right after
        known = asyncio.Event()
        configs = asyncio.create_task(follow_configs(js, n, ready))
        tenants = asyncio.create_task(rights.follow_policy(js, n, known))
        waiting = asyncio.create_task(_all_set(ready, known))
        await asyncio.wait({configs, tenants, waiting}, return_when=asyncio.FIRST_COMPLETED)
        for ended in (configs, tenants):
            if ended.done():
                waiting.cancel()
                await ended  # it ended: its error says why
        log.info("following", extra={"configurations": sorted(n.configured)})
        following = {s: asyncio.Event() for s in (bus.STATUS, bus.DECISIONS, bus.ROLLOUTS)}
        health.add("streams followed", lambda: all(e.is_set() for e in following.values()))
        streams = [
            consume.follow(js, n, labels, s, e, consumer, settings.max_age)
            for s, e in following.items()
        ]
        await asyncio.gather(configs, tenants, *streams)
    finally:
        await n.close()
        await session.close()
        if runner is not None:
            await runner.cleanup()
        await nc.drain()
