"""What the applier says about an intent: the fact for the planner (applied, or the outcome)
and the object's status row for users, published durably before the intent is acked."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import msgspec

from schemas.codec import WireError, decode, encode
from schemas.decision import DecisionReason
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    DeleteIntent,
    ObjectPhase,
    ObjectStatus,
    OutcomeEvent,
)
from schemas.subjects import SubjectError, object_status_subject, object_subject, parse_subject
from services.applier.consumer import seq
from services.applier.verbs import DELETED_SHA, Outcome, now
from services.common import bus
from services.common.bus.newest import publish_newest
from services.core.manifest import rv_int

log = logging.getLogger("driftbus.applier")


class Reporter:
    def __init__(self, *, publisher: bus.Publisher, js: bus.JetStream, applier_id: str) -> None:
        self.pub = publisher
        self.js = js
        self.applier_id = applier_id

    async def outcome(
        self, intent: ApplyIntent | DeleteIntent, msg: bus.Message, phase: ObjectPhase, message: str
    ) -> list[asyncio.Task[Any]]:
        """An outcome fact (for the planner) and the object's status row (for users)."""
        manifest_sha = intent.manifest_sha if isinstance(intent, ApplyIntent) else DELETED_SHA
        at = now()
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
            applier=self.applier_id,
        )
        return [
            await self.pub.publish_batched(
                bus.OUTCOMES,
                object_subject("outcome", intent.cluster, intent.key),
                encode(fact),
                msg_id=f"outcome:{stamp}",
            ),
            await self.status_row(intent, msg, phase, message, msg_id=f"status:{stamp}"),
        ]

    async def status_row(
        self,
        intent: ApplyIntent | DeleteIntent,
        msg: bus.Message,
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
            at=now(),
        )
        subject = object_status_subject(intent.cluster, intent.bundle or "?", intent.key)
        return await self.pub.publish_batched(bus.STATUS, subject, encode(status), msg_id=msg_id)

    async def final(self, intent: ApplyIntent | DeleteIntent, msg: bus.Message, o: Outcome) -> None:
        """The final fact of an intent, durable before the intent is acked."""
        key = intent.key
        log.debug("%s: %s (%s)", key, o.phase, o.message)
        if o.applied is None:
            if o.phase is not ObjectPhase.KEPT:
                log.warning("%s %s: %s", key, o.phase, o.message)
            tasks = await self.outcome(intent, msg, o.phase, o.message)
            await asyncio.gather(*tasks)
            await bus.ack(msg)
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
                    msg_id=f"applied:{seq(msg)}",
                    supersedes=functools.partial(supersedes, fact),
                    last_seq=expected_applied(intent),
                    batched=True,
                )
            )
        ]
        facts.append(
            await self.status_row(
                intent,
                msg,
                o.phase,
                o.message,
                msg_id=f"status:{seq(msg)}",
                apply_sha=o.applied.apply_sha,
            )
        )
        await asyncio.gather(*facts)  # facts are durable before the intent is acked
        await bus.ack(msg)

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


def expected_applied(intent: ApplyIntent | DeleteIntent) -> int | None:
    """What the APPLIED subject is expected to hold before this intent's fact: for an object the
    planner decided is new, nothing (0), so the fact is published without reading the subject
    first; if something is there after all, JetStream refuses it and ``publish_newest`` reads
    and compares as for any other (None)."""
    if isinstance(intent, ApplyIntent) and intent.reason == DecisionReason.NEW:
        return 0
    return None


def supersedes(fact: AppliedEvent, other: bytes) -> bool:
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
