"""Prune by inventory, not by label (issue 30, items 1 and 2), on the real stack.

The ownership label is anyone's to copy: ``kubectl get cm settings -o json``, renamed and
created, carries bundle B's label; so does an object a tenant labels with another's bundle. A
bundle prunes only what one of its own revisions was applied to (the APPLIED facts: its
inventory); an object that merely carries the label is reported on the bundle's status and
kept, and is not in the way of Ready. If the inventory is lost (the APPLIED stream purged), the
object is kept too: the safe side. And the scope of a custom kind comes from the cluster, never
from a CRD manifest: a refused revision declaring another scope re-keys (and so prunes) nothing.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from schemas.codec import applied_events
from schemas.messages import BundlePhase
from schemas.subjects import ObjectKey, batch_filter, cluster_filter, object_subject
from services.common import bus
from services.kube import KubeClient

from ..conftest import unique_name
from .manifests import crd
from .test_scope_discovery import until_served
from .waits import until_object

pytestmark = [pytest.mark.timeout(300)]


def cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data or {"mode": "fast"},
    }


def copy_of(live: dict[str, Any], name: str) -> dict[str, Any]:
    """What ``kubectl get -o json`` of ``live``, renamed, gives ``kubectl create``: every label
    and annotation kept, the server's bookkeeping dropped."""
    meta = live["metadata"]
    kept = {k: meta[k] for k in ("namespace", "labels", "annotations") if k in meta}
    rest = {k: v for k, v in live.items() if k != "metadata"}
    return {**rest, "metadata": {**kept, "name": name}}


async def create(kube: KubeClient, obj: dict[str, Any]) -> None:
    res = await kube.resource_for(obj)
    path = res.path(obj["metadata"].get("namespace", ""))
    await kube.request("POST", path, body=orjson.dumps(obj), content_type="application/json")


async def converged(
    pipeline: Pipeline, pnc: NATS, bundle: str, manifests: list[dict[str, Any]]
) -> StatusWatch:
    """``bundle`` published with ``manifests`` as r1 on a started pipeline, and Ready: its
    status watch."""
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    await pipeline.publish(pnc.jetstream(), bundle, manifests)
    await watch.ready("r1", 60, pipeline.logs)
    return watch


async def test_a_kubectl_copy_of_a_managed_object_is_reported_and_never_pruned(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    bundle = unique_name("inv")
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    watch = await converged(
        pipeline, pnc, bundle, [cm(namespace, "settings"), cm(namespace, "gone")]
    )
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")

    await create(kube, copy_of(await kube.get(res, "settings", namespace), "settings-copy"))
    await settle(8)  # it was gone in 8 s: the watcher saw it, the planner pruned it
    await kube.get(res, "settings-copy", namespace)
    status = await watch.until(lambda s: s.counts.not_declared == 1, 30, pipeline.logs)
    assert status.phase is BundlePhase.READY, status
    line = f"ConfigMap/{namespace}/settings-copy: carries bundle {bundle}'s label, not declared"
    assert any(line in f for f in status.failed_objects), status
    assert "not its own (never pruned)" in status.message

    # a new revision prunes what its previous one declared, and still not the copy
    await pipeline.publish(js, bundle, [cm(namespace, "settings")], revision="r2")
    await until_object(kube, res, "gone", namespace, present=False, logs=pipeline.logs)
    await watch.ready("r2", 60, pipeline.logs)
    await settle(3)
    await kube.get(res, "settings-copy", namespace)
    assert "delete" not in decisions.reasons("settings-copy"), decisions.reasons("settings-copy")

    # a planner restart (the level-triggered prune runs again over everything) changes nothing
    pipeline.kill("planner")
    pipeline.start("planner")
    seen = len(watch.bundles)
    await watch.until(lambda s: len(watch.bundles) > seen, 60, pipeline.logs)
    await watch.ready("r2", 60, pipeline.logs)
    await settle(3)
    await kube.get(res, "settings-copy", namespace)


async def test_anothers_label_on_an_object_neither_deletes_it_nor_keeps_that_bundle_from_ready(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """Team A labels an object of its own with bundle B's label: B must not try to delete it
    (as a tenant it would retry a forbidden delete for ever, never Ready), nor count it."""
    victim = unique_name("victim")
    watch = await converged(pipeline, pnc, victim, [cm(namespace, "v")])
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")

    labelled = cm(namespace, "mine")
    labelled["metadata"]["labels"] = {"driftbus.dev/bundle": victim}
    await kube.apply(labelled, field_manager="team-a", force=True)
    await settle(8)
    await kube.get(res, "mine", namespace)
    status = await watch.until(lambda s: s.counts.not_declared == 1, 30, pipeline.logs)
    assert status.phase is BundlePhase.READY, status
    await pipeline.publish(js, victim, [cm(namespace, "v", mode="slow")], revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    await settle(3)
    assert (await kube.get(res, "mine", namespace))["metadata"]["labels"] == {
        "driftbus.dev/bundle": victim
    }


async def test_an_object_whose_inventory_was_lost_is_kept_not_pruned(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """The inventory is the APPLIED stream (the appliers' reports, until a checkpoint of the
    cluster covers them) and the checkpoint. Lost — purged by hand, or the streams recreated —
    the planner no longer knows it applied the object: it keeps it and says so, never deletes
    on the strength of the label alone."""
    bundle = unique_name("lost")
    watch = await converged(pipeline, pnc, bundle, [cm(namespace, "a"), cm(namespace, "b")])
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")

    pipeline.kill("planner")
    key = ObjectKey("", "ConfigMap", namespace, "b")
    await js.purge_stream(bus.APPLIED, subject=object_subject("applied", pipeline.cluster, key))
    # the reports naming b go whole (a's fact with them: a is desired still, and applied again)
    reports, seq = batch_filter("applied", pipeline.cluster), 1
    while (m := await bus.next_message(js, bus.APPLIED, reports, seq)) is not None:
        if any(ap.key == key for ap in applied_events(m.subject or "", m.data or b"")):
            await js.delete_msg(bus.APPLIED, m.seq)
        seq = (m.seq or seq) + 1
    # and the cluster's checkpoint, which holds the inventory too
    await js.purge_stream(bus.CHECKPOINTS, subject=cluster_filter("checkpoint", pipeline.cluster))
    await pipeline.publish(js, bundle, [cm(namespace, "a")], revision="r2")
    pipeline.start("planner")
    await watch.until(lambda s: s.revision == "r2", 60, pipeline.logs)
    await settle(8)
    await kube.get(res, "b", namespace)
    status = await watch.until(
        lambda s: s.revision == "r2" and s.counts.not_declared == 1, 60, pipeline.logs
    )
    assert status.phase is BundlePhase.READY, status


async def test_a_refused_revisions_crd_changes_no_scope_and_prunes_nothing(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    """Revision r1 of ``other`` claims the platform's namespaced kind is cluster-scoped and is
    refused (a bad object); the platform's next revision still keys its resource as namespaced,
    so the live one neither leaves the bundle nor gets pruned."""
    group = f"{unique_name('scope')}.driftbus.test"
    crds, platform, other = unique_name("crds"), unique_name("platform"), unique_name("other")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, platform)
    crds_watch, other_watch = StatusWatch(), StatusWatch()
    await crds_watch.start(pnc, pipeline.cluster, crds)
    await other_watch.start(pnc, pipeline.cluster, other)
    pipeline.start_all()
    js = pnc.jetstream()
    # the CRD in a bundle of its own (as cert-manager's chart and its users' resources are)
    await pipeline.publish(js, crds, [crd(group, "Widget", "Namespaced")])
    await crds_watch.ready("r1", 60, pipeline.logs)
    await until_served(kube, group, {"Widget"})
    widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "x"}}
    await pipeline.publish(js, platform, [widget], namespace=namespace)
    await watch.ready("r1", 90, pipeline.logs)

    broken = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}
    await pipeline.publish(js, other, [crd(group, "Widget", "Cluster"), broken])
    refused = await other_watch.until(lambda s: s.revision == "r1", 30, pipeline.logs)
    assert refused.phase is BundlePhase.FAILED, refused
    # at once, before the watcher's next heartbeat could set a learned scope right again
    await pipeline.publish(
        js, platform, [{**widget, "data": {"v": "2"}}], revision="r2", namespace=namespace
    )
    await settle(5)
    res = await kube.discovery.resource(f"{group}/v1", "Widget")
    assert (await kube.get(res, "x", namespace)).get("data") == {"v": "2"}
    status = await watch.ready("r2", 60, pipeline.logs)
    assert status.counts.total == 1, status
    assert status.counts.pruning == 0, status
