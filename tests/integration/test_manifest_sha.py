"""A change only to fields the server-side comparison prunes (finalizers, ownerReferences) is a
change of the manifest, and is applied (manifestSHA covers the whole manifest)."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from services.kube import KubeClient


async def test_adding_only_a_finalizer_is_applied(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "fin", "namespace": namespace},
        "data": {"k": "v"},
    }
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "fin")
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, "fin", [manifest], revision="r1")
    await watch.ready("r1", 60, pipeline.logs)
    with_finalizer = {**manifest, "metadata": {**manifest["metadata"], "finalizers": ["x.io/f"]}}
    await pipeline.publish(js, "fin", [with_finalizer], revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    cm = await kube.discovery.resource("v1", "ConfigMap")
    for _ in range(50):
        if (await kube.get(cm, "fin", namespace))["metadata"].get("finalizers") == ["x.io/f"]:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the finalizer the new revision adds was never applied")
    # leave nothing that blocks deletion behind
    await kube.apply(
        {**manifest, "metadata": {**manifest["metadata"], "finalizers": []}},
        field_manager="driftbus",
        force=True,
    )
