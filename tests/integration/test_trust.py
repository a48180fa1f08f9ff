"""Trust (issue 13): prune never destroys what the user meant to keep, status never says Ready
when it isn't. One black-box test per reported case, on the real stack: real watcher, planner
and appliers against a real nats-server and kube-apiserver; assertions are what a user sees
(the cluster, the bundle status).

Cases 1 (the CLI's part) and 5 live in test_trust_cli.py and test_trust_stuck.py; the webhook
that answers 500 for minutes in test_trust_webhook.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from schemas.codec import encode
from schemas.messages import Bundle, BundlePhase, ObjectPhase
from schemas.subjects import bundle_subject
from services.cli.plan.explain import plan
from services.inputs.load import Loaded, Manifest
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .manifests import namespace_of
from .waits import until_object


def cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data or {"k": name},
    }


async def test_case1_an_empty_revision_is_refused_and_prunes_nothing(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """A publish that loaded nothing (a wrong path) must not prune the whole bundle."""
    ns = unique_name("empty")
    bundle = unique_name("b")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a"), cm(ns, "b")])
    await watch.ready("r1", 60, pipeline.logs)

    # driftbus's own publish refuses it; a raw publisher's reaches the planner, which refuses it
    with pytest.raises(ValueError, match="empty revision"):
        await pipeline.publish(js, bundle, [], revision="r2")
    raw = Bundle(cluster=pipeline.cluster, bundle=bundle, revision="r2")
    await js.publish(bundle_subject(pipeline.cluster, bundle), encode(raw))
    status = await watch.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "no objects" in status.message
    assert "allow-empty" in status.message
    await settle(3)
    cm_res = await kube.discovery.resource("v1", "ConfigMap")
    ns_res = await kube.discovery.resource("v1", "Namespace")
    await kube.get(cm_res, "a", ns)
    await kube.get(cm_res, "b", ns)
    assert "deletionTimestamp" not in (await kube.get(ns_res, ns))["metadata"]

    # said explicitly, it is what the publisher wants: everything goes
    await pipeline.publish(js, bundle, [], revision="r3", allow_empty=True)
    await until_object(kube, cm_res, "a", ns, present=False, logs=pipeline.logs)
    await until_object(kube, cm_res, "b", ns, present=False, logs=pipeline.logs)


async def test_case1_a_revision_with_one_bad_object_is_refused_whole(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """A raw publisher's bad object must not fall out of the revision (and get pruned)."""
    watch = StatusWatch()
    bundle = unique_name("raw")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [cm(namespace, "a"), cm(namespace, "b")])
    await watch.ready("r1", 60, pipeline.logs)
    broken = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}
    await pipeline.publish(js, bundle, [cm(namespace, "a", k="new"), broken], revision="r2")
    status = await watch.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "revision r2 refused" in status.message
    assert "manifests[1]: ConfigMap/?: metadata.name is missing" in status.message
    await settle(3)
    res = await kube.discovery.resource("v1", "ConfigMap")
    assert (await kube.get(res, "a", namespace))["data"] == {"k": "a"}  # r2 not applied at all
    await kube.get(res, "b", namespace)  # and b not pruned


async def test_case2_prune_works_after_a_planner_restart_and_when_reenabled(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    watch = StatusWatch()
    bundle = unique_name("p")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")
    await pipeline.publish(js, bundle, [cm(namespace, "a"), cm(namespace, "b")])
    await watch.ready("r1", 60, pipeline.logs)

    pipeline.kill("planner")
    await pipeline.publish(js, bundle, [cm(namespace, "a")], revision="r2")
    pipeline.start("planner")
    await until_object(kube, res, "b", namespace, present=False, logs=pipeline.logs)
    status = await watch.ready("r2", 60, pipeline.logs)
    assert status.counts.failed == 0
    assert not any(o.phase is ObjectPhase.FAILED for o in watch.objects), watch.objects

    # prune off: c stays; prune back on: c goes
    await pipeline.publish(js, bundle, [cm(namespace, "a"), cm(namespace, "c")], revision="r3")
    await watch.ready("r3", 60, pipeline.logs)
    await pipeline.publish(js, bundle, [cm(namespace, "a")], revision="r4", prune=False)
    await watch.ready("r4", 60, pipeline.logs)
    await settle(2)
    await kube.get(res, "c", namespace)
    await pipeline.publish(js, bundle, [cm(namespace, "a")], revision="r5")
    await until_object(kube, res, "c", namespace, present=False, logs=pipeline.logs)
    await watch.ready("r5", 60, pipeline.logs)


async def test_case3_a_conflict_is_never_ready_and_status_follows_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    watch = StatusWatch()
    bundle = unique_name("c")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    objects = [cm(namespace, f"o-{i}") for i in range(9)]
    await pipeline.publish(js, bundle, objects)  # no force: another manager's fields are theirs
    await watch.ready("r1", 60, pipeline.logs)
    # another client takes a field driftbus owns: driftbus sees drift, may not take it back
    await kube.apply(cm(namespace, "o-3", k="theirs"), field_manager="other-team", force=True)
    status = await watch.until(lambda s: s.phase is BundlePhase.CONFLICT, 30, pipeline.logs)
    assert status.counts.conflicts == 1
    assert any("o-3" in line and "other-team" in line for line in status.failed_objects)
    await settle(2)
    assert watch.bundles[-1].phase is not BundlePhase.READY


async def test_case4_a_cluster_scoped_object_with_a_stray_namespace_converges_and_heals(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    name = unique_name("driftbus-stray")
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "namespace": namespace},  # kubectl ignores it; so must we
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }
    watch = StatusWatch()
    bundle = unique_name("s")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    await pipeline.publish(pnc.jetstream(), bundle, [role])
    await watch.ready("r1", 60, pipeline.logs)
    # `driftbus plan` keys it the same way: nothing to do
    rows = await plan(
        pnc.jetstream(),
        kube,
        cluster=pipeline.cluster,
        bundle=bundle,
        loaded=Loaded([Manifest(role, "role.yaml#0")]),
    )
    assert [(str(r.key), r.action) for r in rows] == [
        (f"ClusterRole.rbac.authorization.k8s.io/{name}", "unchanged")
    ]
    res = await kube.discovery.resource("rbac.authorization.k8s.io/v1", "ClusterRole")
    await kube.delete(res, name)
    await until_object(kube, res, name, "", present=True, within=30, logs=pipeline.logs)


async def test_case6_a_cluster_nobody_serves_says_so(pipeline: Pipeline, pnc: NATS) -> None:
    watch = StatusWatch()
    bundle = unique_name("lonely")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start("planner")  # no watcher, no applier for this cluster
    await pipeline.publish(pnc.jetstream(), bundle, [cm("default", unique_name("x"))])
    status = await watch.until(lambda s: "no watcher" in s.message, 30, pipeline.logs)
    assert status.phase is BundlePhase.RECONCILING
    assert f"no applier for cluster {pipeline.cluster}" in status.message


async def test_prune_safeguards_annotation_ownership_and_namespace_in_use(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns = unique_name("shared")
    keep = cm(ns, "keep")
    keep["metadata"]["annotations"] = {"driftbus.dev/prune": "disabled"}
    a, b = unique_name("a"), unique_name("b")
    watch_a, watch_b = StatusWatch(), StatusWatch()
    await watch_a.start(pnc, pipeline.cluster, a)
    await watch_b.start(pnc, pipeline.cluster, b)
    pipeline.start_all()
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")
    ns_res = await kube.discovery.resource("v1", "Namespace")
    await pipeline.publish(js, a, [namespace_of(ns), cm(ns, "a1"), keep])
    await watch_a.ready("r1", 60, pipeline.logs)
    await pipeline.publish(js, b, [cm(ns, "b1")])
    await watch_b.ready("r1", 60, pipeline.logs)

    # one owner per object: b may not declare a's object without taking it over
    await pipeline.publish(js, b, [cm(ns, "b1"), cm(ns, "a1", k="b's")], revision="r2")
    status = await watch_b.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert any(f"already declared by bundle {a}" in line for line in status.failed_objects)
    # the one line `bundles` and the page show names the owner too, not only "1 of 2 failed"
    assert f"1 already declared by bundle {a}" in status.message, status.message
    assert (await kube.get(res, "a1", ns))["data"] == {"k": "a1"}

    # a drops everything but allows it: the annotated object stays, the Namespace stays
    # because b's object lives in it, a1 goes
    await pipeline.publish(js, a, [], revision="r2", allow_empty=True)
    await until_object(kube, res, "a1", ns, present=False, logs=pipeline.logs)
    status = await watch_a.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.OUT_OF_SYNC, 30, pipeline.logs
    )
    assert any("still holds" in line and f"bundle {b}" in line for line in status.failed_objects)
    await settle(2)
    await kube.get(res, "keep", ns)
    assert "deletionTimestamp" not in (await kube.get(ns_res, ns))["metadata"]
    assert any(o.phase is ObjectPhase.KEPT and o.key.kind == "Namespace" for o in watch_a.objects)


async def test_nats_outage_longer_than_the_publish_retry_loses_no_drift_or_delete(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """The watcher sees a drift and a delete while NATS is down for longer than its publisher
    retries; once NATS is back both are corrected (the facts were not dropped)."""
    watch = StatusWatch()
    bundle = unique_name("out")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.role_env["watcher"] = {"DRIFTBUS_PUBLISH_RETRY": "3"}
    pipeline.start_all()
    await pipeline.publish(
        pnc.jetstream(), bundle, [cm(namespace, f"o-{i}") for i in range(3)], force=True
    )
    await watch.ready("r1", 60, pipeline.logs)
    await settle(2)
    res = await kube.discovery.resource("v1", "ConfigMap")

    pipeline.nats.stop()
    await asyncio.sleep(1)
    await kube.apply(cm(namespace, "o-1", k="changed"), field_manager="intruder", force=True)
    await kube.delete(res, "o-2", namespace)
    await asyncio.sleep(12)  # four times the watcher's publish retry
    pipeline.nats.start()  # same port, same JetStream store

    for _ in range(600):
        try:
            if (await kube.get(res, "o-1", namespace))["data"] == {"k": "o-1"}:
                await kube.get(res, "o-2", namespace)
                break
        except NotFound:
            pass
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"drift or delete lost in the outage\n{pipeline.logs()}")
    before = write_counts(pipeline.api)
    await settle(3)
    assert writes_since(pipeline.api, before, {"configmaps"}) == 0  # and it settles


async def test_a_prune_is_reported_pruned_with_the_bundles_propagation_policy(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    watch = StatusWatch()
    bundle = unique_name("prop")
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [cm(namespace, "a"), cm(namespace, "b")])
    await watch.ready("r1", 60, pipeline.logs)
    await pipeline.publish(js, bundle, [cm(namespace, "a")], revision="r2", propagation="Orphan")
    res = await kube.discovery.resource("v1", "ConfigMap")
    # Orphan makes the API server put the orphan finalizer on it (no garbage collector runs
    # here to finish the deletion): proof the bundle's policy went with the delete
    for _ in range(300):
        meta = (await kube.get(res, "b", namespace))["metadata"]
        if meta.get("deletionTimestamp"):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"b was never deleted\n{pipeline.logs()}")
    assert "orphan" in meta.get("finalizers", [])
    # the status event may trail the API server's view of the delete: wait for it, bounded
    await watch.object_status(
        lambda o: o.phase is ObjectPhase.PRUNED and o.key.name == "b", 30, pipeline.logs
    )
