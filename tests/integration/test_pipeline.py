"""The reconcile pipeline end to end: real watcher, planner and appliers against the real servers.

Assertions are what a user sees: cluster state, status events, and the API server's own request
counters.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from nats.aio.client import Client as NATS

from schemas.messages import ObjectPhase
from services.common.kube import KubeClient

from ..conftest import unique_name
from .pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since


def cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data or {"k": name},
    }


def mixed_bundle(ns: str, suffix: str) -> list[dict[str, Any]]:
    group = f"{suffix}.driftbus.test"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        },
        {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "namespace": ns},
            "spec": {"size": 1},
        },
        {
            "apiVersion": f"{group}/v1",
            "kind": "Widget",
            "metadata": {"name": "w2", "namespace": ns},
            "spec": {"size": 2},
        },
        cm(ns, "settings", mode="fast"),
        cm(ns, "features", beta="true"),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns},
            "stringData": {"password": "hunter2-" + suffix},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx"}]},
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"driftbus:reader:{suffix}"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"driftbus:reader:{suffix}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"driftbus:reader:{suffix}",
            },
            "subjects": [
                {"kind": "User", "name": "reader", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    ]


async def roll_out(kube: KubeClient, ns: str, name: str = "web") -> None:
    """Play the deployment controller (there is none in the test control plane)."""
    res = await kube.discovery.resource("apps/v1", "Deployment")
    for _ in range(200):
        try:
            live = await kube.get(res, name, ns)
            break
        except Exception:  # noqa: BLE001 - not created yet
            await asyncio.sleep(0.1)
    status = {
        "status": {
            "observedGeneration": live["metadata"]["generation"],
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        }
    }
    import orjson

    await kube.request(
        "PATCH",
        res.path(ns, name) + "/status",
        body=orjson.dumps(status),
        content_type="application/merge-patch+json",
    )


async def test_mixed_bundle_converges_in_one_publish(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    suffix = unique_name("mix")
    ns = suffix
    manifests = mixed_bundle(ns, suffix)
    random.Random(7).shuffle(manifests)  # scrambled: staging must sort it out
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "shop")
    pipeline.start_all(appliers=2)
    await pipeline.publish(pnc.jetstream(), "shop", manifests)
    await watch.until(lambda s: s.counts.applied == len(manifests), 90, pipeline.logs)
    await roll_out(kube, ns)
    status = await watch.ready("r1", 60, pipeline.logs)
    assert status.counts.total == status.counts.ready == len(manifests)
    assert not [o for o in watch.objects if o.phase in (ObjectPhase.FAILED, ObjectPhase.CONFLICT)]
    # The cluster holds what was published, labelled as ours.
    cr = await kube.discovery.resource(f"{suffix}.driftbus.test/v1", "Widget")
    assert (await kube.get(cr, "w2", ns))["spec"]["size"] == 2
    role = await kube.discovery.resource("rbac.authorization.k8s.io/v1", "ClusterRole")
    live = await kube.get(role, f"driftbus:reader:{suffix}")
    assert live["metadata"]["labels"]["driftbus.dev/bundle"] == "shop"


async def test_steady_state_causes_zero_writes(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    manifests = [cm(namespace, f"cm-{i}") for i in range(20)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "steady")
    pipeline.start_all()
    js = pnc.jetstream()
    initial = write_counts(pipeline.api)
    await pipeline.publish(js, "steady", manifests)
    await watch.ready("r1", 60, pipeline.logs)
    await settle()
    # The counter sees driftbus: each new object is applied exactly once before its first hit.
    assert writes_since(pipeline.api, initial) == len(manifests)
    before = write_counts(pipeline.api)

    for _ in range(3):  # republish the same revision
        await pipeline.publish(js, "steady", manifests)
    await settle(3)
    assert writes_since(pipeline.api, before) == 0, "republishing the same revision wrote"

    pipeline.kill("planner")  # SIGKILL: no chance to save anything
    pipeline.start("planner")
    await settle(5)
    assert writes_since(pipeline.api, before) == 0, "a restarted planner wrote"

    pipeline.procs["watcher"].stop()
    pipeline.start("watcher")
    await settle(5)
    assert writes_since(pipeline.api, before) == 0, "a restarted watcher caused writes"
