"""A planner SIGKILLed and restarted with several bundles in flight must still create everything.

Reported: after a planner SIGKILL and restart with several bundles in flight, a Namespace was
never created (its objects waited on it until they gave up) while the intent queue looked busy and
the appliers idle. What a user must see instead: every object of every bundle in the cluster
within a bound, and the intent work queue drained.

The restarted planner re-decides every object of every bundle at once (its go-live after the
rebuild). That burst is exactly when a replica can miss its own heartbeats for a moment — on a
loaded machine it did so on its own in 3 of 3 large runs (8 bundles, 8,000 objects) — and a
replica whose lease lapsed stops sending intents until its next heartbeat. Here the moment is
made deterministic: the restarted planner is paused (SIGSTOP, as a GC pause or CPU starvation
would) for a little longer than its lease (heartbeat timeout minus one interval) but less than
the heartbeat timeout, right after its first intent after the restart. Nobody else takes the
cluster over, so the same replica goes on planning it; no decision may be lost meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from harness.pipeline import Pipeline, until_planner_ready
from schemas.subjects import cluster_filter
from services.common import bus
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .manifests import crd

pytestmark = pytest.mark.reliability

BUNDLES = 6
CONFIGMAPS = 120  # per bundle: a go-live long enough to be paused in the middle of
WIDGETS = 3
PAUSE = 2.8
"""Seconds the restarted planner is frozen: over its lease (the fixture's heartbeat timeout 3 s
minus the 0.5 s interval), under the timeout after which another replica could take over."""
WITHIN = 30.0
"""Seconds after the pause within which every object must exist (fixed planner: all of them
within ~15 s on a loaded 2-core machine)."""


def bundle(ns: str, group: str) -> list[dict[str, Any]]:
    """A Namespace, a CRD, custom resources of it and ConfigMaps, all in that namespace."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        crd(group, "Widget"),
        *(
            {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": f"w-{i}", "namespace": ns},
                "spec": {"size": i},
            }
            for i in range(WIDGETS)
        ),
        *(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": ns},
                "data": {"i": str(i)},
            }
            for i in range(CONFIGMAPS)
        ),
    ]


async def _names(kube: KubeClient, api_version: str, kind: str, namespace: str = "") -> set[str]:
    try:
        res = await kube.discovery.resource(api_version, kind)
        items, _ = await kube.list(res, namespace=namespace)
    except NotFound:  # a kind not served yet (its CRD is missing): none of them exists
        return set()
    return {o["metadata"]["name"] for o in items}


async def missing_objects(kube: KubeClient, bundles: dict[str, tuple[str, str]]) -> list[str]:
    """Every object of every bundle that the API server does not have."""
    namespaces = await _names(kube, "v1", "Namespace")
    crds = await _names(kube, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    missing = []
    for ns, group in bundles.values():
        if ns not in namespaces:
            missing.append(f"Namespace/{ns}")
        if f"widgets.{group}" not in crds:
            missing.append(f"CustomResourceDefinition/widgets.{group}")
        cms = await _names(kube, "v1", "ConfigMap", ns)
        missing += [f"ConfigMap/{ns}/cm-{i}" for i in range(CONFIGMAPS) if f"cm-{i}" not in cms]
        if f"widgets.{group}" in crds:
            kube.discovery.forget(f"{group}/v1")  # served by now, or not yet: ask again
        widgets = await _names(kube, f"{group}/v1", "Widget", ns)
        missing += [f"Widget/{ns}/w-{i}" for i in range(WIDGETS) if f"w-{i}" not in widgets]
    return missing


async def test_planner_restart_with_bundles_in_flight_creates_every_object(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    js = pnc.jetstream()
    pipeline.start_all(appliers=2)
    await until_planner_ready(js)
    bundles = {}
    for b in range(BUNDLES):
        ns = unique_name("inflight")
        bundles[f"b{b}"] = (ns, f"{ns}.driftbus.test")
    total = BUNDLES * (2 + WIDGETS + CONFIGMAPS)

    # several bundles in flight: published, the planner SIGKILLed while it works on them — at
    # its first intent, when each bundle's Widgets still wait for their CRD to be served (a
    # fixed 0.3 s was once that moment; a faster planner had sent everything by then, and the
    # restarted one had nothing left to send)
    started = asyncio.Event()

    async def on_first(_: Msg) -> None:
        started.set()

    early = await pnc.subscribe(cluster_filter("intent", pipeline.cluster), cb=on_first)
    for name, (ns, group) in bundles.items():
        await pipeline.publish(js, name, bundle(ns, group))
    await asyncio.wait_for(started.wait(), 60)
    pipeline.kill("planner")
    await early.unsubscribe()

    # every intent from now on is the restarted planner's (the old one is dead)
    intents = 0
    first = asyncio.Event()

    async def on_intent(_: Msg) -> None:
        nonlocal intents
        intents += 1
        first.set()

    await pnc.subscribe(cluster_filter("intent", pipeline.cluster), cb=on_intent)
    planner = pipeline.start("planner")
    await asyncio.wait_for(first.wait(), 60)

    # the restarted planner stalls for a moment in the middle of its go-live
    os.kill(planner.pid, signal.SIGSTOP)
    try:
        await asyncio.sleep(PAUSE)
    finally:
        os.kill(planner.pid, signal.SIGCONT)
    resumed = time.monotonic()

    missing = await missing_objects(kube, bundles)
    while missing and time.monotonic() - resumed < WITHIN:
        await asyncio.sleep(1.0)
        missing = await missing_objects(kube, bundles)
    consumer = bus.intent_consumer_name(pipeline.cluster)
    info = await js.consumer_info(bus.INTENTS, consumer)
    logs = pipeline.all_logs_text()
    not_sent = sum("no longer this cluster's planner" in line for line in logs.splitlines())
    assert not missing, (
        f"{len(missing)} of {total} objects still missing {WITHIN:.0f}s after the restarted "
        f"planner resumed (e.g. {missing[:8]}); intent consumer: pending {info.num_pending}, "
        f"ack pending {info.num_ack_pending}, redelivered {info.num_redelivered}; "
        f"{intents} intents sent since the restart; {not_sent} log lines of the planner "
        f"withholding an intent ('no longer this cluster's planner')\n{pipeline.logs()}"
    )

    # and the work queue drains: nothing left queued or unacknowledged
    deadline = time.monotonic() + 20
    while True:
        info = await js.consumer_info(bus.INTENTS, consumer)
        if (info.num_pending, info.num_ack_pending) == (0, 0):
            break
        assert time.monotonic() < deadline, (
            f"intent consumer never settled: pending {info.num_pending}, ack pending "
            f"{info.num_ack_pending}, redelivered {info.num_redelivered}\n{pipeline.logs()}"
        )
        await asyncio.sleep(0.5)
