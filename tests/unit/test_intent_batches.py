"""Intents in batches (issue 44): the planner's ``IntentBatches`` and what the lost-intent check
reads of a batch (``rule.messages.is_inflight``)."""

from __future__ import annotations

import asyncio

import pytest

from schemas.codec import WireError, decode, encode
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.messages import ApplyIntent, DeleteIntent, IntentBatch, Queued
from schemas.subjects import ObjectKey
from services.planner.rule.entry import Entry
from services.planner.rule.messages import is_inflight
from services.planner.shell.decision_batches import DecisionBatches
from services.planner.shell.intent_batches import IntentBatches

SHA = "ab" * 32


class _Publisher:
    """What ``IntentBatches`` asks of ``bus.Publisher``: a publish whose task resolves (or
    raises ``fail``)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[tuple[str, bytes, str]] = []
        self.fail = fail

    async def publish_batched(
        self, stream: str, subject: str, data: bytes, *, msg_id: str
    ) -> asyncio.Task[None]:
        self.sent.append((subject, data, msg_id))

        async def ack() -> None:
            if self.fail is not None:
                raise self.fail

        return asyncio.create_task(ack())


def _key(name: str) -> ObjectKey:
    return ObjectKey("", "ConfigMap", "ns", name)


def _intent(name: str, sha: str = SHA) -> ApplyIntent:
    return ApplyIntent(
        cluster="c",
        key=_key(name),
        bundle="b",
        revision="r1",
        manifest_sha=sha,
        manifest={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
        reason="new",
    )


def _batches(pub: _Publisher, **kw: float) -> IntentBatches:
    return IntentBatches(pub, cluster="c", planner_id="p1", **kw)  # type: ignore[arg-type]


def _sent(pub: _Publisher) -> list[IntentBatch]:
    return [decode(data, IntentBatch) for _, data, _ in pub.sent]


async def test_intents_of_one_moment_are_one_batch_in_the_order_decided() -> None:
    pub = _Publisher()
    b = _batches(pub, linger=0.02)
    for i in range(5):
        b.add(("c", _key(f"o{i}")), _intent(f"o{i}"), 100, {})
    assert pub.sent == []  # lingering
    await b.drain()
    (subject, _, msg_id), *rest = pub.sent
    assert rest == []
    assert subject.startswith("driftbus.intent.c.batch.")
    assert msg_id == subject
    (batch,) = _sent(pub)
    assert [i.key.name for i in batch.intents] == [f"o{i}" for i in range(5)]
    assert batch.traces == []
    assert batch.planner == "p1"
    assert b.queued_in == {("c", _key(f"o{i}")): subject for i in range(5)}


@pytest.mark.parametrize(
    ("most", "max_bytes", "sizes", "expected"),
    [
        (2, 10_000, [10] * 5, [2, 2, 1]),  # full by count: sent at once, the rest after the linger
        (32, 250, [100] * 5, [2, 2, 1]),  # full by bytes
        (32, 50, [100, 100], [1, 1]),  # one bigger than the limit still goes, alone
    ],
)
async def test_a_batch_is_bounded_by_count_and_bytes(
    most: int, max_bytes: int, sizes: list[int], expected: list[int]
) -> None:
    pub = _Publisher()
    b = _batches(pub, linger=10.0, most=most, max_bytes=max_bytes)
    for i, size in enumerate(sizes):
        b.add(("c", _key(f"o{i}")), _intent(f"o{i}"), size, {})
    await b.drain()
    assert [len(x.intents) for x in _sent(pub)] == expected


async def test_a_withdrawn_intent_is_not_sent_and_not_looked_up() -> None:
    """An intent superseded before its batch left (it then goes alone, on its subject)."""
    pub = _Publisher()
    b = _batches(pub, linger=10.0)
    b.add(("c", _key("a")), _intent("a"), 10, {})
    b.add(("c", _key("b")), _intent("b"), 10, {})
    b.withdraw(("c", _key("a")))
    await b.drain()
    assert [i.key.name for x in _sent(pub) for i in x.intents] == ["b"]
    assert ("c", _key("a")) not in b.queued_in


async def test_a_batch_that_did_not_land_is_logged_not_raised() -> None:
    """Its intents stay in flight: the lost-intent check sends them again, alone."""
    pub = _Publisher(fail=TimeoutError("no ack"))
    b = _batches(pub, linger=0.0)
    b.add(("c", _key("a")), _intent("a"), 10, {})
    await b.drain()
    assert b.sent == 0
    assert len(pub.sent) == 1


async def test_traces_travel_per_intent() -> None:
    pub = _Publisher()
    b = _batches(pub, linger=10.0)
    b.add(
        ("c", _key("a")),
        _intent("a"),
        10,
        {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"},
    )
    b.add(("c", _key("b")), _intent("b"), 10, {})
    await b.drain()
    (batch,) = _sent(pub)
    assert batch.traces[1] == {}
    assert "traceparent" in batch.traces[0]


def _entry(name: str, inflight: bytes | None) -> Entry:
    return Entry(_key(name), inflight=inflight)


@pytest.mark.parametrize(
    ("queued", "entry", "expected"),
    [
        (
            IntentBatch(cluster="c", intents=[_intent("a"), _intent("b")]),
            _entry("b", bytes.fromhex(SHA)),
            True,
        ),
        (IntentBatch(cluster="c", intents=[_intent("a")]), _entry("b", bytes.fromhex(SHA)), False),
        (
            IntentBatch(cluster="c", intents=[_intent("b", "cd" * 32)]),
            _entry("b", bytes.fromhex(SHA)),
            False,
        ),
        (_intent("b"), _entry("b", bytes.fromhex(SHA)), True),
        (
            DeleteIntent(cluster="c", key=_key("b"), api_version="v1", bundle="b", revision="r"),
            _entry("b", bytes.fromhex(SHA)),
            False,
        ),
    ],
)
def test_the_lost_intent_check_finds_the_object_in_a_queued_batch(
    queued: Queued, entry: Entry, expected: bool
) -> None:
    assert is_inflight(encode(queued), entry) is expected


def test_a_batch_of_another_shape_is_refused_by_name() -> None:
    with pytest.raises(WireError, match=r"not a valid"):
        decode(b'{"schema": "driftbus.intent-batch/v1", "cluster": "c", "intents": [{}]}', Queued)


async def test_a_batchs_records_are_published_before_it() -> None:
    """Found by ``test_hooks``: a planner SIGKILLed just after a batch left lost the records
    of its intents (they waited 200 ms for others), so ``why`` never explained those writes.
    The records waiting go first, on the same publisher: publish order is wire order."""
    pub = _Publisher()
    records = DecisionBatches(pub, cluster="c", planner_id="p1", linger=60.0)  # type: ignore[arg-type]
    b = _batches(pub, linger=60.0, most=2)
    b.before_send = records.send_waiting
    for name in ("o1", "o2"):
        records.add(
            DecisionRecord(
                cluster="c",
                key=_key(name),
                bundle="b",
                revision="r1",
                action=DecisionAction.APPLY,
                reason=DecisionReason.NEW,
            )
        )
        b.add(("c", _key(name)), _intent(name), 100, {})  # the second fills the batch
    await b.drain()
    await records.drain()
    families = [subject.split(".")[1] for subject, _, _ in pub.sent]
    assert families[-1] == "intent"
    assert set(families[:-1]) == {"decision"}
    assert len(families) >= 2
