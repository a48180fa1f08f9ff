"""``driftbus notify`` over messages that carry several records (issue 44: a planner's
``DecisionRecords``): each record is an event of its own, and the message is acknowledged
once, after every event of it was sent."""

from __future__ import annotations

import asyncio
import datetime as dt
import types
from typing import Any

from schemas.codec import encode
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord, DecisionRecords
from schemas.subjects import ObjectKey, decision_batch_subject
from services.common import bus
from services.notify.consume import Decided, Decisions, Worker, events_of
from services.notify.events import EventKind
from services.notify.notifier import Send

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def record(name: str, reason: DecisionReason, action: DecisionAction) -> DecisionRecord:
    return DecisionRecord(
        cluster="c",
        key=ObjectKey("", "ConfigMap", "ns", name),
        bundle="team-a/web",
        revision="r1",
        action=action,
        reason=reason,
        at=NOW,
    )


class Msg:
    def __init__(self, subject: str, data: bytes, seq: int) -> None:
        self.subject, self.data = subject, data
        self.reply = f"$JS.ACK.DRIFTBUS_DECISIONS.notify-decisions.1.{seq}.{seq}.0.0"
        self.metadata = types.SimpleNamespace(timestamp=NOW)
        self.acks = 0

    async def ack(self) -> None:
        self.acks += 1


def test_each_record_of_a_batch_is_an_event_in_order() -> None:
    records = [
        record("a", DecisionReason.DRIFT, DecisionAction.APPLY),
        record("b", DecisionReason.NEW, DecisionAction.APPLY),  # not a notification
        record("c", DecisionReason.DELETED, DecisionAction.APPLY),
    ]
    data = encode(DecisionRecords(cluster="c", records=records))
    msg: Any = Msg(decision_batch_subject("c", "4", "x"), data, 7)
    got = events_of(bus.DECISIONS, msg)
    assert [(e.kind, e.object, e.detail) for e in got] == [
        (EventKind.DRIFT_CORRECTED, str(records[0].key), "drift"),
        (EventKind.DRIFT_CORRECTED, str(records[2].key), "deleted"),
    ]


def test_an_unreadable_batch_is_no_event() -> None:
    msg: Any = Msg(decision_batch_subject("c", "4", "x"), b'{"records": 3}', 7)
    assert events_of(bus.DECISIONS, msg) == []


async def test_a_message_of_two_events_is_acked_once_both_are_sent() -> None:
    dispatched: list[Any] = []

    class Notifier:
        def dispatch(self, event: Any, sends: Any, done: Any) -> None:
            dispatched.append((event, sends, done))

    decisions = Decisions()
    worker = Worker(
        Notifier(), bus.DECISIONS, decisions, max_age=3600, ack_wait=30, clock=lambda: NOW
    )  # type: ignore[arg-type]
    events = events_of(
        bus.DECISIONS,
        Msg(
            decision_batch_subject("c", "4", "x"),
            encode(
                DecisionRecords(
                    cluster="c",
                    records=[
                        record("a", DecisionReason.DRIFT, DecisionAction.APPLY),
                        record("b", DecisionReason.DRIFT, DecisionAction.APPLY),
                    ],
                )
            ),
            7,
        ),  # type: ignore[arg-type]
    )
    send = (Send("k", "slack"),)
    await decisions.put(7, Decided(tuple((e, send) for e in events)))
    msg = Msg("driftbus.decision.c.batch.4.x", b"", 7)
    await worker.handle(msg)  # type: ignore[arg-type]
    assert [d[0].object for d in dispatched] == [e.object for e in events]
    dispatched[0][2]()
    await asyncio.sleep(0)
    assert msg.acks == 0  # one event still being sent: delivered again if this replica dies
    dispatched[1][2]()
    await asyncio.sleep(0)
    assert msg.acks == 1
