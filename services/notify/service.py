"""``driftbus notify``: follow the bus and tell the providers of every configuration what their
alerts ask for.

It follows the configurations (the ``driftbus-notify`` bucket) and the tenant policy (what the
platform's commit statuses may be posted on for a tenant's bundle) first, then three streams:
bundle statuses (``driftbus.status.*.*.*.bundle``: their last one per bundle is replayed at
start to learn each bundle's phase without sending it again, then followed live), planner
decisions (drift corrections, from now on) and rollout transitions (from now on). Each event is
matched against every configuration's alerts (``match``; a tenant's configuration only ever
sees its own bundles), passed through the configuration's gate (``gate``: de-duplication, rate
limits), rendered for the provider (``render``, with its secrets read from their files then) and
queued to the provider's outbox (``send``: retries with backoff).

Run one replica: two would each send every message.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path

import aiohttp

from schemas.codec import WireError, decode
from schemas.decision import DecisionRecord
from schemas.fleet import RolloutEvent
from schemas.messages import BundleStatus
from schemas.notify import NotifyConfig, Provider
from schemas.subjects import PREFIX, family_filter
from schemas.tenants import TenantPolicy
from services.common import bus, telemetry
from services.common.settings import setting
from services.fleet import registry
from services.notify import config, egress, events, match, rights, store
from services.notify.gate import Gate, Verdict
from services.notify.render import Secrets, render
from services.notify.send import Outbox, RetryPolicy, SecretUnreadable, read_secrets

log = logging.getLogger(__name__)
_sent = telemetry.meter.create_counter(
    "driftbus_notify_messages", description="notifications by provider type and verdict"
)
LABELS_FOR = 30.0
"""Seconds a cluster's registry labels are used before they are read again."""


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


@dataclasses.dataclass
class Configured:
    """One configuration in force: whose it is, what it says, its gate and outboxes."""

    tenant: str
    config: NotifyConfig
    gate: Gate
    outboxes: dict[str, Outbox] = dataclasses.field(default_factory=dict)


class Notifier:
    """The configurations in force and what an event makes of them."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        policy: RetryPolicy,
        timeout: float,
        labels: match.Labels = lambda _: {},
        clock: Callable[[], float] = time.monotonic,
        secrets_dir: Path | None = None,
        tenant_session: aiohttp.ClientSession | None = None,
        tenant_egress: egress.Allowance | None = None,
    ) -> None:
        self._session, self._policy, self._timeout = session, policy, timeout
        self._secrets_dir = secrets_dir
        # tenants' requests go through a resolver refusing what they may not reach (egress)
        self._tenant_session = tenant_session or session
        self._egress = tenant_egress or egress.Allowance()
        self.labels = labels
        self._clock = clock
        self.configured: dict[str, Configured] = {}
        self.tenants: TenantPolicy | None = None
        """The tenant policy in force (None: not known yet, or unusable: nothing granted)."""
        self.refusals = rights.Refusals(_sent)
        self._retired: set[asyncio.Task[None]] = set()

    def configure(self, key: str, cfg: NotifyConfig | None) -> None:
        """Put ``cfg`` in force under ``key`` (None: remove it). The gate's memory is kept, so
        a re-applied file does not send again what was just sent; an unchanged provider keeps
        its outbox."""
        tenant = config.tenant_of(key)
        old = self.configured.pop(key, None)
        if cfg is None or tenant is None:
            self._retire(old.outboxes.values() if old else ())
            if tenant is None:
                log.warning("ignoring %s: no configuration key (platform, tenant.NAME)", key)
            else:
                log.info("notifications removed", extra={"key": key})
            return
        gate = old.gate if old else Gate(cfg.limits)
        gate.limits = cfg.limits
        now = Configured(tenant, cfg, gate)
        kept = {p.name: p for p in cfg.providers}
        for name, box in (old.outboxes if old else {}).items():
            if kept.get(name) == box.provider:
                now.outboxes[name] = box
            else:
                self._retire([box])
        self.configured[key] = now
        log.info(
            "notifications in force",
            extra={"key": key, "providers": len(cfg.providers), "alerts": len(cfg.alerts)},
        )

    def _retire(self, boxes: Iterable[Outbox]) -> None:
        for box in list(boxes):
            task = asyncio.create_task(box.drain(self._timeout))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    def needs_labels(self) -> bool:
        return any(match.needs_labels(c.config) for c in self.configured.values())

    def handle(self, event: events.Event, *, live: bool = True) -> list[tuple[str, Verdict]]:
        """Match, gate, render and queue ``event``; (key/provider, verdict) of each provider it
        went to. Not ``live`` (the replay at start): only learn the phase, send nothing."""
        out = []
        for key, c in self.configured.items():
            providers = {p.name: p for p in c.config.providers}
            for name in match.providers_for(c.config, c.tenant, event, self.labels):
                p = providers[name]
                if render(p, event, Secrets()) is None:
                    continue  # e.g. a commit status of a bundle not published from Git
                if why := match.platform_token_refusal(c.tenant, p, event, self.tenants):
                    if live:
                        self.refusals.note(f"{key}/{name}", p, event, why)
                        out.append((f"{key}/{name}", Verdict.REFUSED))
                    continue
                if not live:
                    c.gate.observe(name, event)
                    continue
                now = self._clock()
                verdict = c.gate.check(name, event, now)
                _sent.add(1, {"type": str(p.type), "verdict": str(verdict)})
                out.append((f"{key}/{name}", verdict))
                if verdict is Verdict.SEND:
                    try:
                        queued = self._queue(c, p, event)
                    except Exception:  # one configuration's bad entry never stops the service
                        log.exception("notification not sent: %s/%s", key, name)
                        queued = False
                    if queued:
                        c.gate.record(name, event, now)
                elif verdict is Verdict.RATE:
                    log.warning(
                        "notification dropped: rate limit",
                        extra={
                            "key": key,
                            "provider": name,
                            "event": event.title(),
                            "per_minute": c.config.limits.per_minute,
                            "dropped": c.gate.dropped[(name, Verdict.RATE)],
                        },
                    )
                else:
                    log.debug("not sent (%s): %s to %s/%s", verdict, event.title(), key, name)
        return out

    def _queue(self, c: Configured, p: Provider, event: events.Event) -> bool:
        """Read ``p``'s secrets, render and queue; whether the message is on its way."""
        try:
            within: Path | None = None
            if c.tenant:
                if self._secrets_dir is None:
                    raise SecretUnreadable(f"provider {p.name}: no secrets directory for tenants")
                within = self._secrets_dir / "tenants" / c.tenant
            secrets = read_secrets(p, within)
        except SecretUnreadable as exc:
            log.error("notification not sent: %s", exc)
            return False
        req = render(p, event, secrets)
        if req is None:
            return False
        if c.tenant and (problem := egress.literal_refusal(req.url, self._egress)):
            log.error(
                "notification not sent",
                extra={"tenant": c.tenant, "to": req.what, "why": problem},
            )
            return False
        box = c.outboxes.get(p.name)
        if box is None:
            session = self._tenant_session if c.tenant else self._session
            box = c.outboxes[p.name] = Outbox(p, session, self._policy, self._timeout)
        return box.put(req)

    async def close(self) -> None:
        boxes = [b for c in self.configured.values() for b in c.outboxes.values()]
        await asyncio.gather(*(b.drain(self._timeout) for b in boxes))
        await asyncio.gather(*self._retired, return_exceptions=True)


class LabelCache:
    """Clusters' registry labels, read on demand and kept ``LABELS_FOR`` seconds."""

    def __init__(self, js: bus.JetStream) -> None:
        self._js = js
        self._labels: dict[str, tuple[float, dict[str, str] | None]] = {}

    def __call__(self, cluster: str) -> Mapping[str, str] | None:
        return self._labels.get(cluster, (0.0, None))[1]

    async def refresh(self, clusters: tuple[str, ...]) -> None:
        now = time.monotonic()
        for c in clusters:
            if now - self._labels.get(c, (-LABELS_FOR, None))[0] >= LABELS_FOR:
                try:
                    self._labels[c] = (now, await registry.labels_of(self._js, c))
                except (bus.NatsError, bus.NatsTimeout, TimeoutError) as exc:
                    log.warning("labels of cluster %s not read: %s", c, exc)


async def follow_configs(js: bus.JetStream, n: Notifier, ready: asyncio.Event) -> None:
    follower = bus.Follower(js, store.STREAM, store.SUBJECTS + ">")
    watching = asyncio.create_task(_set_when(follower.caught_up, ready))
    try:
        async for msg in follower.messages():
            key = store.key_of_message(msg)
            if store.removed(msg):
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


async def _events(
    js: bus.JetStream, stream: str, subject: str, *, replay: bool, following: asyncio.Event
) -> AsyncIterator[tuple[events.Event, bool]]:
    """(event, live) of every message of ``subject``; ``replay``: the last per subject first
    (not live), else only new messages. ``following`` is set once the replay is done."""
    follower = bus.Follower(js, stream, subject, last_per_subject=replay)
    watching = asyncio.create_task(_set_when(follower.caught_up, following))
    try:
        async for item in _decoded(follower, stream):
            yield item
    finally:
        watching.cancel()


async def _decoded(follower: bus.Follower, stream: str) -> AsyncIterator[tuple[events.Event, bool]]:
    async for msg in follower.messages():
        live = follower.caught_up.is_set()
        try:
            if stream == bus.STATUS:
                event = events.from_bundle_status(decode(msg.data, BundleStatus))
            elif stream == bus.DECISIONS:
                event = events.from_decision(decode(msg.data, DecisionRecord))
            else:
                event = events.from_rollout(decode(msg.data, RolloutEvent))
        except WireError as exc:
            log.warning("ignoring an unreadable message on %s: %s", msg.subject, exc)
            continue
        if event is not None:
            yield event, live


async def follow(
    js: bus.JetStream,
    n: Notifier,
    labels: LabelCache,
    stream: str,
    following: asyncio.Event,
) -> None:
    subject, replay = {
        bus.STATUS: (f"{PREFIX}.status.*.*.*.bundle", True),
        bus.DECISIONS: (family_filter("decision"), False),
        bus.ROLLOUTS: (family_filter("rollout"), False),
    }[stream]
    async for event, live in _events(js, stream, subject, replay=replay, following=following):
        if n.needs_labels():
            await labels.refresh(event.where)
        n.handle(event, live=live)


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
    tenant_session = aiohttp.ClientSession(**egress.session_kwargs(allow))
    labels = LabelCache(js)
    n = Notifier(
        session=session,
        policy=policy,
        timeout=settings.http_timeout,
        labels=labels,
        secrets_dir=Path(settings.secrets_dir),
        tenant_session=tenant_session,
        tenant_egress=allow,
    )
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
        streams = [follow(js, n, labels, s, e) for s, e in following.items()]
        await asyncio.gather(configs, tenants, *streams)
    finally:
        await n.close()
        await session.close()
        await tenant_session.close()
        if runner is not None:
            await runner.cleanup()
        await nc.drain()
