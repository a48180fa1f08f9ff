"""Appliers scale independently: more replicas take work from the same consumer, none is lost."""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, until_planner_ready
from schemas.codec import applied_events, decode
from schemas.subjects import encode_token
from services.kube import KubeClient

from ..conftest import unique_name

N = 2000


def configmaps(ns: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": ns},
            "data": {"i": str(i)},
        }
        for i in range(n)
    ]


async def applied_by(nc: NATS, cluster: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    async def on_msg(msg: Any) -> None:
        for ap in applied_events(msg.subject, msg.data):  # an applier's report, or one fact
            counts[ap.applier] += 1

    await nc.subscribe(f"driftbus.applied.{encode_token(cluster)}.>", cb=on_msg)
    return counts


@pytest.mark.parametrize("appliers", [1, 4])
async def test_time_to_apply_2000_objects(
    pipeline: Pipeline, pnc: NATS, namespace: str, appliers: int, measured: Any
) -> None:
    watch = StatusWatch()
    bundle = unique_name("big")  # an earlier test's "big" objects would be pruned meanwhile
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all(appliers=appliers)
    # let the processes start: we time the reconcile, not Python imports and claim rounds
    await until_planner_ready(pnc.jetstream())
    await asyncio.sleep(1)
    start = time.monotonic()
    await pipeline.publish(pnc.jetstream(), bundle, configmaps(namespace, N))
    await watch.ready("r1", 300, pipeline.logs)
    took = time.monotonic() - start
    measured(
        f"{N}-object bundle with {appliers} applier(s): ready in {took:.1f}s "
        f"({N / took:.0f} objects/s)"
    )


async def test_appliers_added_and_killed_mid_run_lose_nothing(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    watch = StatusWatch()
    bundle = unique_name("big")  # an earlier test's "big" objects would be pruned meanwhile
    await watch.start(pnc, pipeline.cluster, bundle)
    by_applier = await applied_by(pnc, pipeline.cluster)
    slow = ("--concurrency", "2")  # a long enough run for replicas started later to join
    pipeline.start("watcher")
    pipeline.start("planner")
    pipeline.start("applier", "applier-0", *slow)
    await pipeline.publish(pnc.jetstream(), bundle, configmaps(namespace, N))
    await watch.until(lambda s: s.counts.applied >= 100, 120, pipeline.logs)
    for i in (1, 2, 3):
        pipeline.start("applier", f"applier-{i}", *slow)
    deadline = time.monotonic() + 60
    while len([n for n in by_applier.values() if n > 0]) < 4:
        assert time.monotonic() < deadline, f"new appliers took no work: {by_applier}"
        assert watch.bundles[-1].counts.applied < N, f"run ended before all joined: {by_applier}"
        await asyncio.sleep(0.1)
    killed_at = watch.bundles[-1].counts.applied
    pipeline.kill("applier-2")  # SIGKILL mid-run: its unacked intents must be redelivered
    status = await watch.ready("r1", 300, pipeline.logs)
    assert killed_at < N
    assert status.counts.applied == status.counts.total == N
    res = await kube.discovery.resource("v1", "ConfigMap")
    items, _ = await kube.list(res, namespace=namespace)
    assert sorted(int(i["data"]["i"]) for i in items) == list(range(N))
    measured(
        f"replicas added mid-run: applied per replica {sorted(by_applier.values())}; "
        f"one SIGKILLed at {killed_at}/{N}; all {N} applied"
    )


async def test_5000_object_bundle_goes_through_the_object_store(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    from schemas.messages import Bundle
    from schemas.subjects import bundle_subject
    from services.common import bus
    from services.revisions.publish import INLINE_LIMIT

    n = 5000
    manifests = configmaps(namespace, n)
    for m in manifests:  # 5,000 plain ConfigMaps encode to ~620 KiB: padded over the limit
        m["data"]["padding"] = "x" * 64
    assert len(orjson.dumps(manifests)) > INLINE_LIMIT
    watch = StatusWatch()
    bundle = unique_name("huge")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all(appliers=2)
    js = pnc.jetstream()
    start = time.monotonic()
    await pipeline.publish(js, bundle, manifests)
    stored = await js.get_last_msg(bus.BUNDLES, bundle_subject(pipeline.cluster, bundle))
    assert len(stored.data) < 4096, "the bundle message should only carry a reference"
    assert decode(stored.data, Bundle).manifests_ref is not None
    status = await watch.ready("r1", 300, pipeline.logs)
    assert status.counts.total == n
    res = await kube.discovery.resource("v1", "ConfigMap")
    items, _ = await kube.list(res, namespace=namespace)
    assert len(items) == n
    measured(f"{n}-object bundle via the Object Store: ready in {time.monotonic() - start:.1f}s")
