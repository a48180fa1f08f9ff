"""Publishing what the rule decided for one object: its status row, its intent, its decision
record, in that order, under the claim's fencing token (``rule.messages`` builds them; this
sends them).

The one place the planner writes for an object: counted by action and reason (the hit ratio), in
a ``decide`` span when a traced event caused it, and held while this replica's lease on the
cluster has lapsed rather than dropped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgspec
from opentelemetry import trace

from schemas.codec import encode
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.messages import ApplyIntent, DeleteIntent, Health, ObjectPhase
from schemas.subjects import object_status_subject, object_subject, split_bundle
from services.common import bus, telemetry
from services.planner.memory.cluster import ClusterState
from services.planner.rule import messages
from services.planner.rule.decide import Decision
from services.planner.rule.entry import Entry, Slot
from services.planner.rule.replay import Inputs
from services.planner.rule.revision import BundleView
from services.planner.shell.decision_batches import DecisionBatches
from services.planner.shell.intent_batches import IntentBatches

log = logging.getLogger("driftbus.planner")
DECISIONS = telemetry.Tally(
    "driftbus_decisions",
    "planner decisions by action and reason (action hit: a cache hit, nothing sent)",
    ("action", "reason", "cluster"),
)
DRIFT_DETECTED = telemetry.Tally(
    "driftbus_drift_detected", "objects changed or deleted out of band, by cluster", ("cluster",)
)
INTENT_ENVELOPE = 2048
"""Bytes an intent adds to its manifest (its fields, an identity, a trace), counted generously:
a batch's bound is on the estimate, far below what NATS refuses."""


def never_written(e: Entry) -> bool:
    """driftbus never wrote the object and never saw it live."""
    return e.applied_rv == 0 and e.server_rv == 0


def may_batch(e: Entry) -> bool:
    """Whether an apply of the object decided now may travel in a batch: driftbus never wrote
    it, never saw it live and has no intent of it in flight, so no older intent of it (an
    apply, a prune whose ack was lost) can be queued for a newer one to replace. An intent of
    any other object goes alone on its subject, where the stream keeps only the newest."""
    return e.inflight is None and never_written(e)


DRIFT_REASONS = frozenset((DecisionReason.DRIFT, DecisionReason.DELETED))
"""Decisions that correct an object changed or deleted by hand."""


class Decisions:
    """Sends each decision of one cluster's planner. Changes only the entry of a decision whose
    intent cannot be built (nothing is in flight then), and the decision counters."""

    def __init__(
        self,
        *,
        state: ClusterState,
        publisher: bus.Publisher,
        planner_id: str,
        fencing_token: int,
        owns: Callable[[], bool],
        sent: Callable[[], None] = lambda: None,
        batches: IntentBatches | None = None,
    ) -> None:
        self.state = state
        self.pub = publisher
        self.planner_id = planner_id
        self.fencing_token = fencing_token
        self._owns = owns
        self._sent = sent
        """Called after each intent: the planner's lost-intent check starts then, not by
        scanning every entry for one in flight."""
        self.records = DecisionBatches(publisher, cluster=state.cluster, planner_id=planner_id)
        """Each decision's record, sent with the others of the moment (``decision_batches``)."""
        self.batches = batches
        """Apply intents of objects with nothing in flight go in batches (``intent_batches``);
        None: every intent alone on its object's subject."""
        if batches is not None:
            batches.before_send = self.records.send_waiting  # a batch's records go first

    async def publish(
        self,
        slot: Slot,
        d: Decision | None,
        *,
        after_rebuild: bool = False,
        removed_from: str = "",
        inputs: Inputs | None = None,
        batchable: bool = False,
    ) -> None:
        """Send ``d`` (a hit only as its record); nothing for no decision. ``removed_from``:
        the bundle ``d`` prunes the object for (``ClusterState.view_of``); ``inputs``: what the
        rule decided ``d`` from, for its record; ``batchable``: no other intent of the object
        can be queued (``may_batch``): an apply may go in a batch."""
        if d is None:
            return
        if not trace.get_current_span().get_span_context().is_valid:
            await self._send(slot, d, after_rebuild, removed_from, inputs, batchable)
            return
        e = self.state.entries[slot]
        view = self.state.view_of(slot, e, removed_from)
        with telemetry.tracer.start_as_current_span(
            "decide",
            attributes={
                "cluster": slot[0],
                "bundle": e.bundle or e.owner_bundle or "",
                "revision": view.revision if view else "",
                "object": str(slot[1]),
                "decision": str(d.action),
                "reason": str(d.reason),
            },
        ):
            await self._send(slot, d, after_rebuild, removed_from, inputs, batchable)

    async def rebuilt_hit(self, slot: Slot, entry: Entry, d: Decision) -> None:
        """A hit on ``entry`` at the go-live after a rebuild, outside any span: what
        ``publish`` does with it there (counted, no record, a moot failure cleared), without
        unpacking the entry again — 100,000 of them at the restart of a big cluster."""
        self._count(slot, d, True)
        view = self.state.view_of(slot, entry)
        if view is not None:
            await self._clear_moot_failure(slot, view)

    def _count(self, slot: Slot, d: Decision, after_rebuild: bool) -> None:
        self.state.counters[f"{d.action}:{d.reason}"] += 1
        DECISIONS.add(1, d.action, d.reason, slot[0])
        if d.reason in DRIFT_REASONS:
            DRIFT_DETECTED.add(1, slot[0])
        log.debug(
            "%s: %s (%s)%s", slot[1], d.action, d.reason, " after rebuild" if after_rebuild else ""
        )

    async def _send(
        self,
        slot: Slot,
        d: Decision,
        after_rebuild: bool,
        removed_from: str,
        inputs: Inputs | None,
        batchable: bool,
    ) -> None:
        key = slot[1]
        e = self.state.entries[slot]
        view = self.state.view_of(slot, e, removed_from)
        self._count(slot, d, after_rebuild)
        revision = e.revision or (view.revision if view else "")
        owner = e.bundle or e.owner_bundle or (view.name if view else "")
        identity = self.state.tenancy.identity(owner)
        if d.writes and identity is None and split_bundle(owner)[0]:
            # fail closed: a tenant's write never goes out with driftbus's own rights (its
            # tenant left the policy); nothing is in flight, a later fact decides afresh
            log.error("%s: not written: bundle %s's tenant is not in the tenant policy", key, owner)
            self.state.entries[slot] = msgspec.structs.replace(e, inflight=None)
            return
        manifest = self.state.details.manifest(slot) if d.writes else None
        intent = (
            messages.intent(
                slot,
                e,
                d,
                view,
                revision,
                manifest=manifest,
                planner_id=self.planner_id,
                fencing_token=self.fencing_token,
                identity=identity,
            )
            if d.writes
            else None
        )
        if d.writes and intent is None:
            # nothing went out, so nothing is in flight: a later fact decides afresh
            self.state.entries[slot] = msgspec.structs.replace(e, inflight=None)
            return
        if intent is not None and not self._owns():
            # Our lease lapsed (a burst of decisions starved the heartbeat, NATS was away):
            # wait for it instead of dropping the decision — for an object not yet created no
            # later fact would ever decide again. If the claim moved on, the coordinator
            # cancels this task and the new holder decides from scratch.
            log.warning("%s: lease lapsed; holding %s until it is renewed", key, d.action)
            while not self._owns():  # noqa: ASYNC110 - a clock-based predicate, no event
                await asyncio.sleep(0.05)
        # A restart's hit says nothing the object's last record did not (issue 43): at 100,000
        # unchanged objects it was 100,000 records. The cache counts it above.
        if not (after_rebuild and d.action is DecisionAction.HIT):
            record = messages.record(
                slot,
                e,
                d,
                revision,
                self.planner_id,
                identity if d.writes else None,
                owner,
                window=self.state.window_note(owner, d),
                inputs=inputs,
            )
            await self._record(
                record, alone=intent is not None and not self._batched(intent[0], batchable)
            )
        row = messages.ROW_OF.get(d.reason)
        if row is not None and view is not None and (d.writes or not after_rebuild):
            # before the intent: the applier's row must not be overtaken by this one
            why = self.state.in_use(slot, view) if d.reason is DecisionReason.IN_USE else ""
            await self._row(slot, view, row, why or messages.ROW_MESSAGES[d.reason])
        elif d.reason is DecisionReason.HIT and view is not None:
            await self._clear_moot_failure(slot, view)
        if intent is not None:
            size = len(manifest or b"") + INTENT_ENVELOPE
            await self._intent(slot, *intent, batchable=batchable, size=size)
            self._sent()

    async def _intent(
        self,
        slot: Slot,
        intent: ApplyIntent | DeleteIntent,
        msg_id: str,
        *,
        batchable: bool,
        size: int,
    ) -> None:
        """A batchable apply goes in the next batch (``size``: about its encoded bytes; it is
        encoded once, with its batch); any other intent alone, on the object's subject, where
        it replaces a queued older one (an item of a batch cannot be)."""
        if self.batches is not None and isinstance(intent, ApplyIntent) and batchable:
            self.batches.add(slot, intent, size, telemetry.inject(None) or {})
            return
        if self.batches is not None:
            self.batches.withdraw(slot)  # a batched one not sent yet must not follow this one
        durable = await self.pub.publish_batched(
            bus.INTENTS, object_subject("intent", *slot), encode(intent), msg_id=msg_id
        )
        if self.batches is not None:
            self.batches.sent_alone(slot, durable)

    def _batched(self, intent: ApplyIntent | DeleteIntent, batchable: bool) -> bool:
        """Whether ``_intent`` puts ``intent`` in a batch (its test, for the record's path)."""
        return self.batches is not None and isinstance(intent, ApplyIntent) and batchable

    async def _record(self, record: DecisionRecord, *, alone: bool) -> None:
        """The decision's record, on the bus before its intent: a planner killed a moment
        after sending an intent has recorded why. With a lone intent it goes alone too, on
        the object's subject, in the fast batch the intent follows (one wire order); with a
        batched one, with the records its batch sends first (``IntentBatches.before_send``);
        a decision that writes nothing waits with the records of the moment."""
        if not alone:
            self.records.add(record)
            return
        subject = object_subject("decision", record.cluster, record.key)
        await self.pub.publish_batched(
            bus.DECISIONS,
            subject,
            encode(record),
            msg_id=f"decision:{self.planner_id}:{id(record)}:{messages.now()}",
        )

    async def _clear_moot_failure(self, slot: Slot, view: BundleView) -> None:
        """A hit on what was applied, after a failure of a manifest no longer desired: the
        object's row says Applied again (a rolled-back object must not show the failure of
        the revision that left)."""
        details = self.state.details
        outcome = details.outcome(slot)
        # most objects have no failure: their entry is not unpacked for this (a rebuild asks it
        # of every object)
        if outcome is None or not messages.moot_failure(outcome, self.state.entries[slot]):
            return
        details.drop_outcome(slot)
        health, _ = details.health(slot)
        await self._row(
            slot,
            view,
            ObjectPhase.APPLIED,
            f"revision {view.revision}: as applied; the failure of another manifest is moot",
            health,
        )

    async def _row(
        self,
        slot: Slot,
        view: BundleView,
        phase: ObjectPhase,
        message: str,
        health: Health = Health.UNKNOWN,
    ) -> None:
        status = messages.object_row(slot, self.state.entries[slot], view, phase, message, health)
        subject = object_status_subject(view.cluster, view.name, slot[1])
        await self.pub.publish_batched(
            bus.STATUS, subject, encode(status), msg_id=f"row:{subject}:{phase}:{messages.now()}"
        )
