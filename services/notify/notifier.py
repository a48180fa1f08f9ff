"""The configurations in force and what an event makes of them: matched, gated, rendered and
queued to the outbox of each provider it goes to (``Notifier``); clusters' registry labels for
the alerts selecting clusters by label (``LabelCache``).

Two ways in: ``handle`` decides and queues at once (an event seen once); ``decide`` then
``dispatch`` split it for the bus's shared consumers (``consume``): every replica decides every
message, at the message's own time, so all gates remember the same; only the replica the
consumer gave the message to dispatches it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import aiohttp

from schemas.notify import NotifyConfig, Provider
from schemas.tenants import TenantPolicy
from services.clusters import registry
from services.common import bus, telemetry
from services.notify import config, egress, events, match, rights
from services.notify.gate import Gate, Verdict
from services.notify.render import Secrets, render
from services.notify.send import Done, Outbox, RetryPolicy, SecretUnreadable, read_secrets
from services.notify.shares import Shares

log = logging.getLogger(__name__)
_sent = telemetry.meter.create_counter(
    "driftbus_notify_messages", description="notifications by provider type and verdict"
)
LABELS_FOR = 30.0
"""Seconds a cluster's registry labels are used before they are read again."""


@dataclasses.dataclass(frozen=True)
class Send:
    """A message decided: configuration key and provider name."""

    key: str
    provider: str


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
        shares: Shares | None = None,
    ) -> None:
        self._policy, self._timeout = policy, timeout
        self._secrets_dir = secrets_dir
        # each tenant sends through its own share (connections, queue); tenants' requests go
        # through a resolver refusing what they may not reach (egress)
        shared = tenant_session or session
        self._shares = shares or Shares(session, lambda: shared, owned=False)
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
            task = asyncio.create_task(box.drain(self._timeout, retired=True))
            self._retired.add(task)
            task.add_done_callback(self._retired.discard)

    def needs_labels(self) -> bool:
        return any(match.needs_labels(c.config) for c in self.configured.values())

    def _matches(
        self, event: events.Event, refused: list[tuple[str, Verdict]] | None
    ) -> Iterator[tuple[str, Configured, Provider]]:
        """(key, configuration, provider) of every provider ``event`` goes to. A provider the
        tenant's rights refuse (the platform's token on a repository not granted) is left out,
        and noted in ``refused`` (None: not noted, as in the replay at start)."""
        for key, c in list(self.configured.items()):
            providers = {p.name: p for p in c.config.providers}
            for name in match.providers_for(c.config, c.tenant, event, self.labels):
                p = providers[name]
                if render(p, event, Secrets()) is None:
                    continue  # e.g. a commit status of a bundle not published from Git
                if why := match.platform_token_refusal(c.tenant, p, event, self.tenants):
                    if refused is not None:
                        self.refusals.note(f"{key}/{name}", p, event, why)
                        refused.append((f"{key}/{name}", Verdict.REFUSED))
                    continue
                yield key, c, p

    def handle(self, event: events.Event, *, live: bool = True) -> list[tuple[str, Verdict]]:
        """Match, gate, render and queue ``event``; (key/provider, verdict) of each provider it
        went to. Not ``live`` (the replay at start): only learn the phase, send nothing."""
        out: list[tuple[str, Verdict]] = []
        for key, c, p in self._matches(event, out if live else None):
            if not live:
                c.gate.observe(p.name, event)
                continue
            now = self._clock()
            verdict = self._verdict(key, c, p, event, now)
            out.append((f"{key}/{p.name}", verdict))
            if verdict is Verdict.SEND and self._queue_safely(key, c, p, event, None):
                c.gate.record(p.name, event, now)
        return out

    def decide(self, event: events.Event, now: float) -> list[Send]:
        """The providers ``event`` is sent to, counted as sent at ``now`` (the message's time:
        every replica decides the same); nothing is queued (``dispatch``)."""
        out = []
        for key, c, p in self._matches(event, []):
            if self._verdict(key, c, p, event, now) is Verdict.SEND:
                c.gate.record(p.name, event, now)
                out.append(Send(key, p.name))
        return out

    def dispatch(self, event: events.Event, sends: Iterable[Send], done: Done) -> None:
        """Queue ``event`` to each of ``sends`` still in force; ``done`` is called once, when
        every one is over (delivered, refused, given up on, or never queued)."""
        left = [1]

        def one_over() -> None:
            left[0] -= 1
            if left[0] == 0:
                done()

        for s in sends:
            c = self.configured.get(s.key)
            p = next((p for p in c.config.providers if p.name == s.provider), None) if c else None
            if c is None or p is None:
                continue  # removed since: nothing sent for it
            left[0] += 1
            if not self._queue_safely(s.key, c, p, event, one_over):
                one_over()
        one_over()

    def _verdict(
        self, key: str, c: Configured, p: Provider, event: events.Event, now: float
    ) -> Verdict:
        verdict = c.gate.check(p.name, event, now)
        _sent.add(1, {"type": str(p.type), "verdict": str(verdict)})
        if verdict is Verdict.RATE:
            log.warning(
                "notification dropped: rate limit",
                extra={
                    "key": key,
                    "provider": p.name,
                    "event": event.title(),
                    "per_minute": c.config.limits.per_minute,
                    "dropped": c.gate.dropped[(p.name, Verdict.RATE)],
                },
            )
        elif verdict is not Verdict.SEND:
            log.debug("not sent (%s): %s to %s/%s", verdict, event.title(), key, p.name)
        return verdict

    def _queue_safely(
        self, key: str, c: Configured, p: Provider, event: events.Event, done: Done | None
    ) -> bool:
        try:
            return self._queue(c, p, event, done)
        except Exception:  # one configuration's bad entry never stops the service
            log.exception("notification not sent: %s/%s", key, p.name)
            return False

    def _queue(self, c: Configured, p: Provider, event: events.Event, done: Done | None) -> bool:
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
            share = self._shares.of(c.tenant)
            box = c.outboxes[p.name] = Outbox(p, share, self._policy, self._timeout)
        return box.put(req, done)

    async def close(self) -> None:
        boxes = [b for c in self.configured.values() for b in c.outboxes.values()]
        await asyncio.gather(*(b.drain(self._timeout) for b in boxes))
        await asyncio.gather(*self._retired, return_exceptions=True)
        await self._shares.close()


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
