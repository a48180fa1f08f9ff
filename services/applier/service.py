"""The applier process: server-side apply of intents from the cluster's shared durable consumer.

Per intent (``Applier._handle_claimed``):

1. drop it if its planner was fenced off (``fence``) or it is superseded (a newer intent for the
   object replaced it on the subject);
2. server-side apply (``fieldManager=driftbus``) or delete (``verbs``);
3. publish the fact — applied (applySHA of the response + the manifestSHA it applied) or the
   outcome (failed, conflict, prune declined) — and the object status (``report``), *then* ack:
   a crash in between redelivers, and the repeated apply is a no-op.

Every intent ends in a fact. A custom resource whose kind is not served yet, an object whose
namespace does not exist yet (``Waiting``), and transient errors — 429, 5xx, timeouts
(``Retrying``) — are retried with capped exponential backoff honouring ``Retry-After`` for as
long as the cause lasts, and said so on the way. A prune re-reads the live object first: it
deletes only what still carries the bundle's label and does not opt out, with a uid
precondition (never a namesake created meanwhile) and the bundle's propagation policy. Errors
are classified (``classify``: invalid, conflict, immutable, retryable, unknown kind) and every
message is scrubbed of Secret values before it leaves this process. A SOPS-encrypted manifest is
decrypted with the age key of its bundle's tenant (``--sops-key-dir``) or the replica's
(``--sops-age-key-file``) just before its apply and nowhere else (``verbs.decrypted``,
``decrypt``, ``common.sops``). Fetching, concurrency and
keeping intents claimed: ``consumer``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import traceback

from opentelemetry import trace

from schemas.codec import WireError, decode
from schemas.decision import DecisionReason
from schemas.messages import ApplyIntent, DeleteIntent, IntentBatch, Queued
from schemas.subjects import ObjectKey, object_subject, split_bundle
from services.applier.classify import Report, Retry, Step, classify, schedule
from services.applier.consumer import BatchRun, Claim, InFlight, consume, keep_claimed
from services.applier.decrypt import Decryptor, Keys
from services.applier.fence import Fence, follow_claims, read_claim
from services.applier.gate import NamespaceGate
from services.applier.report import Reporter
from services.applier.settings import ApplierSettings
from services.applier.verbs import Outcome, apply, delete, now
from services.clusters import members
from services.common import bus, telemetry
from services.common.settings import SettingsError, replica_id
from services.core.scrub import scrub_for
from services.kube import Forbidden, KubeClient
from services.runtime import cluster_connections

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


class Applier:
    def __init__(
        self,
        *,
        settings: ApplierSettings,
        nc: bus.Connection,
        js: bus.JetStream,
        kube: KubeClient,
        publisher: bus.Publisher,
    ) -> None:
        self.s = settings
        self.nc = nc
        self.js = js
        self.kube = kube
        self.pub = publisher
        self.report = Reporter(
            publisher=publisher,
            js=js,
            applier_id=settings.applier_id,
            cluster=settings.cluster,
            report_facts=settings.report_facts,
        )
        self.stopping = asyncio.Event()
        self.applied = 0
        self.superseded = 0
        self.failed = 0
        self.redelivered_done = 0
        self.fenced = 0
        self.fence = Fence()
        self.gate = NamespaceGate()
        self.bound = asyncio.Event()
        self.runs: set[BatchRun] = set()
        """Batches being carried out (``consumer.BatchRun``)."""
        self.decryptor = Decryptor(
            Keys(
                platform=settings.sops_age_key_file,
                tenant_dir=settings.sops_key_dir,
                non_age=settings.sops_non_age_keys,
            )
        )

    async def run(self) -> None:
        await read_claim(self.fence, self.js, self.s.cluster, max_backoff=self.s.max_backoff)
        claims = asyncio.create_task(
            follow_claims(self.fence, self.js, self.nc, self.s.cluster, every=self.s.fence_refresh),
            name="follow claims",
        )
        beats = asyncio.create_task(
            members.announce(
                self.pub, cluster=self.s.cluster, role="applier", member_id=self.s.applier_id
            ),
            name="heartbeats",
        )
        try:
            await consume(
                self.js,
                cluster=self.s.cluster,
                concurrency=self.s.concurrency,
                ack_wait=self.s.ack_wait,
                max_deliver=self.s.max_deliver,
                dispatch=self._dispatch,
                stopping=self.stopping,
                bound=self.bound,
                runs=self.runs,
            )
        finally:
            claims.cancel()
            beats.cancel()

    async def _dispatch(self, msg: bus.Message, inflight: InFlight) -> bool:
        """Start the intents of one message, each in a slot of its own; True for a batch."""
        try:
            queued: Queued = decode(msg.data, Queued)  # type: ignore[arg-type]
        except WireError as exc:
            self.failed += 1
            await self.report.refuse(msg, str(exc))
            return False
        if not isinstance(queued, IntentBatch):
            claim = Claim(msg, trace=msg.headers)
            await inflight.start(self._handle(claim, queued), msg.subject)
            return False
        if not queued.intents:
            await bus.ack(msg)
            return True
        run = BatchRun(msg, len(queued.intents), inflight, self.runs, self.s.ack_wait)
        for i, intent in enumerate(queued.intents):
            claim = Claim(msg, i, run, queued.traces[i] if i < len(queued.traces) else None)
            if not run.running or not await inflight.start(
                self._handle(claim, intent), msg.subject
            ):
                await run.abandon()  # stopping, or an intent of it crashed: back to the stream
                break
        return True

    async def _handle(self, claim: Claim, intent: ApplyIntent | DeleteIntent) -> None:
        # a batch is kept claimed as a whole (``BatchRun``)
        keep = claim.run is None
        kept = (
            asyncio.create_task(keep_claimed(claim.msg, ack_wait=self.s.ack_wait)) if keep else None
        )
        started = asyncio.get_running_loop().time()
        outcome = "error"
        try:
            with telemetry.span(
                "apply",
                context=telemetry.traced(claim.trace),
                attributes={"cluster": self.s.cluster, "messaging.subject": claim.msg.subject},
            ) as span:
                outcome = await self._handle_claimed(claim, intent)
                span.set_attribute("outcome", outcome)
        except Exception:
            if claim.run is not None:  # the batch goes back to the stream (as a lone intent
                await claim.run.abandon()  # whose handling crashed stays unacked)
            raise
        finally:
            if kept is not None:
                kept.cancel()
            APPLY_SECONDS.record(asyncio.get_running_loop().time() - started, {"outcome": outcome})

    async def _handle_claimed(self, claim: Claim, intent: ApplyIntent | DeleteIntent) -> str:
        """Carry out one intent; returns what became of it (the metrics' outcome label)."""
        if (span := trace.get_current_span()).is_recording():
            span.set_attributes(
                {
                    "bundle": intent.bundle or "",
                    "revision": intent.revision,
                    "object": str(intent.key),
                    "reason": getattr(intent, "reason", "prune"),
                }
            )
        if not self.fence.admits(intent.fencing_token):
            log.warning(
                "%s: dropping intent %s of planner %s: its claim (token %d) was superseded "
                "(token %d)",
                intent.key,
                claim.stamp,
                intent.planner or "?",
                intent.fencing_token,
                self.fence.token,
                extra={"cluster": intent.cluster, "fencing_token": intent.fencing_token},
            )
            self.fenced += 1
            FENCED.add(1, {"cluster": intent.cluster})
            await claim.done()
            return "fenced"
        # An intent that waits here may be replaced meanwhile: it asks the stream afterwards.
        waits = self.gate.holds(intent)
        async with self.gate.turn(intent):  # entered before the first await: see ``gate``
            return await self._carry_out(intent, claim, waited=waits)

    async def _carry_out(
        self, intent: ApplyIntent | DeleteIntent, claim: Claim, *, waited: bool
    ) -> str:
        redelivered = claim.redelivered
        try:
            # INTENTS keeps one intent per object: a newer one removes a queued older one, so
            # a fresh delivery is the object's latest intent. Only one that waited (in the
            # namespace gate, for a retry or a redelivery) can have been replaced since: that
            # one asks. Only a new object's first apply travels in a batch (``IntentBatch``);
            # a newer intent of it goes alone, on the object's subject, where this looks.
            if (waited or redelivered or claim.retries) and await self._superseded(intent, claim):
                log.debug("%s: intent %s superseded", intent.key, claim.stamp)
                self.superseded += 1
                await claim.done()
                return "superseded"
            if redelivered and self.report.reports.carried_out(claim.ident):
                # this very intent was applied here and its ack was lost: its report named it
                # (``reports.carried_out``); another applier's redelivery applies again — the
                # same manifest, a server-side apply that changes nothing
                log.debug("%s: intent %s already carried out; ack lost", intent.key, claim.stamp)
                self.redelivered_done += 1
                await claim.done()
                return "already-done"
            kube = self._as(intent)
            if isinstance(intent, ApplyIntent):
                outcome = await apply(
                    kube,
                    intent,
                    applier_id=self.s.applier_id,
                    whole=self.s.whole_object_drift,
                    decryptor=self.decryptor,
                )
            else:
                outcome = await delete(kube, intent, applier_id=self.s.applier_id)
        except Exception as exc:
            match classify(exc, Step.INTENT, intent):
                case Retry() as retry:
                    return await self._again(intent, claim, retry)
                case Report(phase, message, internal):
                    if internal:
                        # where it failed, and the exception's text only scrubbed: a library's
                        # error may quote the manifest it was given, a Secret's values included
                        manifest = intent.manifest if isinstance(intent, ApplyIntent) else {}
                        log.error(
                            "%s: handling intent %s failed: %s: %s\n%s",
                            intent.key,
                            claim.stamp,
                            message,
                            scrub_for(manifest, str(exc)),
                            "".join(traceback.format_tb(exc.__traceback__)),
                        )
                    outcome = Outcome(phase, message)
                case _:  # Leave: the bus is away; unacked, the intent comes back when it is
                    raise
        await self._finish(intent, claim, outcome)
        if (
            outcome.applied is not None
            and isinstance(intent, ApplyIntent)
            and intent.reason in (DecisionReason.DRIFT, DecisionReason.DELETED)
        ):
            DRIFT_CORRECTED.add(1, {"cluster": intent.cluster})
            if intent.issued_at is not None:
                TIME_TO_CORRECT.record((now() - intent.issued_at).total_seconds())
        return str(outcome.phase).lower()

    async def _again(self, intent: ApplyIntent | DeleteIntent, claim: Claim, retry: Retry) -> str:
        """Retry later (Waiting for a prerequisite, Retrying a transient error), saying so; a
        configured delivery limit that is reached ends in Failed naming the cause. A lone
        intent goes back to the stream with the delay; a batch's is retried here."""
        match schedule(
            retry, claim.attempt, max_deliver=self.s.max_deliver, max_backoff=self.s.max_backoff
        ):
            case Report(phase, message):
                await self._finish(intent, claim, Outcome(phase, message))
                return "failed"
            case later:
                log.info("%s %s: %s", intent.key, later.phase, later.message)
                # informational (the planner sees the intent still queued without it); in the
                # next report, so durable a few milliseconds later
                await self.report.outcome(intent, claim, later.phase, later.message)
                if claim.run is None:
                    await bus.nak(claim.msg, delay=later.delay)
                else:
                    claim.retries += 1
                    claim.run.later(later.delay, lambda: self._handle(claim, intent))
                return str(later.phase).lower()

    async def _finish(self, intent: ApplyIntent | DeleteIntent, claim: Claim, o: Outcome) -> None:
        """Count the intent's final outcome and report it (acked once the facts are durable)."""
        if o.applied is None:
            self.failed += 1
        else:
            self.applied += 1
        await self.report.final(intent, claim, o)

    def _as(self, intent: ApplyIntent | DeleteIntent) -> KubeClient:
        """The client an intent's requests go through: a tenant's are made as its ServiceAccount
        (the planner names it in the intent), so the API server's RBAC judges each one."""
        who = intent.impersonate
        if who is None and split_bundle(intent.bundle)[0]:
            # fail closed: never a tenant's write with the applier's own rights
            raise Forbidden(
                str(intent.key),
                403,
                "Forbidden",
                f"intent of bundle {intent.bundle} names no "
                "identity to act as (its tenant is not in the tenant policy)",
            )
        return self.kube if who is None else self.kube.impersonating(who.user, who.groups)

    async def _superseded(self, intent: ApplyIntent | DeleteIntent, claim: Claim) -> bool:
        """Whether a newer intent for the object replaced this one: on the stream, the lone
        intent on the object's subject is another one (or none: acked meanwhile); for an
        intent in a batch, a later one waits there."""
        subject = object_subject("intent", intent.cluster, intent.key)
        last = await bus.last_message(self.js, bus.INTENTS, subject)
        if claim.run is None:
            return last is None or last.seq != claim.seq
        return last is not None and (last.seq or 0) > claim.seq


def check_key_file(path: str, key_dir: str = "") -> None:
    """A configured age key file, and key directory, must be readable at start-up (the setting
    fails loudly, naming itself, instead of every SOPS-encrypted Secret failing later)."""
    if path and not os.access(path, os.R_OK):
        raise SettingsError(
            f"--sops-age-key-file / SOPS_AGE_KEY_FILE={path!r}: not a readable file"
        )
    if key_dir and not (os.path.isdir(key_dir) and os.access(key_dir, os.R_OK | os.X_OK)):
        raise SettingsError(
            f"--sops-key-dir / DRIFTBUS_SOPS_KEY_DIR={key_dir!r}: not a readable directory"
        )


async def run(settings: ApplierSettings, *, stopping: asyncio.Event | None = None) -> None:
    settings = dataclasses.replace(settings, applier_id=settings.applier_id or replica_id())
    check_key_file(settings.sops_age_key_file, settings.sops_key_dir)
    async with cluster_connections("applier", settings, settings, settings) as c:
        applier = Applier(settings=settings, nc=c.nc, js=c.js, kube=c.kube, publisher=c.publisher)
        c.health.add("bound to the cluster's intent consumer", applier.bound.is_set)
        if stopping is not None:
            applier.stopping = stopping
        await applier.run()


__all__ = ["Applier", "ApplierSettings", "ObjectKey", "run"]
