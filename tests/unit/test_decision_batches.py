"""Decision records sent together, one message per shelf (issue 44):
``planner.shell.decision_batches``, the shelf of a name (``schemas.subjects.decision_shelf``)
and how a DECISIONS message reads back (``schemas.codec.decision_records``)."""

from __future__ import annotations

import asyncio
import collections
import logging

import msgspec
import pytest

from schemas.codec import WireError, applied_events, decision_records, encode, server_events
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord, DecisionRecords
from schemas.messages import AppliedEvent, Bundle, ServerEvent
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    decision_batch_subject,
    decision_shelf,
    decision_shelf_filter,
    object_subject,
    parse_subject,
)
from services.planner.memory.cluster import ClusterState
from services.planner.rule.revision import BundleView
from services.planner.shell.decision_batches import DecisionBatches
from services.planner.shell.status_board import StatusBoard


def record(name: str, namespace: str = "ns", cluster: str = "c") -> DecisionRecord:
    return DecisionRecord(
        cluster=cluster,
        key=ObjectKey("", "ConfigMap", namespace, name),
        bundle="b",
        revision="r1",
        action=DecisionAction.APPLY,
        reason=DecisionReason.NEW,
    )


class _Publisher:
    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.fail = fail

    async def publish_batched(
        self, stream: str, subject: str, data: bytes, *, msg_id: str
    ) -> asyncio.Task[None]:
        assert msg_id == subject  # a retry across a reconnect lands once
        self.sent.append((subject, data))

        async def ack() -> None:
            if self.fail is not None:
                raise self.fail

        return asyncio.create_task(ack())


@pytest.mark.parametrize(
    ("namespace", "name", "shelf"),
    [("ns", "web", "4"), ("", "cluster-admin", "c"), ("kube-system", "coredns", "1")],
)
def test_a_name_is_always_on_the_same_shelf(namespace: str, name: str, shelf: str) -> None:
    """The shelf is part of the wire contract: a reader of another version must find it."""
    assert decision_shelf(namespace, name) == shelf


def test_names_spread_over_every_shelf() -> None:
    shelves = collections.Counter(decision_shelf("ns", f"cm-{i}") for i in range(1600))
    assert len(shelves) == 16
    assert max(shelves.values()) < 2 * min(shelves.values())


def test_a_shelf_subject_reads_back_and_a_bad_shelf_is_refused() -> None:
    subject = decision_batch_subject("c", "a", "id1")
    assert subject == "driftbus.decision.c.batch.a.id1"
    assert subject.startswith(decision_shelf_filter("c", "a").removesuffix("*"))
    assert parse_subject(subject).family == "decision"
    assert parse_subject(subject).key is None
    for shelf in ("", "g", "ab", "*"):
        with pytest.raises(SubjectError):
            decision_batch_subject("c", shelf, "id1")


async def test_records_of_a_moment_are_one_message_per_shelf() -> None:
    pub = _Publisher()
    batches = DecisionBatches(pub, cluster="c", planner_id="p1", linger=0.01)  # type: ignore[arg-type]
    made = [record(f"cm-{i}") for i in range(40)]
    for r in made:
        batches.add(r)
    await batches.drain()
    by_shelf = collections.defaultdict(list)
    for r in made:
        by_shelf[decision_shelf(r.key.namespace, r.key.name)].append(r)
    assert len(pub.sent) == len(by_shelf)
    for subject, data in pub.sent:
        shelf = subject.split(".")[4]
        # each record as it would be alone, in the order made, on its own name's shelf
        assert decision_records(subject, data) == by_shelf[shelf]
    assert batches.sent == len(by_shelf)


async def test_most_records_flush_at_once() -> None:
    pub = _Publisher()
    batches = DecisionBatches(pub, cluster="c", planner_id="p1", linger=60.0, most=3)  # type: ignore[arg-type]
    for _ in range(3):
        batches.add(record("same"))
    await asyncio.sleep(0)
    assert len(pub.sent) == 1  # full: sent without waiting the minute
    batches.add(record("same"))
    await asyncio.sleep(0)
    assert len(pub.sent) == 1  # waits for others
    await batches.drain()
    assert len(pub.sent) == 2


async def test_a_shelf_too_big_for_one_message_is_split_in_order() -> None:
    pub = _Publisher()
    bound = 4096
    batches = DecisionBatches(pub, cluster="c", planner_id="p1", linger=60.0, most_bytes=bound)  # type: ignore[arg-type]
    # the same name of many kinds is one shelf; long windows make the shelf's message too big
    made = [
        msgspec.structs.replace(
            record("same"), key=ObjectKey("", f"Kind{i}", "ns", "same"), window="w" * 500
        )
        for i in range(30)
    ]
    for r in made:
        batches.add(r)
    await batches.drain()
    assert len(pub.sent) > 1
    assert all(len(data) <= bound for _, data in pub.sent)
    read = [r for subject, data in pub.sent for r in decision_records(subject, data)]
    assert read == made  # every record, once, in the order made
    assert batches.sent == len(pub.sent)


async def test_records_that_did_not_land_are_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pub = _Publisher(fail=TimeoutError("no ack"))
    batches = DecisionBatches(pub, cluster="c", planner_id="p1", linger=0.01)  # type: ignore[arg-type]
    batches.add(record("a"))
    batches.add(record("a"))
    with caplog.at_level(logging.ERROR, logger="driftbus.planner"):
        await batches.drain()
    assert "cluster c: 2 decision records were not published: no ack" in caplog.text
    assert batches.sent == 0


def test_a_message_reads_as_its_records() -> None:
    one = record("a")
    assert decision_records(object_subject("decision", "c", one.key), encode(one)) == [one]
    subject = decision_batch_subject("c", decision_shelf("ns", "a"), "x")
    many = DecisionRecords(cluster="c", records=[one, one])
    assert decision_records(subject, encode(many)) == [one, one]


def test_a_job_alone_is_not_a_batch() -> None:
    """A Job's key begins with its group, ``batch``: its per-object subject (written before
    issue 44, still read) is not mistaken for a batch's, in any fact stream."""
    job = ObjectKey("batch", "Job", "ns", "j")
    rec = msgspec.structs.replace(record("j"), key=job)
    assert decision_records(object_subject("decision", "c", job), encode(rec)) == [rec]
    server = ServerEvent(
        cluster="c", key=job, api_version="batch/v1", server_sha="0" * 64, resource_version="1"
    )
    assert server_events(object_subject("server", "c", job), encode(server)) == [server]
    applied = AppliedEvent(
        cluster="c",
        key=job,
        bundle="b",
        revision="r1",
        manifest_sha="0" * 64,
        apply_sha="1" * 64,
        resource_version="1",
    )
    assert applied_events(object_subject("applied", "c", job), encode(applied)) == [applied]


@pytest.mark.parametrize(
    ("why", "subject", "data"),
    [
        ("a batch on a record's subject", "driftbus.decision.c.=.ConfigMap.ns.a",
         encode(DecisionRecords(cluster="c", records=[record("a")]))),
        ("a record on a batch's subject", "driftbus.decision.c.batch.1.x", encode(record("a"))),
        ("another cluster's record", "driftbus.decision.c.batch.1.x",
         encode(DecisionRecords(cluster="c", records=[record("a", cluster="d")]))),
        ("not JSON", "driftbus.decision.c.batch.1.x", b"{"),
    ],
)  # fmt: skip
def test_what_a_message_cannot_be(why: str, subject: str, data: bytes) -> None:
    with pytest.raises(WireError):
        decision_records(subject, data)


class _Wire:
    """A publisher whose messages land (are acked) only when the test lets them: what reached
    the bus, in order."""

    def __init__(self) -> None:
        self.landed: list[str] = []

    async def publish(self, subject: str, data: bytes, **_: object) -> asyncio.Task[None]:
        async def ack() -> None:
            await asyncio.sleep(0.01)  # the round trip: a status queued meanwhile goes after
            self.landed.append(subject)

        return asyncio.create_task(ack())

    async def publish_batched(
        self, stream: str, subject: str, data: bytes, **kw: object
    ) -> asyncio.Task[None]:
        return await self.publish(subject, data, **kw)


async def test_a_bundle_status_lands_after_the_records_that_explain_it() -> None:
    """Found in review: ``flush`` only scheduled the records' publishes, and the status was
    published first, so ``why`` right after ``publish --wait`` could miss the decisions behind
    a Ready. The records are now published (queued, in the fast batch) before the status;
    this wire acknowledges in publish order."""
    wire = _Wire()
    state = ClusterState("c")
    view = BundleView.of(Bundle(cluster="c", bundle="web", revision="r1"), 1)
    state.bundles[("c", "web")] = view
    records = DecisionBatches(wire, cluster="c", planner_id="p1", linger=60.0)  # type: ignore[arg-type]
    board = StatusBoard(state=state, publisher=wire)  # type: ignore[arg-type]
    board.before_publish = records.send_waiting
    records.add(record("a"))
    board.mark(("c", "web"))
    await board.publish_changed()
    await asyncio.sleep(0.05)
    assert wire.landed[0].startswith("driftbus.decision.c.batch.")
    assert wire.landed[-1] == "driftbus.status.c.=.web.bundle"
    assert len(wire.landed) == 2


async def test_a_planner_stopping_says_which_records_did_not_land(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Stuck:
        async def publish_batched(
            self, stream: str, subject: str, data: bytes, **_: object
        ) -> asyncio.Task[None]:
            return asyncio.create_task(asyncio.sleep(3600))

    records = DecisionBatches(Stuck(), cluster="c", planner_id="p1")  # type: ignore[arg-type]
    records.add(record("a"))
    with caplog.at_level(logging.ERROR, logger="driftbus.planner"):
        await records.drain(within=0.05)
    assert "cluster c: 1 messages of decision records not published before stopping" in caplog.text
