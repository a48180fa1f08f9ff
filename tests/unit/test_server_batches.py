"""Facts in batches (issue 44): how a watcher cuts them, how watch events become bursts, how
every reader unpacks them (the watcher's and the appliers' alike), and when a planner lets
SERVER and APPLIED forget them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from schemas.codec import WireError, applied_events, encode, server_events
from schemas.messages import (
    AppliedEvent,
    Health,
    ObjectPhase,
    ObjectStatus,
    ServerEvent,
    ServerFacts,
)
from schemas.subjects import ObjectKey, batch_filter, batch_subject, object_subject
from services.applier.reports import AppliedReports
from services.planner.rule import checkpoint
from services.planner.rule.entry import Entry
from services.planner.shell.checkpointing import Checkpointer
from services.revisions.watch import decode_statuses
from services.stored import facts as stored_facts
from services.watcher.bursts import batches, bursts


@pytest.mark.parametrize(
    ("sizes", "most", "max_bytes", "cut"),
    [
        ([], 3, 100, []),
        ([10, 10, 10], 3, 100, [(0, 3)]),
        ([10] * 7, 3, 100, [(0, 3), (3, 6), (6, 7)]),
        ([40, 40, 40], 10, 100, [(0, 2), (2, 3)]),
        ([150, 10, 10], 10, 100, [(0, 1), (1, 3)]),
        ([10, 150, 10], 10, 100, [(0, 1), (1, 2), (2, 3)]),
        ([10, 10], 1, 100, [(0, 1), (1, 2)]),
    ],
    ids=["none", "one", "by-count", "by-bytes", "big-first", "big-alone", "one-each"],
)
def test_batches_cut_by_count_and_bytes(
    sizes: list[int], most: int, max_bytes: int, cut: list[tuple[int, int]]
) -> None:
    got = batches(sizes, most=most, max_bytes=max_bytes)
    assert [(r.start, r.stop) for r in got] == cut
    assert [i for r in got for i in r] == list(range(len(sizes)))  # every item, in order


async def _events(
    items: list[object], gaps: dict[int, float], error: Exception | None = None
) -> AsyncIterator[object]:
    for i, item in enumerate(items):
        if i in gaps:
            await asyncio.sleep(gaps[i])
        yield item
    if error is not None:
        raise error


async def _all(it: AsyncIterator[list[object]]) -> list[list[object]]:
    return [b async for b in it]


async def test_events_arriving_together_are_one_burst() -> None:
    got = await _all(bursts(_events(list(range(5)), {}), linger=0.05))
    assert got == [[0, 1, 2, 3, 4]]


async def test_a_pause_longer_than_the_linger_ends_a_burst() -> None:
    got = await _all(bursts(_events(list(range(4)), {2: 0.3}), linger=0.05))
    assert got == [[0, 1], [2, 3]]


async def test_a_burst_is_at_most_most_events() -> None:
    got = await _all(bursts(_events(list(range(7)), {}), most=3, linger=0.05))
    assert got == [[0, 1, 2], [3, 4, 5], [6]]


async def test_an_error_of_the_stream_comes_after_the_events_before_it() -> None:
    seen: list[list[object]] = []

    async def take() -> None:
        async for b in bursts(_events([1, 2], {}, RuntimeError("gone")), linger=0.05):
            seen.append(b)

    with pytest.raises(RuntimeError, match="gone"):
        await take()
    assert seen == [[1, 2]]


def _fact(cluster: str, name: str, rv: str = "5") -> ServerEvent:
    return ServerEvent(
        cluster=cluster,
        key=ObjectKey("", "ConfigMap", "ns", name),
        resource_version=rv,
        server_sha="0" * 64,
    )


def test_every_reader_unpacks_a_batch_and_a_single_fact_alike() -> None:
    facts = [_fact("c", "a"), _fact("c", "b"), _fact("c", "a", "6")]
    batch = encode(ServerFacts(cluster="c", events=facts))
    assert server_events(batch_subject("server", "c", "x1"), batch) == facts
    one = object_subject("server", "c", facts[0].key)
    assert server_events(one, encode(facts[0])) == facts[:1]


def test_a_fact_of_another_cluster_is_refused() -> None:
    """A watcher may publish on its own cluster's subjects only; a fact naming another cluster
    in its batch (or alone) must not reach that cluster's planner."""
    batch = encode(ServerFacts(cluster="c", events=[_fact("c", "a"), _fact("other", "b")]))
    with pytest.raises(WireError, match="other"):
        server_events(batch_subject("server", "c", "x1"), batch)
    with pytest.raises(WireError, match="other"):
        server_events(
            object_subject("server", "c", _fact("c", "a").key), encode(_fact("other", "a"))
        )
    with pytest.raises(WireError):
        server_events(batch_subject("server", "c", "x1"), b"{}")


def test_batch_subjects_are_outside_every_object_subject() -> None:
    assert batch_filter("server", "c") == "driftbus.server.c.batch.*"
    # an object key is four tokens: none matches batch.<id>, whatever its names
    subject = object_subject("server", "c", ObjectKey("batch", "x", "y", "z"))
    assert subject.count(".") == 6


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("writes", "at", "purgeable"),
    [
        ([], 0.0, None),
        ([(0.0, 10)], 59.0, None),
        ([(0.0, 10)], 60.0, 11),
        ([(0.0, 10), (30.0, 20)], 70.0, 11),
        ([(0.0, 10), (30.0, 20)], 90.0, 21),
        ([(0.0, 10), (30.0, 20), (80.0, 35)], 95.0, 21),
    ],
    ids=["none", "too-young", "old-enough", "newest-old-enough", "next", "the-newest-waits"],
)
def test_batches_are_purged_below_a_checkpoint_a_minute_old(
    writes: list[tuple[float, int]], at: float, purgeable: int | None
) -> None:
    """A reader that took the checkpoint before the newest still finds every fact after it:
    SERVER forgets only what a checkpoint written ``purge_after`` seconds ago covers."""
    clock = _Clock()
    cp = Checkpointer(
        state=None,  # type: ignore[arg-type]
        publisher=None,  # type: ignore[arg-type]
        alarms=None,  # type: ignore[arg-type]
        read_up_to=dict,
        interval=10.0,
        purge_after=60.0,
        clock=clock,
    )
    for when, seq in writes:
        # the applier's reports lag the watcher's facts by 5; outcomes are never batched
        cp._covered.append((clock.now + when, {"server": seq, "applied": seq - 5, "outcome": 9}))
    clock.now += at
    expected = {} if purgeable is None else {"server": purgeable, "applied": purgeable - 5}
    assert cp.purgeable() == expected


class _Publisher:
    """What ``AppliedReports`` asks of ``bus.Publisher``: a publish whose task resolves to the
    ack (or raises ``fail``)."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.sent: list[tuple[str, bytes]] = []
        self.fail = fail

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> asyncio.Task[None]:
        self.sent.append((subject, data))

        async def ack() -> None:
            if self.fail is not None:
                raise self.fail

        return asyncio.create_task(ack())


def _applied(name: str, seq: int, bundle: str = "b") -> AppliedEvent:
    return AppliedEvent(
        cluster="c",
        key=ObjectKey("", "ConfigMap", "ns", name),
        bundle=bundle,
        revision="r1",
        manifest_sha="0" * 64,
        apply_sha="1" * 64,
        resource_version=str(seq),
        intent_seq=seq,
    )


def _row(fact: AppliedEvent, phase: ObjectPhase = ObjectPhase.APPLIED) -> ObjectStatus:
    return ObjectStatus(
        cluster=fact.cluster,
        bundle=fact.bundle,
        revision=fact.revision,
        key=fact.key,
        phase=phase,
        apply_sha=fact.apply_sha if phase is ObjectPhase.APPLIED else None,
    )


async def test_facts_and_rows_of_one_moment_are_one_report() -> None:
    """One AppliedFacts for the planner, one ObjectRows per bundle for users (a tenant reads
    its bundles' rows by subject): here 5 intents of two bundles, one of them failed."""
    pub = _Publisher()
    reports = AppliedReports(pub, cluster="c", applier_id="a1", linger=0.05)  # type: ignore[arg-type]
    facts = [_applied(f"o{i}", i + 1, bundle="t/web" if i % 2 else "b") for i in range(5)]
    failed = _row(_applied("bad", 9), ObjectPhase.FAILED)
    # five intents of one batch (stream sequence 7), items 0-4, and a failed one (item 5)
    await asyncio.gather(
        *(reports.add(f, _row(f), (7, i)) for i, f in enumerate(facts)),
        reports.add(None, failed, (7, 5)),
    )
    assert len(pub.sent) == 3
    (subject, data), *rows = pub.sent
    assert subject.startswith("driftbus.applied.c.batch.")
    assert applied_events(subject, data) == facts  # in order, each as it would be alone
    shown = {s.split(".")[3]: decode_statuses(s, d) for s, d in rows}
    assert shown == {
        "=": [_row(facts[0]), _row(facts[2]), _row(facts[4]), failed],
        "t": [_row(facts[1]), _row(facts[3])],
    }
    assert all(
        s.startswith(("driftbus.status.c.=.b.rows.", "driftbus.status.c.t.web.rows."))
        for s, _ in rows
    )
    assert all(reports.carried_out((7, i)) for i in range(5))
    assert not reports.carried_out((7, 5))  # failed: nothing carried out
    assert not reports.carried_out((99, -1))


async def test_a_report_is_at_most_most_intents() -> None:
    pub = _Publisher()
    reports = AppliedReports(pub, cluster="c", applier_id="a1", linger=10.0, most=2)  # type: ignore[arg-type]
    facts = [_applied(f"o{i}", i + 1) for i in range(4)]
    await asyncio.gather(*(reports.add(f, _row(f)) for f in facts))
    assert len(pub.sent) == 4  # two reports of a fact message and a rows message each
    # never waited for the 10 s linger: each report was full


async def test_a_report_stays_under_nats_max_payload() -> None:
    """Rows carry the API server's error text, which may run to kilobytes: 256 of them in one
    message would pass NATS's 1 MiB, be refused, and fail every intent of the report again and
    again. Three rows of 300 KB are three reports."""
    pub = _Publisher()
    reports = AppliedReports(pub, cluster="c", applier_id="a1", linger=10.0)  # type: ignore[arg-type]
    failed = [
        msgspec.structs.replace(
            _row(_applied(f"o{i}", i + 1), ObjectPhase.FAILED), message="x" * 300_000
        )
        for i in range(3)
    ]
    pending = [asyncio.create_task(reports.add(None, r)) for r in failed]
    await asyncio.sleep(0.01)
    assert len(pub.sent) == 2  # the first two went when the next would not fit
    reports._flush()
    await asyncio.gather(*pending)
    assert len(pub.sent) == 3
    assert all(len(data) < 1024 * 1024 for _, data in pub.sent)


async def test_a_report_that_did_not_land_fails_every_intent_in_it() -> None:
    """Each intent of it stays unacked (redelivered), and none counts as carried out."""
    pub = _Publisher(fail=TimeoutError("no ack"))
    reports = AppliedReports(pub, cluster="c", applier_id="a1", linger=0.01)  # type: ignore[arg-type]
    facts = [_applied(f"o{i}", i + 1) for i in range(3)]
    got = await asyncio.gather(
        *(reports.add(f, _row(f), (i + 1, -1)) for i, f in enumerate(facts)),
        return_exceptions=True,
    )
    assert all(isinstance(g, TimeoutError) for g in got)
    assert not any(reports.carried_out((i + 1, -1)) for i in range(3))


def test_a_checkpoint_object_reads_back_as_the_facts_that_made_it() -> None:
    """What a reader of a checkpoint takes for an object's newest server and applied fact is
    what the planner folded from them (``stored.facts`` over ``rule.checkpoint.to_object``)."""
    key = ObjectKey("apps", "Deployment", "ns", "web")
    entry = Entry(
        key,
        applied_manifest_sha=bytes(32),
        apply_sha=b"\x01" * 32,
        applied_rv=7,
        applied_bundle="t/web",
        applied_revision="r2",
        applied_at=1_700_000_000.0,
        server_sha=b"\x01" * 32,
        server_rv=9,
        owner_bundle="t/web",
        api_version="apps/v1",
    )
    o = checkpoint.to_object(key, entry, (Health.READY, "ready: 1/1", None))
    live = stored_facts.as_event("c", o)
    assert live is not None
    assert (live.key, live.resource_version, live.server_sha, live.deleted) == (
        key,
        "9",
        "01" * 32,
        False,
    )
    assert (live.health, live.health_message, live.api_version, live.bundle) == (
        Health.READY,
        "ready: 1/1",
        "apps/v1",
        "t/web",
    )
    done = stored_facts.as_applied("c", o)
    assert done is not None
    assert (done.manifest_sha, done.apply_sha, done.resource_version, done.revision) == (
        "00" * 32,
        "01" * 32,
        "7",
        "r2",
    )
    assert done.applied_at is not None
    assert done.applied_at.timestamp() == 1_700_000_000.0
    # desired only (nothing applied, never seen live): neither fact
    nothing = checkpoint.to_object(key, Entry(key))
    assert stored_facts.as_event("c", nothing) is None
    assert stored_facts.as_applied("c", nothing) is None


@pytest.mark.parametrize(
    ("order", "kept"),
    [
        (["apply@7", "apply@9"], "apply@9"),
        (["apply@9", "apply@7"], "apply@9"),  # two appliers finishing in reverse
        (["apply@7", "prune@9"], "prune@9"),
        (["apply@7", "prune@0"], "prune@0"),  # a prune that found it gone reports no rv
        (["prune@0", "apply@7"], "apply@7"),  # created again since
    ],
)
def test_a_reader_keeps_each_objects_newest_applied_fact(order: list[str], kept: str) -> None:
    """What a reader of APPLIED batches keeps is what the planner's rebuild (``restore``)
    makes the applied state: the newer resourceVersion, and a prune without one ends it."""
    into: dict[ObjectKey, AppliedEvent] = {}
    for what in order:
        verb, rv = what.split("@")
        fact = _applied("o", int(rv))
        stored_facts.fold(into, msgspec.structs.replace(fact, deleted=verb == "prune"))
    got = into[ObjectKey("", "ConfigMap", "ns", "o")]
    assert f"{'prune' if got.deleted else 'apply'}@{got.resource_version}" == kept
