"""A planner that lost its claim with thousands of intents queued serves the cluster again at once.

Found by the `memory` benchmark (2026-11-30, 100,000 objects): the planner, busy, missed its
heartbeats for the 3 s timeout, dropped the cluster, claimed it again (a new fencing token) and
rebuilt it; the applier then dropped every queued intent of the earlier claim as fenced, and for
13 minutes no intent reached the applier while the planner sat in NATS requests.

Here a planner queues its intents for a few thousand objects with no applier running and is frozen
(SIGSTOP) past its heartbeat timeout; meanwhile another replica takes the cluster and dies at once
(its claim is written, nothing else). The planner resumes, finds itself deposed, claims the cluster
again with a newer fencing token and rebuilds it; only then an applier starts. Every object is
written exactly once (the earlier claim's intents are dropped), the bundle is Ready within a bound
far below the intent timeout, and the planner's NATS traffic for the whole recovery stays within
two messages per object: the intents go out in batches again (each went alone, with its record and
row, because intents of the earlier claim were queued).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import os
import signal
import time
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NATS

from bench import natstraffic
from harness.pipeline import Pipeline, StatusWatch, write_counts, writes_since
from schemas.subjects import cluster_filter
from services.common import bus
from services.controlplane import servers

from ..conftest import unique_name
from .manifests import cm, namespace_of

pytestmark = pytest.mark.reliability

OBJECTS = 3000
FROZEN = 5.0
"""Seconds the planner is frozen: past its heartbeat timeout (3 s in tests)."""
READY_WITHIN = 90.0
"""Far below the default intent timeout (60 s) plus a resend round per object."""
PLANNER_MESSAGES_PER_OBJECT = 2.0
"""The planner's messages (both directions) per object from its resumption to Ready: the
intents sent again in batches, and what it receives whatever it sends (the watcher's facts of
3,000 creations, the appliers' reports, publish acknowledgements): 1.6 on the landed fix. Each
intent alone with its record and row, as the planner sent them after a take-over before, was
2.7 to 2.9."""
LOST_MESSAGES_PER_OBJECT = 2.0
"""The same when every intent was lost: the intents sent again travel in batches (none of their
objects has anything queued) after one look at the queue and the unread facts for all of them:
1.2 on the landed fix. Asked per object and sent alone, as before, it was 6.5."""


async def _queued_settles(js: Any, least: int) -> int:
    """The number of messages on INTENTS once it holds at least ``least`` and stops growing."""
    last = -1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = (await js.stream_info(bus.INTENTS)).state.messages
        if n >= least and n == last:
            return int(n)
        last = n
        await asyncio.sleep(0.5)
    raise AssertionError(f"INTENTS held {last} messages, waited for at least {least}")


@dataclasses.dataclass
class Queued:
    """A planner that has queued the intents of ``OBJECTS`` ConfigMaps, no applier running."""

    watch: StatusWatch
    planner: servers.Process
    js: Any
    before: collections.Counter[Any]
    """The API server's writes before the publish."""
    messages: int
    """Messages on INTENTS."""


async def _intents_queued(pipeline: Pipeline, pnc: NATS, name: str) -> Queued:
    ns, bundle = unique_name(name), unique_name("b")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start("watcher")
    planner = pipeline.start("planner")
    js = pnc.jetstream()
    before = write_counts(pipeline.api)
    await pipeline.publish(
        js, bundle, [namespace_of(ns), *(cm(ns, f"c{i}") for i in range(OBJECTS))]
    )
    return Queued(watch, planner, js, before, await _queued_settles(js, OBJECTS // 32))


def _planner_messages(
    pipeline: Pipeline, since: dict[str, natstraffic.Traffic], bound: float
) -> float:
    """The planner's NATS messages (both directions) per object since ``since``, asserted to be
    at most ``bound``."""
    t = natstraffic.delta(since, natstraffic.by_role(pipeline.nats))["planner"]
    per_object = (t.sent + t.delivered) / OBJECTS
    assert per_object <= bound, (
        f"the planner's {t} NATS messages for {OBJECTS} objects are {per_object:.1f} per object"
    )
    return per_object


async def test_a_planner_that_lost_its_claim_with_intents_queued_serves_again_at_once(
    pipeline: Pipeline, pnc: NATS, measured: Any
) -> None:
    q = await _intents_queued(pipeline, pnc, "lapsed")
    planner, js = q.planner, q.js

    os.kill(planner.pid, signal.SIGSTOP)  # a long pause: its claim lapses
    try:
        await asyncio.sleep(FROZEN)
        kv = await js.key_value(bus.SHARDS_BUCKET)  # taken by a replica that died at once
        await kv.put(bus.claim_key(pipeline.cluster), orjson.dumps({"planner": "gone"}))
    finally:
        os.kill(planner.pid, signal.SIGCONT)
    resumed = time.monotonic()
    traffic = natstraffic.by_role(pipeline.nats)
    pipeline.start("applier", "applier-0")
    await q.watch.ready("r1", READY_WITHIN, pipeline.logs)
    took = time.monotonic() - resumed
    per_object = _planner_messages(pipeline, traffic, PLANNER_MESSAGES_PER_OBJECT)

    log = planner.log_path.read_text(errors="replace")
    assert "deposed" in log, "the freeze did not cost the planner its claim"
    wrote = writes_since(pipeline.api, q.before, {"configmaps"})
    assert wrote == OBJECTS, f"{wrote} ConfigMap writes for {OBJECTS} ConfigMaps"
    measured(
        f"planner frozen {FROZEN:.0f}s with {q.messages} intent messages queued for {OBJECTS} "
        f"objects: claim lost and taken again, Ready {took:.1f}s after it resumed, "
        f"{wrote} writes, planner {per_object:.2f} NATS messages per object; the lease lapsed "
        f"{log.count('lease lapsed')} times (a decision held until it was renewed)"
    )


async def test_thousands_of_lost_intents_are_sent_again_after_one_look_at_the_queue(
    pipeline: Pipeline, pnc: NATS, measured: Any
) -> None:
    """Every queued intent of the cluster is lost (purged from INTENTS, as a stream restored
    from an old backup would lose them): the planner sends each again after its intent
    timeout, and finds out which are lost with a few requests for all of them, not per object
    (at 87,348 objects those requests took minutes per round and the round began again)."""
    pipeline.role_env["planner"] = {"DRIFTBUS_INTENT_TIMEOUT": "2"}
    q = await _intents_queued(pipeline, pnc, "lost")
    planner, js = q.planner, q.js
    traffic = natstraffic.by_role(pipeline.nats)
    await js.purge_stream(bus.INTENTS, subject=cluster_filter("intent", pipeline.cluster))
    started = time.monotonic()
    pipeline.start("applier", "applier-0")
    await q.watch.ready("r1", READY_WITHIN, pipeline.logs)
    took = time.monotonic() - started
    per_object = _planner_messages(pipeline, traffic, LOST_MESSAGES_PER_OBJECT)

    log = planner.log_path.read_text(errors="replace")
    resent = log.count("sending again")
    wrote = writes_since(pipeline.api, q.before, {"configmaps"})
    assert (wrote, resent) == (OBJECTS, OBJECTS + 1), (
        f"{wrote} ConfigMap writes for {OBJECTS} ConfigMaps; {resent} intents sent again "
        f"of {OBJECTS + 1} lost"
    )
    measured(
        f"{OBJECTS + 1} queued intents lost: all sent again, Ready {took:.1f}s after the "
        f"applier started, {wrote} writes, planner {per_object:.2f} NATS messages per object"
    )
