"""Which overdue intents are lost (``shell.lost_intents``): one look at the cluster decides for
every overdue object, and a batch still landing is never taken for a lost one."""

from __future__ import annotations

import asyncio

import pytest

from schemas.subjects import ObjectKey, batch_subject, object_subject
from services.planner.shell.intent_batches import IntentBatches, alone
from services.planner.shell.lost_intents import Look, Verdict, verdict

from .test_intent_batches import _intent, _key, _Publisher

KEY = ObjectKey("", "ConfigMap", "ns", "a")
OWN = object_subject("intent", "c", KEY)
BATCH = batch_subject("intent", "c", "b1")
OTHER_BATCH = batch_subject("intent", "c", "b2")


@pytest.mark.parametrize(
    ("batch", "queued", "unread", "expected"),
    [
        pytest.param(BATCH, {BATCH}, set(), Verdict.QUEUED, id="its-batch-is-queued"),
        pytest.param(BATCH, {BATCH, OWN}, set(), Verdict.QUEUED, id="batch-first"),
        pytest.param(None, {OWN}, set(), Verdict.ASK, id="alone-on-its-subject: read-it"),
        pytest.param(None, {OWN}, set(), Verdict.QUEUED, id="alone-landed: queued-is-it"),
        pytest.param(BATCH, {OTHER_BATCH, OWN}, set(), Verdict.ASK, id="batch-gone-own-queued"),
        pytest.param(BATCH, {OTHER_BATCH}, {KEY}, Verdict.ANSWERED, id="its-fact-is-unread"),
        pytest.param(None, set(), None, Verdict.ANSWERED, id="followers-behind: wait"),
        pytest.param(BATCH, {OTHER_BATCH}, set(), Verdict.LOST, id="batch-gone-no-fact"),
        pytest.param(None, set(), {_key("b")}, Verdict.LOST, id="alone-gone-another-fact"),
    ],
)
def test_verdict(
    request: pytest.FixtureRequest,
    batch: str | None,
    queued: set[str],
    unread: set[ObjectKey] | None,
    expected: Verdict,
) -> None:
    look = Look(frozenset(queued), None if unread is None else frozenset(unread))
    doubtful = "landed" not in request.node.callspec.id
    assert verdict(KEY, batch, OWN, look, doubtful=doubtful) is expected


async def test_an_intent_sent_alone_is_doubtful_only_if_it_did_not_land() -> None:
    """What waits on an object's subject is its latest intent unless that one failed to land
    (then it may be an older one): only those are read, not 40,000 queued single intents."""
    b = IntentBatches(_Publisher(), cluster="c", planner_id="p1")  # type: ignore[arg-type]
    slot = ("c", KEY)

    async def landed() -> None:
        return None

    async def failed() -> None:
        raise TimeoutError("no ack")

    for outcome, doubtful in ((failed, True), (landed, False), (failed, True)):
        task = asyncio.ensure_future(outcome())
        b.sent_alone(slot, task)
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
        assert (slot in b.doubtful) is doubtful
    b.forget(slot)  # its fact came: nothing to doubt
    assert slot not in b.doubtful


def test_alone_keeps_the_subjects_of_single_intents_only() -> None:
    job = object_subject("intent", "c", ObjectKey("batch", "Job", "ns", "j"))  # group "batch"
    assert alone(frozenset({OWN, BATCH, job})) == {OWN, job}


async def test_a_batch_is_landing_from_its_flush_until_it_is_durable() -> None:
    """The memory benchmark's take-over sent the last batches of its go-live a moment before
    the first lost-intent round: not yet on the queue, they looked lost and were sent again."""
    pub = _Publisher()
    b = IntentBatches(pub, cluster="c", planner_id="p1", linger=10.0)  # type: ignore[arg-type]
    b.add(("c", _key("a")), _intent("a"), 10, {})
    b.flush()
    subject = b.queued_in[("c", _key("a"))]
    assert b.landing == {subject}
    await b.drain()
    assert b.landing == set()
    assert b.sent == 1


async def test_a_batch_that_failed_is_not_landing_any_more() -> None:
    b = IntentBatches(
        _Publisher(fail=TimeoutError("no ack")),  # type: ignore[arg-type]
        cluster="c",
        planner_id="p1",
        linger=0.0,
    )
    b.add(("c", _key("a")), _intent("a"), 10, {})
    await b.drain()
    await asyncio.sleep(0)
    assert (b.landing, b.sent) == (set(), 0)
