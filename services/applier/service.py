"""The applier process: server-side apply of intents from the cluster's shared durable consumer.

Any number of replicas bind the same pull consumer; JetStream hands each intent to one of them
and redelivers it if that replica dies before acking, so adding or killing replicas loses
nothing. Per intent:

1. drop it if superseded (a newer intent for the object replaced it on the subject);
2. server-side apply (``fieldManager=driftbus``) or delete;
3. publish the fact — applied (applySHA of the response + the manifestSHA it applied) or the
   outcome (failed, conflict, prune declined) — and the object status, *then* ack: a crash in
   between redelivers, and the repeated apply is a no-op.

Every intent ends in a fact. A custom resource whose kind is not served yet, an object whose
namespace does not exist yet (``Waiting``), and transient errors — 429, 5xx, timeouts
(``Retrying``) — are retried with capped exponential backoff honouring ``Retry-After`` for as
long as the cause lasts, and said so on the way. A prune re-reads the live object first: it
deletes only what still carries the bundle's label and does not opt out, with a uid
precondition (never a namesake created meanwhile) and the bundle's propagation policy. Errors
are classified (invalid, conflict, immutable, retryable, unknown kind) and every message is
scrubbed of Secret values before it leaves this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import functools
import logging
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from opentelemetry import trace

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    DecisionReason,
    DeleteIntent,
    Intent,
    ObjectPhase,
    ObjectStatus,
    OutcomeEvent,
)
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    object_status_subject,
    object_subject,
    parse_subject,
)
from services.applier.fence import Fence
from services.applier.retry import retry_delay
from services.common import bus, members, telemetry
from services.common.kube import (
    Conflict,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    Resource,
    Retryable,
)
from services.common.newest import publish_newest
from services.common.runtime import cluster_connections
from services.common.settings import replica_id, setting
from services.core.manifest import (
    FIELD_MANAGER,
    PRUNE_ANNOTATION,
    owner_of,
    prune_disabled,
    rv_int,
)
from services.core.scrub import scrub_for
from services.core.sha import object_sha

log = logging.getLogger("driftbus.applier")
APPLY_SECONDS = telemetry.meter.create_histogram(
    "driftbus_apply_seconds", unit="s", description="time to carry out one intent, by outcome"
)
DRIFT_CORRECTED = telemetry.meter.create_counter(
    "driftbus_drift_corrected", description="objects changed or deleted out of band, put back"
)
TIME_TO_CORRECT = telemetry.meter.create_histogram(
    "driftbus_time_to_correct_seconds",
    unit="s",
    description="from the planner's drift decision to the correction applied",
)
FENCED = telemetry.meter.create_counter(
    "driftbus_intents_fenced",
    description="intents dropped because their planner had lost its claim on the cluster",
)
DELETED_SHA = "0" * 64


@dataclasses.dataclass(frozen=True)
class ApplierSettings(telemetry.TelemetrySettings, bus.NatsSettings):
    cluster: str = setting("", "name of the cluster this applier writes to (required)")
    kubeconfig: str | None = setting(
        None, "kubeconfig path (in-cluster config when unset)", env="KUBECONFIG"
    )
    context: str | None = setting(None, "kubeconfig context (current context when unset)")
    applier_id: str = setting(
        "", "name of this replica in applied events (default: <hostname>-<pid>)"
    )
    concurrency: int = setting(16, "intents applied at the same time by this replica")
    max_backoff: float = setting(
        60.0,
        "longest delay in seconds between retries of a transient error (429, 5xx, timeout) or "
        "of an object waiting for its CRD or namespace; retried for as long as the cause lasts",
    )
    ack_wait: float = setting(
        10.0,
        "seconds before an unacked intent is redelivered: how long the intents of a replica "
        "that died wait for another (slow applies stay claimed: progress is signalled every "
        "third of it)",
    )
    max_deliver: int = setting(
        -1,
        "deliveries of one intent before it is reported Failed naming its last cause (-1: no "
        "limit, transient causes are retried for as long as they last)",
    )
    fence_refresh: float = setting(
        1.0,
        "seconds between reads of the cluster's planner claim: how soon after a take-over the "
        "intents of the deposed planner are dropped even before the new one's arrive",
    )


class Wait(Exception):
    """A prerequisite is missing; redeliver later (or fail once the budget is spent)."""


@dataclasses.dataclass
class Outcome:
    phase: ObjectPhase
    message: str
    applied: AppliedEvent | None = None


class Applier:
    def __init__(
        self,
        *,
        settings: ApplierSettings,
        js: JetStreamContext,
        kube: KubeClient,
        publisher: bus.Publisher,
    ) -> None:
        self.s = settings
        self.js = js
        self.kube = kube
        self.pub = publisher
        self.stopping = asyncio.Event()
        self.applied = 0
        self.superseded = 0
        self.failed = 0
        self.redelivered_done = 0
        self.fenced = 0
        self.fence = Fence()
        self._inflight: set[asyncio.Task[None]] = set()
        self.bound = asyncio.Event()

    async def _follow_claims(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # NATS away: the intents' own tokens still count
                self.fence.raise_to(await bus.claim_revision(self.js, self.s.cluster))
            await asyncio.sleep(self.s.fence_refresh)

    async def _read_fence(self) -> None:
        """The cluster's planner claim before the first intent is taken (a deposed planner's
        late intents are refused from the start). A slow or absent NATS is waited out: an
        applier that exits over one timed-out request would lose the work it could do."""
        delay = 0.2
        while True:
            try:
                self.fence.raise_to(await bus.claim_revision(self.js, self.s.cluster))
                return
            except (NatsError, TimeoutError) as exc:
                log.warning("reading the planner claim failed (%s); retrying in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.s.max_backoff)

    async def run(self) -> None:
        await self._read_fence()
        claims = asyncio.create_task(self._follow_claims(), name="follow claims")
        beats = asyncio.create_task(
            members.announce(
                self.pub, cluster=self.s.cluster, role="applier", member_id=self.s.applier_id
            ),
            name="heartbeats",
        )
        try:
            await self._run()
        finally:
            claims.cancel()
            beats.cancel()

    async def _run(self) -> None:
        consumer = await bus.ensure_intent_consumer(
            self.js,
            self.s.cluster,
            bus.IntentConsumerSettings(ack_wait=self.s.ack_wait, max_deliver=self.s.max_deliver),
        )
        sub = await self.js.pull_subscribe_bind(consumer, stream=bus.INTENTS)
        self.bound.set()
        slots = asyncio.Semaphore(self.s.concurrency)
        while not self.stopping.is_set():
            free = max(1, slots._value)  # fetch only what we can start now
            try:
                msgs = await sub.fetch(batch=free, timeout=1.0)
            except (NatsTimeout, TimeoutError):  # nats-py raises either when nothing is pending
                continue
            except Exception:  # a broken connection must not end the replica: log, retry
                log.exception("fetching intents failed; retrying")
                await asyncio.sleep(1.0)
                continue
            for msg in msgs:
                await slots.acquire()
                task = asyncio.create_task(self._handle(msg), name=msg.subject)
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
                task.add_done_callback(_log_failure)
                task.add_done_callback(lambda _: slots.release())
        # SIGTERM: finish what was started; anything not started stays in the stream.
        if self._inflight:
            await asyncio.wait(self._inflight, timeout=self.s.ack_wait / 2)
        # nats-py's drain never completes for a pull subscription and waits out its whole drain
        # timeout (30 s) on exit: unsubscribe it first (acks need no subscription).
        with contextlib.suppress(Exception):
            await sub.unsubscribe()

    async def _keep_claimed(self, msg: Msg) -> None:
        """Tell NATS the intent is still being worked on, so a short ack_wait redelivers the
        work of a dead replica quickly without redelivering a slow but live apply."""
        while True:
            await asyncio.sleep(self.s.ack_wait / 3)
            with contextlib.suppress(Exception):  # a lost signal only risks a redelivery
                await msg.in_progress()

    async def _handle(self, msg: Msg) -> None:
        claim = asyncio.create_task(self._keep_claimed(msg))
        started = asyncio.get_running_loop().time()
        outcome = "error"
        try:
            with telemetry.tracer.start_as_current_span(
                "apply",
                context=telemetry.traced(msg.headers),
                attributes={"cluster": self.s.cluster, "messaging.subject": msg.subject},
            ) as span:
                outcome = await self._handle_claimed(msg)
                span.set_attribute("outcome", outcome)
        finally:
            claim.cancel()
            APPLY_SECONDS.record(asyncio.get_running_loop().time() - started, {"outcome": outcome})

    async def _handle_claimed(self, msg: Msg) -> str:
        """Carry out one intent; returns what became of it (the metrics' outcome label)."""
        try:
            intent: ApplyIntent | DeleteIntent = decode(msg.data, Intent)  # type: ignore[arg-type]
        except WireError as exc:
            await self._refuse(msg, str(exc))
            return "refused"
        trace.get_current_span().set_attributes(
            {
                "bundle": intent.bundle or "",
                "revision": intent.revision,
                "object": str(intent.key),
                "reason": getattr(intent, "reason", "prune"),
            }
        )
        if not self.fence.admits(intent.fencing_token):
            log.warning(
                "%s: dropping intent %d of planner %s: its claim (token %d) was superseded "
                "(token %d)",
                intent.key,
                seq(msg),
                intent.planner or "?",
                intent.fencing_token,
                self.fence.token,
                extra={"cluster": intent.cluster, "fencing_token": intent.fencing_token},
            )
            self.fenced += 1
            FENCED.add(1, {"cluster": intent.cluster})
            await msg.ack_sync()
            return "fenced"
        try:
            last = await bus.last_message(self.js, bus.INTENTS, msg.subject)
            if last is None or last.seq != msg.metadata.sequence.stream:
                log.debug(
                    "%s: intent %d superseded by %s",
                    intent.key,
                    msg.metadata.sequence.stream,
                    last.seq if last else "none",
                )
                self.superseded += 1
                await msg.ack_sync()
                return "superseded"
            if msg.metadata.num_delivered > 1 and await self._carried_out(intent, msg):
                log.debug("%s: intent %d already carried out; ack lost", intent.key, seq(msg))
                self.redelivered_done += 1
                await msg.ack_sync()
                return "already-done"
            if isinstance(intent, ApplyIntent):
                outcome = await self._apply(intent, msg)
            else:
                outcome = await self._delete(intent)
        except Wait as exc:
            return await self._again(intent, msg, ObjectPhase.WAITING, str(exc), None)
        except KubeError as exc:
            if not exc.retryable:
                outcome = Outcome(ObjectPhase.FAILED, self._scrub(intent, str(exc)))
            else:
                return await self._again(
                    intent, msg, ObjectPhase.RETRYING, str(exc), exc.retry_after
                )
        except (NatsTimeout, TimeoutError, bus.BusError, ConnectionError):
            raise  # the bus is away: unacked, the intent comes back when it is
        except Exception as exc:
            log.exception("%s: handling intent %d failed", intent.key, seq(msg))
            outcome = Outcome(
                ObjectPhase.FAILED, self._scrub(intent, f"internal error: {type(exc).__name__}")
            )
        await self._report(intent, msg, outcome)
        if (
            outcome.applied is not None
            and isinstance(intent, ApplyIntent)
            and intent.reason in (DecisionReason.DRIFT, DecisionReason.DELETED)
        ):
            DRIFT_CORRECTED.add(1, {"cluster": intent.cluster})
            if intent.issued_at is not None:
                TIME_TO_CORRECT.record((_now() - intent.issued_at).total_seconds())
        return str(outcome.phase).lower()

    async def _again(
        self,
        intent: ApplyIntent | DeleteIntent,
        msg: Msg,
        phase: ObjectPhase,
        why: str,
        retry_after: float | None,
    ) -> str:
        """Retry later (Waiting for a prerequisite, Retrying a transient error), saying so; a
        configured delivery limit that is reached ends in Failed naming the cause."""
        attempt = msg.metadata.num_delivered
        why = self._scrub(intent, why)
        if 0 < self.s.max_deliver <= attempt:
            await self._report(
                intent,
                msg,
                Outcome(ObjectPhase.FAILED, f"gave up after {attempt} deliveries: {why}"),
            )
            return "failed"
        delay = retry_delay(attempt, cap=self.s.max_backoff, retry_after=retry_after)
        message = f"{why} (attempt {attempt}; next in {delay:.0f}s)"
        log.info("%s %s: %s", intent.key, phase, message)
        # informational, not awaited: the planner sees the intent still queued without it
        await self._publish_outcome(intent, msg, phase, message)
        await msg.nak(delay=delay)
        return str(phase).lower()

    async def _carried_out(self, intent: ApplyIntent | DeleteIntent, msg: Msg) -> bool:
        """Whether this very intent was already applied: its fact names its stream sequence."""
        last = await bus.last_message(
            self.js, bus.APPLIED, object_subject("applied", intent.cluster, intent.key)
        )
        if last is None or not last.data:
            return False
        try:
            return decode(last.data, AppliedEvent).intent_seq == seq(msg)
        except WireError:
            return False

    async def _apply(self, intent: ApplyIntent, msg: Msg) -> Outcome:
        m = intent.manifest
        try:
            res = await self.kube.resource_for(m)
        except NotFound:
            raise Wait(
                f"kind {m.get('kind')} ({m.get('apiVersion')}) is not served by the "
                "cluster (is its CustomResourceDefinition installed and Established?)"
            ) from None
        if res.namespaced and not intent.key.namespace:
            return Outcome(
                ObjectPhase.FAILED,
                f"{res.kind} is namespaced but the manifest has no metadata.namespace and the "
                "bundle no default namespace (publish with --namespace NS)",
            )
        try:
            live = await self.kube.apply(
                m, field_manager=FIELD_MANAGER, force=intent.force, resource=res
            )
        except NotFound as exc:
            if exc.details.get("kind") == "namespaces":
                raise Wait(f"namespace {m['metadata'].get('namespace')} does not exist") from None
            raise
        except Conflict as exc:
            return Outcome(
                ObjectPhase.CONFLICT,
                self._scrub(intent, exc.message)
                + ("" if intent.force else " (publish with force to take these fields over)"),
            )
        except Invalid as exc:
            if "immutable" not in exc.message:
                return Outcome(ObjectPhase.FAILED, self._scrub(intent, str(exc)))
            if not intent.allow_replace:
                return Outcome(
                    ObjectPhase.FAILED,
                    self._scrub(intent, str(exc))
                    + " (publish with allow-replace to delete and recreate it)",
                )
            await self._replace_delete(
                res, m["metadata"]["name"], m["metadata"].get("namespace", "")
            )
            live = await self.kube.apply(
                m, field_manager=FIELD_MANAGER, force=intent.force, resource=res
            )
        rv = live.get("metadata", {}).get("resourceVersion", "")
        applied = AppliedEvent(
            cluster=intent.cluster,
            key=intent.key,
            bundle=intent.bundle,
            revision=intent.revision,
            manifest_sha=intent.manifest_sha,
            apply_sha=object_sha(live).hex(),
            resource_version=rv,
            applied_at=_now(),
            applier=self.s.applier_id,
        )
        return Outcome(ObjectPhase.APPLIED, f"applied ({intent.reason})", applied)

    async def _replace_delete(self, res: Resource, name: str, namespace: str) -> None:
        """Delete for allow-replace and wait until it is gone (Background: no finalizer that
        only a garbage collector would remove), so the re-create does not meet the old object."""
        await self.kube.delete(res, name, namespace, propagation="Background")
        for _ in range(300):
            try:
                await self.kube.get(res, name, namespace)
            except NotFound:
                return
            await asyncio.sleep(0.1)
        raise Wait(f"{res.kind}/{namespace}/{name} is still being deleted for replacement")

    async def _delete(self, intent: DeleteIntent) -> Outcome:
        """Prune: re-read the live object, delete it only if it still carries the bundle's label
        and does not opt out, and only that very object (uid precondition)."""
        key = intent.key
        try:
            # a kind the cluster does not serve has no objects: there is nothing to delete
            res = await self.kube.discovery.resource(intent.api_version, key.kind)
            live = await self.kube.get(res, key.name, key.namespace)
            meta = live.get("metadata", {})
            if (owner := owner_of(live)) != intent.bundle:
                return Outcome(
                    ObjectPhase.KEPT,
                    f"not pruned: it carries the label of {owner or 'no bundle'} now, "
                    f"not of bundle {intent.bundle}",
                )
            if prune_disabled(live):
                return Outcome(
                    ObjectPhase.KEPT, f"not pruned: it carries {PRUNE_ANNOTATION}: disabled"
                )
            gone = await self.kube.delete(
                res,
                key.name,
                key.namespace,
                uid=str(meta.get("uid") or "") or None,
                propagation=intent.propagation,
            )
            rv = str(gone.get("metadata", {}).get("resourceVersion", ""))
        except NotFound:
            rv = ""
        except Conflict as exc:
            # the uid precondition failed: a namesake replaced it since the read; look again
            raise Retryable(exc.subject, exc.status, exc.reason, exc.message) from None
        applied = AppliedEvent(
            cluster=intent.cluster,
            key=key,
            bundle=intent.bundle or "?",
            revision=intent.revision,
            manifest_sha=DELETED_SHA,
            apply_sha=None,
            resource_version=rv,
            deleted=True,
            applied_at=_now(),
            applier=self.s.applier_id,
        )
        return Outcome(ObjectPhase.PRUNED, f"pruned: not in revision {intent.revision}", applied)

    async def _publish_outcome(
        self, intent: ApplyIntent | DeleteIntent, msg: Msg, phase: ObjectPhase, message: str
    ) -> list[asyncio.Task[Any]]:
        """An outcome fact (for the planner) and the object's status row (for users)."""
        manifest_sha = intent.manifest_sha if isinstance(intent, ApplyIntent) else DELETED_SHA
        at = _now()
        stamp = f"{seq(msg)}:{msg.metadata.num_delivered}"
        fact = OutcomeEvent(
            cluster=intent.cluster,
            key=intent.key,
            bundle=intent.bundle or "?",
            revision=intent.revision,
            manifest_sha=manifest_sha,
            phase=phase,
            message=message,
            at=at,
            intent_seq=seq(msg),
            applier=self.s.applier_id,
        )
        return [
            await self.pub.publish(
                object_subject("outcome", intent.cluster, intent.key),
                encode(fact),
                msg_id=f"outcome:{stamp}",
            ),
            await self._status_row(intent, msg, phase, message, msg_id=f"status:{stamp}"),
        ]

    async def _status_row(
        self,
        intent: ApplyIntent | DeleteIntent,
        msg: Msg,
        phase: ObjectPhase,
        message: str,
        *,
        msg_id: str,
        apply_sha: str | None = None,
    ) -> asyncio.Task[Any]:
        """The object's status row for users (the facts for the planner go elsewhere)."""
        status = ObjectStatus(
            cluster=intent.cluster,
            bundle=intent.bundle or "?",
            revision=intent.revision,
            key=intent.key,
            phase=phase,
            message=message,
            apply_sha=apply_sha,
            manifest_sha=intent.manifest_sha if isinstance(intent, ApplyIntent) else None,
            attempts=msg.metadata.num_delivered,
            at=_now(),
        )
        subject = object_status_subject(intent.cluster, intent.bundle or "?", intent.key)
        return await self.pub.publish(subject, encode(status), msg_id=msg_id)

    async def _report(self, intent: ApplyIntent | DeleteIntent, msg: Msg, o: Outcome) -> None:
        """The final fact of an intent, durable before the intent is acked."""
        key = intent.key
        log.debug("%s: %s (%s)", key, o.phase, o.message)
        if o.applied is None:
            self.failed += 1
            if o.phase is not ObjectPhase.KEPT:
                log.warning("%s %s: %s", key, o.phase, o.message)
            tasks = await self._publish_outcome(intent, msg, o.phase, o.message)
            await asyncio.gather(*tasks)
            await msg.ack_sync()
            return
        fact = msgspec.structs.replace(o.applied, intent_seq=seq(msg))
        # APPLIED keeps one fact per object: ours only if no applier landed a newer one since
        facts: list[asyncio.Task[Any]] = [
            asyncio.create_task(
                publish_newest(
                    self.pub,
                    self.js,
                    bus.APPLIED,
                    object_subject("applied", intent.cluster, key),
                    encode(fact),
                    msg_id=f"applied:{msg.metadata.sequence.stream}",
                    supersedes=functools.partial(_supersedes, fact),
                )
            )
        ]
        self.applied += 1
        facts.append(
            await self._status_row(
                intent,
                msg,
                o.phase,
                o.message,
                msg_id=f"status:{msg.metadata.sequence.stream}",
                apply_sha=o.applied.apply_sha,
            )
        )
        await asyncio.gather(*facts)  # facts are durable before the intent is acked
        await msg.ack_sync()

    async def _refuse(self, msg: Msg, why: str) -> None:
        """An intent we cannot read: terminate it (redelivery cannot fix it) and say so."""
        log.error("refusing intent on %s: %s", msg.subject, why)
        self.failed += 1
        await msg.term()
        try:
            where = parse_subject(msg.subject)
        except SubjectError:
            return
        if where.key is not None:
            status = ObjectStatus(
                cluster=where.cluster,
                bundle="?",
                revision="?",
                key=where.key,
                phase=ObjectPhase.FAILED,
                message=f"unreadable intent: {why}",
                at=_now(),
            )
            subject = object_status_subject(where.cluster, "?", where.key)
            await self.pub.publish(subject, encode(status), msg_id=f"refused:{msg.subject}")

    @staticmethod
    def _scrub(intent: ApplyIntent | DeleteIntent, text: str) -> str:
        manifest: dict[str, Any] = intent.manifest if isinstance(intent, ApplyIntent) else {}
        return scrub_for(manifest, text)


def _log_failure(task: asyncio.Task[None]) -> None:
    """An intent whose handling crashed stays unacked (it is redelivered); never silent."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("handling intent %s failed: %s: %s", task.get_name(), type(exc).__name__, exc)


def _supersedes(fact: AppliedEvent, other: bytes) -> bool:
    """Whether ``fact`` is at least as new as the APPLIED message ``other``. A delete without a
    resourceVersion cannot be compared and lands, and so does anything after one; an apply at the
    same resourceVersion (a no-op apply of an equivalent manifest) replaces the other, so the
    planner learns which manifest it was."""
    try:
        last = decode(other, AppliedEvent)
    except WireError:
        return True
    ours, theirs = rv_int(fact.resource_version), rv_int(last.resource_version)
    if (fact.deleted or last.deleted) and not (ours and theirs):
        return True  # a delete's resourceVersion may be unknown: it cannot be compared
    return ours >= theirs


def seq(msg: Msg) -> int:
    """The intent's stream sequence: its identity across redeliveries."""
    return int(msg.metadata.sequence.stream)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def run(settings: ApplierSettings, *, stopping: asyncio.Event | None = None) -> None:
    settings = dataclasses.replace(settings, applier_id=settings.applier_id or replica_id())
    async with cluster_connections("applier", settings, settings, settings) as c:
        applier = Applier(settings=settings, js=c.js, kube=c.kube, publisher=c.publisher)
        c.health.add("bound to the cluster's intent consumer", applier.bound.is_set)
        if stopping is not None:
            applier.stopping = stopping
        await applier.run()


__all__ = ["Applier", "ApplierSettings", "ObjectKey", "run"]
