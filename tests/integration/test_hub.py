"""A planner replica's consumers do not grow with its clusters (issue 43): the hub follows each
stream once for all of them, and a cluster's replay at start uses consumers that go away.

Real nats-server, real planner process; the quiet clusters are names with a bundle and nobody
serving them, which a planner claims and plans like any other."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, until_planner_ready
from schemas.messages import BundleOptions
from services.common import bus
from services.revisions.publish import publish_bundle

from ..conftest import unique_name
from .test_scaling import configmaps

pytestmark = pytest.mark.timeout(240)


async def consumers(nc: NATS) -> dict[str, int]:
    """Consumers per stream, but the appliers' work queue (one durable per served cluster)."""
    jsm = nc.jsm()
    out = {}
    for info in await jsm.streams_info():
        name = info.config.name
        if name and name != bus.INTENTS:
            out[name] = info.state.consumer_count
    return out


async def published(
    nc: NATS, js: Any, clusters: list[str], bundle: str, ns: str, within: float
) -> None:
    """Publish ``bundle`` to every one of ``clusters``, then wait until the planner published
    its status on each (it does once the cluster's replay is done and it is live)."""
    watches = []
    for c in clusters:
        w = StatusWatch()
        await w.start(nc, c, bundle, objects=False)
        watches.append(w)
    for c in clusters:
        await publish_bundle(
            js,
            cluster=c,
            bundle=bundle,
            revision="r1",
            manifests=configmaps(ns, 3),
            options=BundleOptions(),
            manage_streams=True,
            within=60,
        )
    deadline = time.monotonic() + within
    while not all(w.bundles for w in watches):
        assert time.monotonic() < deadline, "the planner did not go live on every cluster"
        await asyncio.sleep(0.2)
    for w in watches:
        await w.stop()


async def settled(nc: NATS, expected: int, within: float) -> dict[str, int]:
    """Until the consumers add up to ``expected`` (the replays' consumers are ephemeral and go
    once unsubscribed); the last count either way."""
    deadline = time.monotonic() + within
    while True:
        counts = await consumers(nc)
        if sum(counts.values()) == expected or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.5)


async def test_consumers_do_not_grow_with_clusters(
    pipeline: Pipeline, pnc: NATS, namespace: str
) -> None:
    js = pnc.jetstream()
    bundle = unique_name("quiet")
    pipeline.start_all()
    await until_planner_ready(js)
    # three clusters: the served one and two nobody serves
    first = [pipeline.cluster, unique_name("q"), unique_name("q")]
    await published(pnc, js, first, bundle, namespace, 60)
    # the replays' consumers are gone within the server's inactivity threshold (5 s)
    await asyncio.sleep(6)
    before = await consumers(pnc)

    more = [unique_name("q") for _ in range(30)]
    await published(pnc, js, more, bundle, namespace, 120)
    after = await settled(pnc, sum(before.values()), 30)
    assert after == before, (
        f"33 clusters hold {sum(after.values())} consumers, 3 held {sum(before.values())}: "
        f"{ {s: (before.get(s), n) for s, n in after.items() if before.get(s) != n} }"
    )


async def test_a_tap_reset_before_its_first_message_does_not_replay_the_stream(
    pipeline: Pipeline, pnc: NATS
) -> None:
    """The hub's taps start at the stream's end. nats-py's ordered consumer, reset before it
    delivered anything (its consumer gone: a server restart, missed heartbeats), starts again at
    what it believes was delivered — the stream's first message, unless told otherwise."""
    jsm = pnc.jsm()
    stream, subject = unique_name("TAP").upper(), unique_name("tap")
    await jsm.add_stream(name=stream, subjects=[f"{subject}.>"])
    js = pnc.jetstream()
    for i in range(5):
        await js.publish(f"{subject}.old", str(i).encode())
    tap = bus.Follower(js, stream, f"{subject}.>", from_now=True)
    got: list[bytes] = []

    async def follow() -> None:
        async for msg in tap.messages():
            got.append(msg.data)

    task = asyncio.create_task(follow())
    try:
        await asyncio.wait_for(tap.caught_up.wait(), 10)
        for info in await jsm.consumers_info(stream):
            await jsm.delete_consumer(stream, info.name)
        # the reset comes after missed idle heartbeats (2 × 5 s); then a new message
        deadline = time.monotonic() + 30
        while not await jsm.consumers_info(stream):
            assert time.monotonic() < deadline, "the tap never made its consumer again"
            await asyncio.sleep(0.2)
        await js.publish(f"{subject}.new", b"new")
        while not got:
            assert time.monotonic() < deadline, "the tap delivered nothing after its reset"
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # anything old would come before the new one; none may
        assert got == [b"new"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await jsm.delete_stream(stream)
