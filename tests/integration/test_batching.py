"""Fast batches against a real nats-server (``services/common/bus/batching.py``): every batched
publish lands exactly once, at a fraction of the answers one-by-one publishing costs, and a
stream that does not allow fast batches still gets every message, one by one.
"""

from __future__ import annotations

import asyncio
import dataclasses

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js import api as js_api

from services.common import bus
from services.common.bus.streams import stream_configs

from ..conftest import unique_name


async def _count(js: JetStreamContext, stream: str, subject: str) -> int:
    info = await js.stream_info(stream, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def _publish(
    pub: bus.Publisher, stream: str, subjects: list[str], ids: list[str]
) -> list[object]:
    tasks = [
        await pub.publish_batched(stream, s, b"{}", msg_id=i)
        for s, i in zip(subjects, ids, strict=True)
    ]
    return list(await asyncio.gather(*tasks))


async def test_a_burst_lands_whole_with_a_handful_of_answers(
    nc: NATS, js: JetStreamContext
) -> None:
    await bus.ensure_streams(js)
    base = f"driftbus.decision.{unique_name('burst')}"
    subjects = [f"{base}.g.ConfigMap.ns.o{i}" for i in range(1000)]
    pub = bus.Publisher(js)
    before = nc.stats["in_msgs"]
    await _publish(pub, bus.DECISIONS, subjects, [f"{base}:{i}" for i in range(1000)])
    answers = nc.stats["in_msgs"] - before
    assert await _count(js, bus.DECISIONS, f"{base}.>") == 1000
    # one by one, 1,000 publishes are answered 1,000 times; in batches of 256 with a flow
    # ack every 128 messages, a few dozen at most
    assert answers <= 40, f"{answers} answers for 1,000 batched publishes"


async def test_a_lone_message_costs_one_answer_as_an_ordinary_publish_does(
    nc: NATS, js: JetStreamContext
) -> None:
    await bus.ensure_streams(js)
    subject = f"driftbus.decision.{unique_name('lone')}.g.ConfigMap.ns.one"
    pub = bus.Publisher(js)
    await _publish(pub, bus.DECISIONS, [subject], ["lone-1"])  # opens the reply subscription
    before = nc.stats["in_msgs"]
    await _publish(pub, bus.DECISIONS, [subject], ["lone-2"])
    assert nc.stats["in_msgs"] - before == 1
    assert await _count(js, bus.DECISIONS, subject) == 2


async def test_repeated_message_ids_land_once(js: JetStreamContext) -> None:
    await bus.ensure_streams(js)
    base = f"driftbus.decision.{unique_name('again')}"
    subjects = [f"{base}.g.ConfigMap.ns.o{i}" for i in range(100)]
    ids = [f"{base}:{i}" for i in range(100)]
    pub = bus.Publisher(js)
    await _publish(pub, bus.DECISIONS, subjects, ids)
    await _publish(pub, bus.DECISIONS, subjects, ids)  # a retry of every one of them
    assert await _count(js, bus.DECISIONS, f"{base}.>") == 100


async def test_a_stream_without_fast_batches_gets_every_message_one_by_one(
    js: JetStreamContext,
) -> None:
    name = unique_name("plain").upper().replace("-", "_")
    subject = f"plain.{name}"
    await js.add_stream(
        js_api.StreamConfig(
            name=name, subjects=[f"{subject}.>"], duplicate_window=120.0, allow_batched=False
        )
    )
    try:
        pub = bus.Publisher(js)
        subjects = [f"{subject}.o{i}" for i in range(50)]
        await _publish(pub, name, subjects, [f"{name}:{i}" for i in range(50)])
        assert await _count(js, name, f"{subject}.>") == 50
        # refused once, the stream is published to one by one from then on
        await _publish(pub, name, [f"{subject}.late"], [f"{name}:late"])
        assert await _count(js, name, f"{subject}.>") == 51
    finally:
        await js.delete_stream(name)


async def test_subscribers_see_each_message_once_in_publish_order_across_streams(
    nc: NATS, js: JetStreamContext
) -> None:
    """The planner sends an object's row before its intent: batched, they must still reach the
    server in that order, and a core subscriber of the subjects sees the messages published and
    nothing else (no batch markers)."""
    await bus.ensure_streams(js)
    u = unique_name("order")
    seen: list[bytes] = []

    async def on_msg(msg: object) -> None:
        seen.append(msg.data)  # type: ignore[attr-defined]

    sub = await nc.subscribe(f"driftbus.*.{u}.>", cb=on_msg)
    pub = bus.Publisher(js)
    sent: list[bytes] = []
    tasks = []
    for i in range(300):
        for family, stream in (("status", bus.STATUS), ("intent", bus.INTENTS)):
            if family == "intent" and i % 7 == 3:
                continue  # some objects get no intent: the streams interleave unevenly
            data = f"{family}-{i}".encode()
            sent.append(data)
            tasks.append(
                await pub.publish_batched(
                    stream, f"driftbus.{family}.{u}.g.K.ns.o{i}", data, msg_id=f"{u}:{family}:{i}"
                )
            )
    await asyncio.gather(*tasks)
    await nc.flush()
    await asyncio.sleep(0.2)
    await sub.unsubscribe()
    assert seen == sent


async def test_an_older_stream_configuration_is_brought_up_to_date_in_place(
    js: JetStreamContext,
) -> None:
    """docs/upgrading.md: a publisher meeting a stream without fast batches publishes to it one
    by one; the planner's ensure_streams turns them on in place, and batches go through."""
    await bus.ensure_streams(js)
    old = dataclasses.replace(
        next(c for c in stream_configs() if c.name == bus.DECISIONS), allow_batched=False
    )
    await js.update_stream(old)
    try:
        base = f"driftbus.decision.{unique_name('upgrade')}"
        before = bus.Publisher(js)
        await _publish(before, bus.DECISIONS, [f"{base}.g.K.ns.a"], [f"{base}:a"])
        assert await _count(js, bus.DECISIONS, f"{base}.>") == 1
    finally:
        await bus.ensure_streams(js)  # what a new planner does when it starts
    info = await js.stream_info(bus.DECISIONS)
    assert info.config.allow_batched is True
    after = bus.Publisher(js)
    subjects = [f"{base}.g.K.ns.b{i}" for i in range(50)]
    await _publish(after, bus.DECISIONS, subjects, [f"{base}:b{i}" for i in range(50)])
    assert await _count(js, bus.DECISIONS, f"{base}.>") == 51


async def test_concurrent_publishers_keep_their_order_when_the_client_must_flush(
    nc: NATS, js: JetStreamContext
) -> None:
    """Sixteen publishers at once (an applier's handlers), messages big enough that nats-py
    flushes its buffer in the middle of a publish: each publisher's messages still reach the
    server in the order it published them, every one lands in its batch (none falls back)."""
    await bus.ensure_streams(js)
    u = unique_name("flush")
    seen: list[bytes] = []

    async def on_msg(msg: object) -> None:
        seen.append(bytes(msg.data[:16]))  # type: ignore[attr-defined]

    sub = await nc.subscribe(f"driftbus.*.{u}.>", cb=on_msg)
    pub = bus.Publisher(js)
    pad = b"." * 120_000

    async def worker(w: int) -> list[asyncio.Task[object]]:
        tasks = []
        for i in range(24):
            family, stream = (("status", bus.STATUS), ("decision", bus.DECISIONS))[i % 2]
            data = f"{w:04d}-{i:04d}".encode().ljust(16, b" ") + pad
            tasks.append(
                await pub.publish_batched(
                    stream, f"driftbus.{family}.{u}.g.K.ns.w{w}i{i}", data, msg_id=f"{u}:{w}:{i}"
                )
            )
        return tasks

    per_worker = await asyncio.gather(*(worker(w) for w in range(16)))
    await asyncio.gather(*(t for ts in per_worker for t in ts))
    await nc.flush()
    await asyncio.sleep(0.5)
    await sub.unsubscribe()
    assert len(seen) == 16 * 24
    for w in range(16):
        mine = [s.decode().strip() for s in seen if s.startswith(f"{w:04d}-".encode())]
        assert mine == [f"{w:04d}-{i:04d}" for i in range(24)], f"worker {w}: {mine}"
    assert pub.fell_back() == 0
