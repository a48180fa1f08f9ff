"""A default namespace for custom resources whose CRD no bundle carries: the planner owns no
connection to Kubernetes, so the watcher's discovery (its heartbeat) tells it the kind's scope,
and the revision waiting on it is taken then — also after a planner restart, when it starts
knowing nothing again."""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import BundlePhase
from services.kube import KubeClient

from ..conftest import unique_name
from .manifests import crd
from .test_scope_discovery import until_served


def widget(group: str, name: str) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name}}


async def test_a_custom_resource_takes_the_default_namespace_once_the_watcher_discovers_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    # installed by someone else (another tool, a Helm release): no bundle of ours has the CRD
    group = f"{unique_name('learn')}.driftbus.test"
    await kube.apply(crd(group, "Widget", "Namespaced"), field_manager="someone-else")
    await until_served(kube, group, {"Widget"})

    bundle = unique_name("learn")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    await pipeline.publish(pnc.jetstream(), bundle, [widget(group, "w1")], namespace=namespace)
    st = await watch.ready("r1", 90, pipeline.logs)
    assert st.counts.applied == 1
    res = await kube.discovery.resource(f"{group}/v1", "Widget")
    live = await kube.get(res, "w1", namespace)
    assert live["metadata"]["namespace"] == namespace

    # a restarted planner knows only the built-in kinds again; whichever it reads first, the
    # replayed revision or the watcher's last heartbeat, the bundle ends Ready, never stuck
    # refused (which comes first is up to the scheduler: the re-check is proven above)
    pipeline.kill("planner")
    seen = len(watch.bundles)
    pipeline.start("planner")
    await watch.until(lambda s: len(watch.bundles) > seen, 60, pipeline.logs)
    after = await watch.ready("r1", 60, pipeline.logs)
    assert after.phase is BundlePhase.READY
