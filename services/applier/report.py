"""What the applier says about an intent: the fact for the planner (applied, in a report with
the others of the moment; or the outcome, alone) and the object's status row for users (in the
report: ``reports``), durable before the intent is acked."""

from __future__ import annotations

import asyncio
import logging

import msgspec

from schemas.codec import encode
from schemas.messages import (
    ApplyIntent,
    DeleteIntent,
    ObjectPhase,
    ObjectStatus,
    OutcomeEvent,
)
from schemas.subjects import SubjectError, object_status_subject, object_subject, parse_subject
from services.applier.consumer import Claim
from services.applier.reports import MOST, AppliedReports
from services.applier.verbs import DELETED_SHA, Outcome, now
from services.common import bus

log = logging.getLogger("driftbus.applier")


class Reporter:
    def __init__(
        self,
        *,
        publisher: bus.Publisher,
        js: bus.JetStream,
        applier_id: str,
        cluster: str,
        report_facts: int = MOST,
    ) -> None:
        self.pub = publisher
        self.js = js
        self.applier_id = applier_id
        self.reports = AppliedReports(
            publisher, cluster=cluster, applier_id=applier_id, most=report_facts
        )
        """Applied facts and status rows go out in reports (``reports``); outcomes alone."""

    async def outcome(
        self, intent: ApplyIntent | DeleteIntent, claim: Claim, phase: ObjectPhase, message: str
    ) -> None:
        """An outcome fact (for the planner: alone, on the object's compacted subject) and the
        object's status row (for users: in the next report), both durable when this returns."""
        manifest_sha = intent.manifest_sha if isinstance(intent, ApplyIntent) else DELETED_SHA
        stamp = f"{claim.stamp}:{claim.attempt}"
        fact = OutcomeEvent(
            cluster=intent.cluster,
            key=intent.key,
            bundle=intent.bundle or "?",
            revision=intent.revision,
            manifest_sha=manifest_sha,
            phase=phase,
            message=message,
            at=now(),
            intent_seq=claim.seq,
            applier=self.applier_id,
        )
        sent = await self.pub.publish_batched(
            bus.OUTCOMES,
            object_subject("outcome", intent.cluster, intent.key),
            encode(fact),
            msg_id=f"outcome:{stamp}",
        )
        await asyncio.gather(sent, self.reports.add(None, row(intent, claim, phase, message)))

    async def final(self, intent: ApplyIntent | DeleteIntent, claim: Claim, o: Outcome) -> None:
        """The final fact of an intent and its row, durable before the intent is acked."""
        key = intent.key
        log.debug("%s: %s (%s)", key, o.phase, o.message)
        if o.applied is None:
            if o.phase is not ObjectPhase.KEPT:
                log.warning("%s %s: %s", key, o.phase, o.message)
            await self.outcome(intent, claim, o.phase, o.message)
            await claim.done()
            return
        fact = msgspec.structs.replace(o.applied, intent_seq=claim.seq)
        # fact and row go in this applier's next report (durable when this returns); two
        # appliers' facts of one object may land in either order: the planner keeps the newer
        said = row(intent, claim, o.phase, o.message, apply_sha=o.applied.apply_sha)
        await self.reports.add(fact, said, claim.ident)
        await claim.done()

    async def refuse(self, msg: bus.Message, why: str) -> None:
        """An intent we cannot read: terminate it (redelivery cannot fix it) and say so."""
        log.error("refusing intent on %s: %s", msg.subject, why)
        await bus.term(msg)
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
                at=now(),
            )
            subject = object_status_subject(where.cluster, "?", where.key)
            await self.pub.publish(subject, encode(status), msg_id=f"refused:{msg.subject}")


def row(
    intent: ApplyIntent | DeleteIntent,
    claim: Claim,
    phase: ObjectPhase,
    message: str,
    *,
    apply_sha: str | None = None,
) -> ObjectStatus:
    """The object's status row for users (the facts for the planner go elsewhere)."""
    return ObjectStatus(
        cluster=intent.cluster,
        bundle=intent.bundle or "?",
        revision=intent.revision,
        key=intent.key,
        phase=phase,
        message=message,
        apply_sha=apply_sha,
        manifest_sha=intent.manifest_sha if isinstance(intent, ApplyIntent) else None,
        attempts=claim.attempt,
        at=now(),
    )
