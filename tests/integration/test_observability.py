"""Metrics and health endpoints of the running services (issue 8, item 2): /healthz answers,
/readyz tells the truth (not ready until the streams exist and the initial work is done), and
/metrics carries what a reconcile and a drift correction did."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import aiohttp
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from services.controlplane import servers
from services.kube import KubeClient

from .test_scaling import configmaps
from .waits import until_object


async def _get(port: int, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{port}{path}", timeout=aiohttp.ClientTimeout(total=5)) as r,
    ):
        return r.status, await r.text()


async def _get_or_none(port: int, path: str) -> tuple[int, str]:
    """``_get``, with no answer within 5 s as status 0: a service starting on a busy machine
    (two test workers on two cores) may answer its probe late; the caller's deadline decides."""
    try:
        return await _get(port, path)
    except (TimeoutError, aiohttp.ClientError) as exc:
        return 0, f"no answer: {type(exc).__name__}"


async def _until_served(port: int, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            await _get(port, "/healthz")
            return
        except (aiohttp.ClientError, TimeoutError):
            assert time.monotonic() < deadline, f"nothing served on {port}"
            await asyncio.sleep(0.1)


def _value(metrics: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for m in re.finditer(rf"^{name}(?:\{{([^}}]*)\}})? ([0-9.e+-]+)$", metrics, re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m[1] or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m[2])
    return total


async def test_health_readiness_and_metrics_of_a_reconcile_and_a_drift(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    ports = {role: servers.free_port() for role in ("watcher", "planner", "applier")}
    c = pipeline.cluster
    # the watcher first: alive, but not ready until the planner has created the streams
    pipeline.start("watcher", None, "--http-port", str(ports["watcher"]))
    await _until_served(ports["watcher"])
    assert (await _get(ports["watcher"], "/healthz"))[0] == 200
    code, text = await _get(ports["watcher"], "/readyz")
    assert code == 503, text
    assert "not ready: streams bound" in text
    pipeline.start("planner", None, "--http-port", str(ports["planner"]))
    pipeline.start("applier", None, "--http-port", str(ports["applier"]))
    for role, port in ports.items():
        await _until_served(port)
        deadline = time.monotonic() + 60
        while (got := await _get_or_none(port, "/readyz"))[0] != 200:
            assert time.monotonic() < deadline, f"{role} never ready: {got}\n{pipeline.logs()}"
            await asyncio.sleep(0.2)
        assert "not ready" not in got[1]

    watch = StatusWatch()
    await watch.start(pnc, c, "obs")
    n = 20
    await pipeline.publish(pnc.jetstream(), "obs", configmaps(namespace, n))
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    await kube.delete(res, "cm-3", namespace)  # drift: deleted out of band
    await until_object(kube, res, "cm-3", namespace, logs=pipeline.logs)
    await asyncio.sleep(1.5)

    planner = (await _get(ports["planner"], "/metrics"))[1]
    applier = (await _get(ports["applier"], "/metrics"))[1]
    watcher = (await _get(ports["watcher"], "/metrics"))[1]
    assert _value(planner, "driftbus_decisions_total", action="apply", reason="new") == n
    assert _value(planner, "driftbus_drift_detected_total", cluster=c) == 1
    assert _value(applier, "driftbus_drift_corrected_total", cluster=c) == 1
    assert _value(applier, "driftbus_time_to_correct_seconds_count") == 1
    assert _value(applier, "driftbus_apply_seconds_count", outcome="applied") == n + 1
    assert _value(applier, "driftbus_kube_requests_total", verb="PATCH", code="201") >= n  # created
    assert _value(watcher, "driftbus_kube_requests_total", verb="GET", code="200") >= 1
    assert _value(watcher, "driftbus_server_events_published_total") >= n
    assert _value(planner, "driftbus_status_publish_lag_seconds_count") >= 1
    assert "driftbus_cache_hit_ratio" in planner
    deadline = time.monotonic() + 30
    while "driftbus_intents_pending{" not in planner:  # polled every stats_interval / 6
        assert time.monotonic() < deadline, planner
        await asyncio.sleep(1)
        planner = (await _get(ports["planner"], "/metrics"))[1]
    assert _value(planner, "driftbus_intents_pending", cluster=c) == 0  # all done
    measured(
        "observability: /healthz, /readyz (503 until streams bound, then 200 on all three), "
        f"/metrics: {n} new-object decisions, 1 drift detected and corrected, "
        f"{_value(applier, 'driftbus_kube_requests_total'):.0f} applier API requests counted"
    )
