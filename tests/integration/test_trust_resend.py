"""An intent that was carried out is never sent again because the planner had not read its fact yet.

Found by the `memory` benchmark (issue 18): 20,000 objects applied from a fresh bus got 20,009
writes, the extra ones all among the last kinds of the apply order. The planner sends again an
intent that got no word for ``intent_timeout`` and is no longer queued (a lost intent must not
silence an object for good). An applier publishes the fact, *then* acks the intent, which leaves
the work queue at once; a planner that is busy reads that fact a moment later. An overdue intent
checked in that moment looked lost, and the object was written twice.

Here every intent is overdue almost at once (a 1 s timeout, one applier taking two at a time
through a long queue), and the planner is paused now and then for a little longer than its
check's period (SIGSTOP, as CPU starvation would), so that when it resumes the check runs while
a few dozen facts are still unread. Exactly one write per object, and no intent sent again: none
was lost.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, write_counts, writes_since

from ..conftest import unique_name
from .manifests import cm, namespace_of

pytestmark = pytest.mark.reliability

OBJECTS = 400
PAUSES = 8
PAUSE = 0.6
"""Seconds the planner is frozen: longer than its lost-intent check's period (0.5 s at a 1 s
timeout), short enough that fewer than 100 facts wait (a longer backlog skips the check)."""


async def test_an_intent_whose_fact_is_on_its_way_is_not_sent_again(
    pipeline: Pipeline, pnc: NATS
) -> None:
    pipeline.role_env["planner"] = {"DRIFTBUS_INTENT_TIMEOUT": "1"}
    pipeline.role_env["applier"] = {"DRIFTBUS_CONCURRENCY": "2"}
    ns = unique_name("resend")
    bundle = unique_name("b")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all(appliers=1)
    before = write_counts(pipeline.api)
    js = pnc.jetstream()
    await pipeline.publish(
        js, bundle, [namespace_of(ns), *(cm(ns, f"c{i}") for i in range(OBJECTS))]
    )
    await asyncio.sleep(2)  # under way: the first intents are overdue
    planner = pipeline.procs["planner"]
    for _ in range(PAUSES):
        os.kill(planner.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(PAUSE)
        finally:
            os.kill(planner.pid, signal.SIGCONT)
        await asyncio.sleep(PAUSE)
    await watch.ready("r1", 180, pipeline.logs)

    resent = [line for line in pipeline.all_logs_text().splitlines() if "sending again" in line]
    wrote = writes_since(pipeline.api, before, {"configmaps"})
    assert (wrote, resent[:5]) == (OBJECTS, []), (
        f"{wrote} ConfigMap writes for {OBJECTS} ConfigMaps; {len(resent)} intents sent again, "
        f"e.g. {resent[:5]}"
    )
