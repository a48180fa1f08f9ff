"""Compare-and-publish against a real nats-server: a compacted stream keeps the newest fact of an
object, not the last one published (``services/common/bus/newest.py``).

Why it matters is shown by ``tests/unit/test_decide_properties.py``: a restarted planner believes
the one fact per object that SERVER and APPLIED keep, so a lagging watcher's (or a slow
applier's) older fact landing last would hide a drift for good.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from nats.js import JetStreamContext

from schemas.codec import decode
from schemas.messages import Health, ServerEvent
from schemas.subjects import ObjectKey, object_subject
from services.common import bus
from services.common.bus.newest import Survivor, publish_newest
from services.kube import KubeClient
from services.watcher.facts import Seen
from services.watcher.settings import WatcherSettings
from services.watcher.watch import Watcher

from ..conftest import unique_name


def by_number(ours: int) -> Callable[[bytes], bool]:
    """Facts here are just their version number."""
    return lambda other: ours > int(other)


async def survivor(js: JetStreamContext, subject: str) -> tuple[str, str]:
    """(watcher, resourceVersion) of the fact SERVER keeps on ``subject``."""
    last = await bus.last_message(js, bus.SERVER, subject)
    assert last is not None
    assert last.data is not None
    ev = decode(last.data, ServerEvent)
    return ev.watcher, ev.resource_version


async def test_the_newest_of_many_racing_writers_survives_whatever_order_they_land_in(
    js: JetStreamContext,
) -> None:
    await bus.ensure_streams(js)
    subject = f"driftbus.server.{unique_name('race')}.g.k.ns.n"
    versions = list(range(1, 41))
    random.Random(7).shuffle(versions)
    writers = [bus.Publisher(js) for _ in range(4)]  # each knows nothing of the others

    async def write(i: int, rv: int) -> Survivor:
        await asyncio.sleep(random.Random(rv).random() / 50)
        return await publish_newest(
            writers[i % 4],
            js,
            bus.SERVER,
            subject,
            str(rv).encode(),
            msg_id=f"{subject}@{rv}",
            supersedes=by_number(rv),
            last_seq=0,
        )

    results = await asyncio.gather(*(write(i, rv) for i, rv in enumerate(versions)))
    last = await bus.last_message(js, bus.SERVER, subject)
    assert last is not None
    assert last.data == b"40"
    assert sum(r.landed for r in results) < len(versions), "some lost the race and were dropped"
    assert all(r.landed or int(r.data) > rv for r, rv in zip(results, versions, strict=True))


async def test_an_older_fact_is_dropped_and_the_caller_learns_the_survivor(
    js: JetStreamContext,
) -> None:
    await bus.ensure_streams(js)
    subject = f"driftbus.applied.{unique_name('older')}.g.k.ns.n"
    pub = bus.Publisher(js)
    newer = await publish_newest(
        pub, js, bus.APPLIED, subject, b"9", msg_id="nine", supersedes=by_number(9)
    )
    older = await publish_newest(
        pub, js, bus.APPLIED, subject, b"4", msg_id="four", supersedes=by_number(4)
    )
    assert newer.landed
    assert not older.landed
    assert (older.seq, older.data) == (newer.seq, b"9")


async def test_a_retried_publish_that_had_landed_counts_as_landed_and_is_not_stored_twice(
    js: JetStreamContext,
) -> None:
    # JetStream checks the expected sequence before deduplicating: the retry of a publish whose
    # ack was lost is refused as a wrong sequence; the re-read must recognise our own message.
    await bus.ensure_streams(js)
    subject = f"driftbus.server.{unique_name('retry')}.g.k.ns.n"
    pub = bus.Publisher(js)
    first = await publish_newest(
        pub, js, bus.SERVER, subject, b"5", msg_id="five", supersedes=by_number(5), last_seq=0
    )
    again = await publish_newest(
        pub, js, bus.SERVER, subject, b"5", msg_id="five", supersedes=by_number(5), last_seq=0
    )
    assert first.landed
    assert again.landed
    assert again.seq == first.seq
    info = await js.stream_info(bus.SERVER, subjects_filter=subject)
    assert info.state.subjects == {subject: 1}
    assert pub.errors == 0, "a refused compare is not a publish failure"


async def test_a_lagging_watcher_never_overwrites_the_fact_of_one_ahead_of_it(
    js: JetStreamContext, kube: KubeClient
) -> None:
    """Two watchers of one cluster (active-active), both seeded from SERVER; the one ahead
    publishes the object at rv 7, then the lagging one — which still holds the seed's
    sequence — publishes rv 5 of the same object. SERVER keeps rv 7, the lagging watcher adopts
    it, and its own next change (rv 9) lands."""
    await bus.ensure_streams(js)
    cluster = unique_name("lag")
    key = ObjectKey("", "ConfigMap", "ns", "cm")
    watchers = []
    for name in ("ahead", "behind"):
        settings = WatcherSettings(cluster=cluster, watcher_id=name)
        w = Watcher(settings=settings, js=js, kube=kube, publisher=bus.Publisher(js))
        await w._seed()
        watchers.append(w)
    ahead, behind = watchers

    def fact(rv: int, who: str) -> ServerEvent:
        return ServerEvent(
            cluster=cluster,
            key=key,
            resource_version=str(rv),
            server_sha=f"{rv:064x}",
            health=Health.READY,
            api_version="v1",
            bundle="b",
            watcher=who,
        )

    def seen(rv: int) -> Seen:
        return Seen(bytes.fromhex(f"{rv:064x}"), Health.READY, rv)

    await ahead._publish_all([(seen(7), fact(7, "ahead"))])
    await behind._publish_all([(seen(5), fact(5, "behind"))])
    subject = object_subject("server", cluster, key)
    assert await survivor(js, subject) == ("ahead", "7")
    assert behind.cache[key].rv == 7, "the lagging watcher remembers what SERVER holds"
    assert behind.published == 0

    await behind._publish_all([(seen(9), fact(9, "behind"))])
    assert await survivor(js, subject) == ("behind", "9")
