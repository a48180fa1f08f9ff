"""JetStream plumbing against a real nats-server: streams, dedupe, compacted views."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from schemas.subjects import object_status_filter
from services.common import bus
from services.common.bus.follower import IDLE_WAIT
from services.controlplane import servers

from ..conftest import unique_name


async def _fill(js: JetStreamContext, prefix: str, subjects: int, per_subject: int) -> None:
    pub = bus.Publisher(js)
    for round_ in range(per_subject):
        for i in range(subjects):
            await pub.publish(
                f"{prefix}.{i}", f"{i}:{round_}".encode(), msg_id=f"{prefix}.{i}.{round_}"
            )
    await pub.flush()


async def test_streams_are_created_idempotently_with_explicit_limits(js: JetStreamContext) -> None:
    await bus.ensure_streams(js)
    await bus.ensure_streams(js)  # again: no error, same configuration
    server = await js.stream_info(bus.SERVER)
    assert server.config.max_msgs_per_subject == 1
    assert server.config.duplicate_window == bus.DEDUPE_WINDOW
    intents = await js.stream_info(bus.INTENTS)
    assert intents.config.retention == "workqueue"


async def test_publisher_deduplicates_a_retried_message(js: JetStreamContext) -> None:
    await bus.ensure_streams(js)
    subject = f"driftbus.decision.{unique_name('dedupe')}.a.b.c.d"
    pub = bus.Publisher(js)
    first = await (await pub.publish(subject, b"x", msg_id="same"))
    again = await (await pub.publish(subject, b"x", msg_id="same"))
    assert not first.duplicate
    assert again.duplicate


async def test_snapshot_always_sees_the_whole_view(js: JetStreamContext) -> None:
    # Regression: a push consumer delivers at once, so "nothing pending on the server" was
    # mistaken for "nothing to read" and snapshots came back empty, depending on timing.
    await bus.ensure_streams(js)
    prefix = object_status_filter(unique_name("snap"), "b").removesuffix(">") + "g.k.ns"
    await _fill(js, prefix, subjects=50, per_subject=3)
    for _ in range(10):
        view = [m async for m in bus.Follower(js, bus.STATUS, f"{prefix}.>").snapshot()]
        assert len(view) == 50
        assert all(m.data.endswith(b":2") for m in view)  # the last message of each subject


async def test_snapshot_of_an_empty_view_returns_at_once(js: JetStreamContext) -> None:
    await bus.ensure_streams(js)
    subject = f"driftbus.status.{unique_name('empty')}.>"
    view = await asyncio.wait_for(_collect(bus.Follower(js, bus.STATUS, subject)), timeout=5)
    assert view == []


async def _collect(f: bus.Follower) -> list[bytes]:
    return [m.data async for m in f.snapshot()]


async def test_follower_marks_the_end_of_the_view_then_delivers_live(js: JetStreamContext) -> None:
    await bus.ensure_streams(js)
    prefix = object_status_filter(unique_name("live"), "b").removesuffix(">") + "g.k.ns"
    await _fill(js, prefix, subjects=20, per_subject=2)
    follower = bus.Follower(js, bus.STATUS, f"{prefix}.>")
    seen: list[bytes] = []
    caught_up_before: list[bool] = []

    async def consume() -> None:
        async for m in follower.messages():
            # Set once the last message of the view was handed over (the generator resumes):
            # a consumer that queues messages has queued the whole view when it sees the flag.
            caught_up_before.append(follower.caught_up.is_set())
            seen.append(m.data)
            if len(seen) == 21:
                return

    task = asyncio.create_task(consume())
    await asyncio.wait_for(follower.caught_up.wait(), timeout=10)
    await js.publish(f"{prefix}.new", b"live")
    await asyncio.wait_for(task, timeout=10)
    assert caught_up_before == [False] * 20 + [True]
    assert seen[-1] == b"live"


async def test_a_follower_takes_what_it_has_received_without_a_task_per_message(
    nc: NATS, js: JetStreamContext
) -> None:
    """A busy service turns its event loop a few times a second; a follower that needs several
    turns (a task and a timer) per message falls behind its stream. Messages already received
    are taken at once: tasks made while reading a received backlog stay far below one each."""
    await bus.ensure_streams(js)
    n = 2_000
    prefix = object_status_filter(unique_name("backlog"), "b").removesuffix(">") + "g.k.ns"
    await _fill(js, prefix, subjects=n, per_subject=1)
    follower = bus.Follower(js, bus.STATUS, f"{prefix}.>")
    messages = follower.messages()
    received = nc.stats["in_msgs"]
    first = await anext(messages)
    # the whole backlog in the client's buffer (a counter, no event to wait on)
    while nc.stats["in_msgs"] - received < n:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    made = 0
    default = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Future[Any]:
        nonlocal made
        made += 1
        if default is not None:
            return default(loop, coro, **kw)
        return asyncio.Task(coro, loop=loop, **kw)

    loop.set_task_factory(counting)
    try:
        rest = [await anext(messages) for _ in range(n - 1)]
    finally:
        loop.set_task_factory(default)
        await messages.aclose()
    assert [m.data for m in [first, *rest]] == [f"{i}:0".encode() for i in range(n)]
    assert made < n // 20, f"{made} tasks made to read {n - 1} received messages"


@contextlib.asynccontextmanager
async def own_server(tmp_path: Path) -> AsyncIterator[tuple[servers.NatsServer, NATS]]:
    """A nats-server of the test's own (it is killed and restarted), the streams made, and a
    connection that reconnects to it for ever."""
    server = servers.NatsServer(tmp_path / "nats")
    server.start()
    nc = await nats.connect(server.client_url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await bus.ensure_streams(nc.jetstream())
        yield server, nc
    finally:
        await nc.close()
        server.stop()


async def test_a_follower_started_while_nats_is_away_waits_for_it(tmp_path: Path) -> None:
    """A NATS restart at the moment a service subscribes (CI: the watcher subscribing to
    BUNDLES as the fault test killed nats-server) must not end the follower, and with it the
    service: it subscribes again once NATS is back, and delivers the view and what comes."""
    async with own_server(tmp_path) as (server, nc):
        js = nc.jetstream()
        subject = f"driftbus.decision.{unique_name('away')}.a.b.c.d"
        await bus.Publisher(js).publish(subject, b"before", msg_id="before")
        server.kill()
        got: list[bytes] = []

        async def follow() -> None:
            async for msg in bus.Follower(js, bus.DECISIONS, subject).messages():
                got.append(msg.data)

        task = asyncio.create_task(follow())
        await asyncio.sleep(4)  # well past a request timeout: the old follower raised by now
        assert not task.done(), task.exception()
        server.start()
        await (await bus.Publisher(js).publish(subject, b"after", msg_id="after"))
        # (an ordered consumer that nats-py re-creates may deliver again what it had delivered)
        for _ in range(100):
            if set(got) == {b"before", b"after"}:
                break
            await asyncio.sleep(0.1)
        assert set(got) == {b"before", b"after"}
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_quiet_follower_is_back_soon_after_a_server_restart(tmp_path: Path) -> None:
    """A follower there is one of per cluster (a watcher's bundles) hears the server's idle
    heartbeat only every 30 s, so nats-py would notice its consumer lost with a restarted
    server only after a minute; the follower makes it again itself, within ``IDLE_WAIT`` of
    quiet after the reconnection."""
    async with own_server(tmp_path) as (server, nc):
        js = nc.jetstream()
        subject = f"driftbus.decision.{unique_name('quiet')}.a.b.c.d"
        await (await bus.Publisher(js).publish(subject, b"before", msg_id="before"))
        follower = bus.Follower(js, bus.DECISIONS, subject, idle_heartbeat=bus.QUIET_HEARTBEAT)
        got: list[bytes] = []

        async def follow() -> None:
            async for msg in follower.messages():
                got.append(msg.data)

        task = asyncio.create_task(follow())
        await asyncio.wait_for(follower.caught_up.wait(), 10)
        server.kill()
        server.start()
        for _ in range(100):
            if nc.is_connected:
                break
            await asyncio.sleep(0.1)
        await (await bus.Publisher(js).publish(subject, b"after", msg_id="after"))
        deadline = asyncio.get_running_loop().time() + follower_back_within()
        while b"after" not in got:
            assert asyncio.get_running_loop().time() < deadline, (
                f"nothing delivered {follower_back_within():.0f}s after the restart: {got}"
            )
            await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def follower_back_within() -> float:
    """Well under nats-py's own two missed heartbeats (60 s)."""
    return 2 * IDLE_WAIT + 5
