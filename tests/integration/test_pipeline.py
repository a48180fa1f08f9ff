"""The reconcile pipeline end to end: real watcher, planner and appliers against the real servers.

Assertions are what a user sees: cluster state, status events, and the API server's own request
counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import (
    DecisionLog,
    Pipeline,
    StatusWatch,
    settle,
    write_counts,
    write_requests,
    writes_since,
)
from schemas.messages import BundlePhase, Health, ObjectPhase
from services.cli.plan.state import read_checkpoints
from services.kube import KubeClient, NotFound

from ..conftest import unique_name

# bundle names unique to this run: the API server is shared, and a bundle of an earlier test
# with the same name would have its objects pruned by the next one
STEADY, FIFTY, ERRS, NEWNS, CKPT = (
    unique_name(n) for n in ("steady", "fifty", "errs", "newns", "ckpt")
)


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
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    manifests = [cm(namespace, f"cm-{i}") for i in range(20)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, STEADY)
    pipeline.start_all()
    js = pnc.jetstream()
    initial = write_counts(pipeline.api)
    await pipeline.publish(js, STEADY, manifests)
    await watch.ready("r1", 60, pipeline.logs)
    await settle()
    # The counter sees driftbus: each new object is applied exactly once before its first hit.
    assert writes_since(pipeline.api, initial) == len(manifests)
    before = write_counts(pipeline.api)

    for _ in range(3):  # republish the same revision
        await pipeline.publish(js, STEADY, manifests)
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
    measured(
        f"steady state, {len(manifests)} objects: first publish {len(manifests)} writes; "
        "3 republishes, planner SIGKILL+restart, watcher restart: 0 writes"
    )


async def test_a_restarted_planner_starts_from_the_checkpoint_and_the_facts_after_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """A planner SIGKILLed after its cluster's checkpoint was written rebuilds from it (read
    once, instead of every object's facts) and from what happened since: an object deleted by
    hand while no planner ran is restored — one write, nothing else — and the bundle is Ready
    again, with each object's health as the checkpoint kept it."""
    manifests = [cm(namespace, f"cm-{i}") for i in range(12)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, CKPT)
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, CKPT, manifests)
    await watch.ready("r1", 60, pipeline.logs)

    async def checkpointed() -> bool:
        found = await read_checkpoints(js, [pipeline.cluster])
        cp = found.get(pipeline.cluster)
        if cp is None:
            return False
        ours = {k.name for k, e in cp.entries.items() if e.applied_bundle == CKPT}
        healthy = [k for k, (h, _, _) in cp.kept.items() if h is Health.READY]
        return ours == {f"cm-{i}" for i in range(12)} and len(healthy) >= 12

    await wait_until(checkpointed, 30, "a checkpoint with the bundle's objects, healthy")
    pipeline.kill("planner")  # SIGKILL: no chance to save anything
    res = await kube.discovery.resource("v1", "ConfigMap")
    await kube.delete(res, "cm-3", namespace)  # drift while no planner runs
    await settle()
    before = write_counts(pipeline.api)
    pipeline.start("planner")

    async def restored() -> bool:
        with contextlib.suppress(NotFound):
            await kube.get(res, "cm-3", namespace)
            return True
        return False

    await wait_until(restored, 60, "cm-3 restored after the restart")
    await watch.ready("r1", 60, pipeline.logs)
    await settle(3)
    assert writes_since(pipeline.api, before) == 1  # the restore, and nothing else
    planner_log = pipeline.procs["planner"].log_path.read_text()
    assert "rebuilding from its checkpoint" in planner_log, planner_log[-3000:]
    assert "checkpoint not used" not in planner_log, planner_log[-3000:]


async def wait_until(probe: Any, within: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await probe():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.25)


async def test_objects_in_a_new_namespace_do_not_race_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """One applier given new Namespaces and the objects inside them makes exactly one write per
    object and none that fails: the objects wait for their namespace's apply instead of reaching
    the API server first (a 404 and a retry each). A regression check: the race it guards
    against was not seen on this machine with the gate removed (4 runs, 2 of them with 3 CPU
    burners); ``tests/unit/test_namespace_gate.py`` shows the ordering itself."""
    namespaces = [f"{NEWNS}-{i}" for i in range(8)]
    manifests: list[dict[str, Any]] = []
    for ns in namespaces:
        manifests.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        manifests += [cm(ns, f"cm-{j}") for j in range(7)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, NEWNS)
    pipeline.start_all()
    before = write_requests(pipeline.api)
    try:
        await pipeline.publish(pnc.jetstream(), NEWNS, manifests)
        await watch.ready("r1", 60, pipeline.logs)
        await settle()
        delta = write_requests(pipeline.api) - before
        failed = {k: v for k, v in delta.items() if not k[2].startswith("2")}
        assert not failed, f"failed writes: {failed} (all: {delta})"
        assert sum(delta.values()) == len(manifests), delta
    finally:
        resource = await kube.discovery.resource("v1", "Namespace")
        for ns in namespaces:  # the fixture empties only the test's own namespace
            with contextlib.suppress(NotFound):
                await kube.delete(resource, ns)


async def test_new_revision_applies_and_prunes_exactly_what_changed(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    manifests = [cm(namespace, f"cm-{i}") for i in range(50)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, FIFTY)
    pipeline.start_all()
    js = pnc.jetstream()
    # An object that merely looks like one of ours but lacks the ownership label.
    cm_res = await kube.discovery.resource("v1", "ConfigMap")
    await kube.apply(cm(namespace, "not-ours"), field_manager="someone-else")
    await pipeline.publish(js, FIFTY, manifests)
    await watch.ready("r1", 60, pipeline.logs)
    await settle()

    before = write_counts(pipeline.api)
    changed = [dict(m) for m in manifests]
    for i in (3, 17, 42):
        changed[i] = cm(namespace, f"cm-{i}", k="changed")
    await pipeline.publish(js, FIFTY, changed, revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    await settle()
    assert writes_since(pipeline.api, before) == 3
    assert (await kube.get(cm_res, "cm-17", namespace))["data"] == {"k": "changed"}

    before = write_counts(pipeline.api)
    kept = [m for m in changed if m["metadata"]["name"] not in ("cm-5", "cm-6")]
    await pipeline.publish(js, FIFTY, kept, revision="r3")
    await watch.ready("r3", 60, pipeline.logs)
    await settle()
    assert writes_since(pipeline.api, before) == 2
    names = {i["metadata"]["name"] for i in (await kube.list(cm_res, namespace=namespace))[0]}
    assert "cm-5" not in names
    assert "cm-6" not in names
    assert "not-ours" in names
    assert len(names) == 49  # 48 kept + the unlabelled one

    before = write_counts(pipeline.api)
    await pipeline.publish(js, FIFTY, kept[:10], revision="r4", prune=False)
    await watch.ready("r4", 60, pipeline.logs)
    await settle()
    assert writes_since(pipeline.api, before) == 0, "prune=false must keep removed objects"


async def test_drift_and_out_of_band_deletes_are_restored(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    import statistics
    import time

    trials = 20
    manifests = [cm(namespace, f"drift-{i}", mode="fast") for i in range(trials)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "drift")
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    # force: the intruder takes field ownership; taking it back is what force means
    await pipeline.publish(pnc.jetstream(), "drift", manifests, force=True)
    await watch.ready("r1", 60, pipeline.logs)
    await settle()
    res = await kube.discovery.resource("v1", "ConfigMap")

    async def until(pred: Any, what: str) -> float:
        start = time.monotonic()
        while time.monotonic() - start < 30:
            if await pred():
                return time.monotonic() - start
            await asyncio.sleep(0.01)
        raise AssertionError(f"{what} never happened\n{pipeline.logs()}")

    before = write_counts(pipeline.api)
    drift_times = []
    for i in range(trials):
        name = f"drift-{i}"
        await kube.apply({**cm(namespace, name, mode="slow")}, field_manager="intruder", force=True)

        async def restored(name: str = name) -> bool:
            return (await kube.get(res, name, namespace))["data"].get("mode") == "fast"

        drift_times.append(await until(restored, f"{name} restored"))
    await settle()
    # one write by the intruder and one correction by driftbus per trial, nothing else
    assert writes_since(pipeline.api, before) == 2 * trials

    delete_times = []
    for i in range(5):
        name = f"drift-{i}"
        await kube.delete(res, name, namespace)

        async def recreated(name: str = name) -> bool:
            try:
                await kube.get(res, name, namespace)
                return True
            except Exception:  # noqa: BLE001 - NotFound until it is back
                return False

        delete_times.append(await until(recreated, f"{name} recreated"))
    await settle()
    assert "apply:drift" in decisions.reasons("drift-7")
    assert "apply:deleted" in decisions.reasons("drift-2")
    q = statistics.quantiles(drift_times, n=100, method="inclusive")
    measured(
        f"drift time-to-correct over {trials} trials: p50={statistics.median(drift_times):.3f}s "
        f"p99={q[98]:.3f}s max={max(drift_times):.3f}s; out-of-band delete restored over "
        f"{len(delete_times)} trials: p50={statistics.median(delete_times):.3f}s "
        f"max={max(delete_times):.3f}s"
    )


async def test_errors_are_classified_reported_and_never_leak_secrets(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    planted = "s3cr3t-" + unique_name("planted")
    cm_res = await kube.discovery.resource("v1", "ConfigMap")
    # A field owned by another manager: applying over it without force is a conflict.
    await kube.apply(cm(namespace, "contested", mode="theirs"), field_manager="other-team")
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once", "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1"}],
                }
            }
        },
    }
    manifests = [
        cm(namespace, "fine"),
        cm(namespace, "contested", mode="ours"),
        # invalid: a Secret whose data is not base64 -> 422 that must not echo the value
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bad", "namespace": namespace},
            "data": {"token": planted + "!!notbase64"},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "good", "namespace": namespace},
            "stringData": {"password": planted},
        },
        {
            "apiVersion": "never.driftbus.test/v1",
            "kind": "Ghost",
            "metadata": {"name": "g", "namespace": namespace},
        },
        job,
        cm(namespace, "Not_A_DNS_Name"),  # 422 from the API server
        cm("no-such-namespace-" + namespace[-6:], "orphan"),  # waits for its namespace
    ]
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, ERRS)
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    js = pnc.jetstream()
    # one object the planner cannot even key: the whole revision is refused, nothing applied
    await pipeline.publish(js, ERRS, [*manifests, nameless], revision="r0")
    status = await watch.until(
        lambda s: s.revision == "r0" and s.phase is BundlePhase.FAILED, 60, pipeline.logs
    )
    assert "revision r0 refused" in status.message
    assert "manifests[8]: ConfigMap/?: metadata.name is missing" in status.message
    with pytest.raises(NotFound):
        await kube.get(cm_res, "fine", namespace)

    await pipeline.publish(js, ERRS, manifests)
    status = await watch.until(
        lambda s: (
            s.revision == "r1"
            and s.counts.failed == 2
            and s.counts.conflicts == 1
            and s.counts.applied == 3
            and sum("Waiting" in line for line in s.failed_objects) == 2
        ),
        60,
        pipeline.logs,
    )
    assert status.phase is BundlePhase.FAILED
    failures = "\n".join(status.failed_objects)
    assert 'conflict with "other-team"' in failures
    assert "/bad: " in failures
    assert "illegal base64" in failures  # the server's reason, value not echoed
    assert "Not_A_DNS_Name: Failed" in failures
    assert "Invalid (422)" in failures
    # a missing kind or namespace is not a failure: it waits, saying what for, until it exists
    assert "Ghost" in failures
    assert "not served" in failures
    assert "namespace no-such-namespace-" in failures
    assert "does not exist" in failures
    assert (await kube.get(cm_res, "fine", namespace))["data"] == {"k": "fine"}

    # immutable field: Failed unless the bundle allows replace
    job2 = {
        **job,
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:2"}],
                }
            }
        },
    }
    await pipeline.publish(js, ERRS, [cm(namespace, "fine"), job2], revision="r2")
    status = await watch.until(
        lambda s: s.revision == "r2" and s.counts.failed == 1, 60, pipeline.logs
    )
    assert "immutable" in status.failed_objects[0]
    assert "allow-replace" in status.failed_objects[0]
    await pipeline.publish(
        js, ERRS, [cm(namespace, "fine"), job2], revision="r3", allow_replace=True
    )
    await watch.until(lambda s: s.revision == "r3" and s.counts.applied == 2, 60, pipeline.logs)
    job_res = await kube.discovery.resource("batch/v1", "Job")
    live = await kube.get(job_res, "once", namespace)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:2"

    # the planted value appears nowhere a user or operator reads
    await settle()
    everything = "\n".join(
        [
            repr(watch.objects),
            repr(watch.bundles),
            repr(decisions.records),
            pipeline.all_logs_text(),
        ]
    )
    assert planted not in everything
    import base64

    assert base64.b64encode(planted.encode()).decode() not in everything


async def test_changes_made_while_the_watcher_is_down_are_corrected(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    manifests = [cm(namespace, f"w-{i}", mode="fast") for i in range(10)]
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "down")
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    await pipeline.publish(pnc.jetstream(), "down", manifests, force=True)
    await watch.ready("r1", 60, pipeline.logs)
    await settle()

    pipeline.kill("watcher")
    res = await kube.discovery.resource("v1", "ConfigMap")
    await kube.delete(res, "w-1", namespace)
    await kube.apply(cm(namespace, "w-2", mode="slow"), field_manager="intruder", force=True)
    before = write_counts(pipeline.api)
    pipeline.start("watcher")  # seeded from SERVER, then the list shows what changed meanwhile

    for _ in range(300):
        try:
            restored = (
                await kube.get(res, "w-1", namespace),
                await kube.get(res, "w-2", namespace),
            )
            if restored[1]["data"]["mode"] == "fast":
                break
        except NotFound:  # w-1 until it is recreated
            pass
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"not restored after the watcher came back\n{pipeline.logs()}")
    await settle()
    assert writes_since(pipeline.api, before) == 2
    assert "apply:deleted" in decisions.reasons("w-1")
    assert "apply:drift" in decisions.reasons("w-2")


async def test_sigterm_lets_an_applier_finish_and_hand_back_its_work(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    n = 600
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "term")
    pipeline.start("watcher")
    pipeline.start("planner")
    pipeline.start("applier", "applier-0", "--concurrency", "4")
    await pipeline.publish(pnc.jetstream(), "term", [cm(namespace, f"t-{i}") for i in range(n)])
    await watch.until(lambda s: s.counts.applied >= 50, 60, pipeline.logs)
    pipeline.start("applier", "applier-1", "--concurrency", "4")
    term = pipeline.procs["applier-0"]
    assert term.proc is not None
    term.proc.terminate()
    assert term.proc.wait(timeout=20) == 0, "SIGTERM should end the applier cleanly"
    assert watch.bundles[-1].counts.applied < n, "the run ended before SIGTERM: not a test"
    status = await watch.ready("r1", 120, pipeline.logs)
    assert status.counts.applied == n
    res = await kube.discovery.resource("v1", "ConfigMap")
    assert len((await kube.list(res, namespace=namespace))[0]) == n
    # an idle applier stops promptly too (nats-py's drain used to wait out its 30 s timeout)
    idle = pipeline.procs["applier-1"]
    assert idle.proc is not None
    idle.proc.terminate()
    assert idle.proc.wait(timeout=5) == 0, "an idle applier should exit within seconds"
