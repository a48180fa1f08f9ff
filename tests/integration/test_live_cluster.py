"""driftbus on a cluster whose controllers run (issue 15): kube-controller-manager,
kube-scheduler and kwok's fake kubelet, all real binaries (``servers.Controllers``).

Deployments roll out to ReplicaSets and Ready Pods and report Available, so health is what the
controllers write, not what a test writes; a pruned Namespace really finishes terminating.
driftbus's own writes are counted from its decisions (the API server's counters also count
the controllers', which write all the time).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .manifests import namespace_of

pytestmark = pytest.mark.integration


def deployment(ns: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


async def test_a_deployment_is_ready_when_its_controller_says_and_a_rollout_costs_no_write(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, measured: Any
) -> None:
    ns = unique_name("roll")
    bundle = unique_name("roll")
    watch = StatusWatch()
    await watch.start(lnc, live_pipeline.cluster, bundle)
    decisions = DecisionLog()
    await decisions.start(lnc, live_pipeline.cluster)
    live_pipeline.start_all()
    js = lnc.jetstream()
    started = time.monotonic()
    await live_pipeline.publish(js, bundle, [namespace_of(ns), deployment(ns, "nginx:1.27")])
    # Ready only once the Deployment controller, the scheduler and kwok made it Available
    await watch.ready("r1", 120, live_pipeline.logs)
    ready_r1 = time.monotonic() - started
    res = await live_kube.discovery.resource("apps/v1", "Deployment")
    live = await live_kube.get(res, "web", ns)
    assert live["status"].get("availableReplicas") == 1, live["status"]
    assert live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"

    started = time.monotonic()
    await live_pipeline.publish(
        js, bundle, [namespace_of(ns), deployment(ns, "nginx:1.28")], revision="r2"
    )
    await watch.ready("r2", 120, live_pipeline.logs)
    ready_r2 = time.monotonic() - started
    live = await live_kube.get(res, "web", ns)
    assert live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    await settle(5)  # the controller's rollout writes (ReplicaSets, status, annotation) settle
    applies = decisions.applies("Deployment", "web")
    assert applies == ["new", "manifest"], applies
    measured(
        f"live cluster: Deployment Ready (Available from its controller) {ready_r1:.1f}s after "
        f"publish, rolled out to a new image in {ready_r2:.1f}s; driftbus applies: 2 (one per "
        "revision), none for the controller's writes"
    )


async def test_a_pruned_namespace_is_really_gone(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient
) -> None:
    keep, leave = unique_name("keep"), unique_name("leave")
    bundle = unique_name("prune-ns")
    watch = StatusWatch()
    await watch.start(lnc, live_pipeline.cluster, bundle)
    live_pipeline.start_all()
    js = lnc.jetstream()
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "inside", "namespace": leave},
        "data": {"k": "v"},
    }
    await live_pipeline.publish(js, bundle, [namespace_of(keep), namespace_of(leave), cm])
    await watch.ready("r1", 60, live_pipeline.logs)
    # a Namespace's prune waits for an approval (the prune budget, test_prune_budget.py): this
    # revision gives it (publish --allow-prune)
    await live_pipeline.publish(js, bundle, [namespace_of(keep)], revision="r2", allow_prune=True)
    await watch.ready("r2", 60, live_pipeline.logs)
    res = await live_kube.discovery.resource("v1", "Namespace")
    deadline = time.monotonic() + 60
    while True:  # the namespace controller empties it, then it is removed
        try:
            state = await live_kube.get(res, leave)
        except NotFound:
            break
        assert time.monotonic() < deadline, f"namespace still there: {state.get('status')}"
        await asyncio.sleep(0.5)
    await live_kube.get(res, keep)


async def test_a_finished_job_its_ttl_controller_deletes_is_not_re_created(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, measured: Any
) -> None:
    """kwok runs the Job's Pod to completion, the Job controller marks it Complete, the
    TTL-after-finished controller deletes it at once (``ttlSecondsAfterFinished: 0``). driftbus
    takes that as the Job's end: one apply in all, the bundle stays Ready; a new revision of the
    Job runs it again."""
    ns = unique_name("job")
    bundle = unique_name("job")
    watch = StatusWatch()
    await watch.start(lnc, live_pipeline.cluster, bundle)
    decisions = DecisionLog()
    await decisions.start(lnc, live_pipeline.cluster)
    live_pipeline.start_all()
    js = lnc.jetstream()

    def job(image: str) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "migrate", "namespace": ns},
            "spec": {
                "ttlSecondsAfterFinished": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "m", "image": image}],
                    }
                },
            },
        }

    res = await live_kube.discovery.resource("batch/v1", "Job")

    async def gone() -> None:
        deadline = time.monotonic() + 90
        while True:
            try:
                await live_kube.get(res, "migrate", ns)
            except NotFound:
                return
            assert time.monotonic() < deadline, "the Job was never completed and removed"
            await asyncio.sleep(0.5)

    await live_pipeline.publish(js, bundle, [namespace_of(ns), job("busybox:1")])
    await watch.object_status(  # created first (on a busy machine that can take a while)
        lambda o: o.key.name == "migrate" and o.message == "applied (new)", 120, live_pipeline.logs
    )
    await gone()
    await settle(10)  # time for a re-create loop to show
    with pytest.raises(NotFound):
        await live_kube.get(res, "migrate", ns)
    assert decisions.applies("Job", "migrate") == ["new"]
    latest = watch.bundles[-1]
    assert latest.phase.value == "Ready", latest
    # a new revision of the Job is a new run
    await live_pipeline.publish(js, bundle, [namespace_of(ns), job("busybox:2")], revision="r2")
    await watch.object_status(
        lambda o: o.key.name == "migrate" and o.message == "applied (manifest)",
        120,
        live_pipeline.logs,
    )
    await gone()
    await settle(5)
    assert decisions.applies("Job", "migrate") == ["new", "manifest"]
    measured(
        "live cluster: a Job with ttlSecondsAfterFinished: 0 completed and was removed by its "
        "controller; driftbus applied it once per revision, no re-create loop"
    )
