"""Living with other controllers (issue 15), end to end: the real watcher, planner and appliers
on a cluster whose controllers run (kube-controller-manager, kube-scheduler, kwok), and another
client scaling a Deployment through ``/scale`` the way an HPA does, so its ReplicaSets and Pods
really follow each scale.

driftbus's writes are its apply/delete decisions (``DecisionLog``): the API server's counters
also count the controllers', which write all the time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from services.core.ignore import parse_rule
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .test_trust_cli import driftbus

SCALES = 20


@pytest.fixture
async def namespace(live_kube: KubeClient) -> AsyncIterator[str]:
    """A fresh namespace on the cluster with controllers, deleted afterwards."""
    name = unique_name("oc")
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    await live_kube.apply(ns, field_manager="test")
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await live_kube.delete(await live_kube.discovery.resource("v1", "Namespace"), name)


async def _started(p: Pipeline, nc: NATS, bundle: str) -> tuple[StatusWatch, DecisionLog]:
    watch, decisions = StatusWatch(), DecisionLog()
    await watch.start(nc, p.cluster, bundle)
    await decisions.start(nc, p.cluster)
    p.start_all()
    return watch, decisions


def deployment(ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            **spec,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }


async def _scale(kube: KubeClient, path: str, replicas: int) -> None:
    await kube.request(
        "PATCH",
        path + "/scale",
        params={"fieldManager": "hpa-controller"},
        body=orjson.dumps({"spec": {"replicas": replicas}}),
        content_type="application/merge-patch+json",
    )


async def _replicas(kube: KubeClient, path: str) -> int:
    return int((await kube.request("GET", path))["spec"]["replicas"])


async def _scaled_twenty_times(
    decisions: DecisionLog, kube: KubeClient, path: str
) -> tuple[list[str], int]:
    """(driftbus's writes while the scaler scaled 20 times, the last value)."""
    mark = len(decisions.records)
    for i in range(SCALES):
        await _scale(kube, path, 2 + i % 7)
        await asyncio.sleep(0.1)  # let the watcher see each one, as it would an HPA's
    await settle(3)
    return decisions.writes(since=mark), 2 + (SCALES - 1) % 7


async def _applied(watch: StatusWatch, revision: str, pipeline: Pipeline) -> None:
    await watch.until(lambda s: s.revision == revision and s.counts.applied >= 1, 60, pipeline.logs)


async def test_a_scaler_changing_replicas_the_manifest_omits_costs_no_write(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, namespace: str, measured: Any
) -> None:
    bundle = unique_name("hpa")
    watch, decisions = await _started(live_pipeline, lnc, bundle)
    await live_pipeline.publish(lnc.jetstream(), bundle, [deployment(namespace, "web")])
    await watch.ready("r1", 60, live_pipeline.logs)  # Available: its controller said so
    path = (await live_kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    writes, last = await _scaled_twenty_times(decisions, live_kube, path)
    assert not writes, f"driftbus wrote while another manager scaled: {writes}"
    assert await _replicas(live_kube, path) == last
    measured(
        f"{SCALES} scales of a Deployment whose manifest omits replicas, controllers running: "
        f"{len(writes)} writes"
    )


async def test_an_ignore_rule_hands_replicas_over_and_then_costs_no_write(
    live_pipeline: Pipeline,
    lnc: NATS,
    live_kube: KubeClient,
    namespace: str,
    measured: Any,
    tmp_path: Path,
) -> None:
    """r1 sets replicas: 3 (driftbus owns it); r2 adds the rule: replicas stays 3 (plain
    server-side apply would have removed it, and the API server defaulted it to 1), and the
    scaler's changes stay and cost nothing."""
    bundle = unique_name("ignore")
    watch, decisions = await _started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    manifests = [deployment(namespace, "web", replicas=3)]
    await live_pipeline.publish(js, bundle, manifests)
    await _applied(watch, "r1", live_pipeline)
    path = (await live_kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    rule = parse_rule("apps/Deployment:/spec/replicas")
    await live_pipeline.publish(js, bundle, manifests, revision="r2", ignore=[rule])
    await _applied(watch, "r2", live_pipeline)
    await settle(2)
    assert await _replicas(live_kube, path) == 3, "the field was removed when it became ignored"
    writes, last = await _scaled_twenty_times(decisions, live_kube, path)
    assert not writes, f"driftbus wrote over an ignored field: {writes}"
    assert await _replicas(live_kube, path) == last
    # plan agrees with the planner: with the rule nothing to do, the field shown as ignored
    src = tmp_path / "web.json"
    src.write_bytes(orjson.dumps(manifests[0]))
    cluster = live_pipeline.cluster
    plan_args = ["plan", str(src), "--cluster", cluster, "--bundle", bundle, "-o", "json"]
    env = {"KUBECONFIG": str(live_pipeline.stack.cluster.kubeconfig)}
    url = live_pipeline.nats.client_url
    code, out, err = await driftbus(
        url, *plan_args, "--ignore", "apps/Deployment:/spec/replicas", env=env
    )
    assert code == 0, err
    [row] = orjson.loads(out)["objects"]
    assert (row["action"], row["ignored"]) == ("unchanged", ["/spec/replicas"]), row
    code, out, err = await driftbus(url, *plan_args, env=env)
    assert code == 1, err  # the server refuses the dry-run: an error, which CI must see
    [row] = orjson.loads(out)["objects"]
    # without it the manifest's replicas is back, and the scaler owns the field now
    assert (row["action"], row["ignored"]) == ("error", []), row
    assert "conflict" in row["reason"].lower(), row
    assert "replicas" in row["reason"], row
    measured(
        f"{SCALES} scales of a Deployment whose manifest sets replicas, ignored by a rule "
        f"(handed over at 3), controllers running: {len(writes)} writes, the scaler's value stays"
    )


async def test_without_a_rule_and_with_force_the_manifest_wins_each_time(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, namespace: str, measured: Any
) -> None:
    """What the rule is for: a manifest that sets replicas fights the scaler, every change
    corrected and reported (the drift is real: the field driftbus owns left it)."""
    bundle = unique_name("fight")
    watch, decisions = await _started(live_pipeline, lnc, bundle)
    manifests = [deployment(namespace, "web", replicas=3)]
    await live_pipeline.publish(lnc.jetstream(), bundle, manifests, force=True)
    await _applied(watch, "r1", live_pipeline)
    path = (await live_kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    mark = len(decisions.records)
    rounds = 5
    for i in range(rounds):
        await _scale(live_kube, path, 10 + i)
        for _ in range(100):
            if await _replicas(live_kube, path) == 3:
                break
            await asyncio.sleep(0.1)
        assert await _replicas(live_kube, path) == 3, f"scale {i} was not corrected"
    await settle(2)
    corrections = decisions.writes(since=mark)
    assert len(corrections) == rounds, corrections
    assert all(c.endswith("apply drift") for c in corrections), corrections
    measured(f"replicas set with force, scaled {rounds} times: {len(corrections)} corrections")


async def _edit_image(kube: KubeClient, namespace: str, image: str) -> str:
    """``kubectl edit`` of the Deployment's image: an update, which takes the field's ownership
    away from driftbus's apply. Returns the Deployment's path."""
    path = (await kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    edit = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}}
    await kube.request(
        "PATCH",
        path,
        params={"fieldManager": "kubectl-edit"},
        body=orjson.dumps(edit),
        content_type="application/strategic-merge-patch+json",
    )
    return path


async def test_an_owned_field_edited_by_hand_is_corrected_once_with_force(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, namespace: str
) -> None:
    """With ``force`` the manifest takes the image back: one correction, and nothing more while
    the Deployment's controller rolls out each way (counted 3 s after the image is back)."""
    bundle = unique_name("edit")
    watch, decisions = await _started(live_pipeline, lnc, bundle)
    manifests = [deployment(namespace, "web")]
    await live_pipeline.publish(lnc.jetstream(), bundle, manifests, force=True)
    await watch.ready("r1", 60, live_pipeline.logs)
    mark = len(decisions.records)
    path = await _edit_image(live_kube, namespace, "evil:1")
    for _ in range(100):
        live = await live_kube.request("GET", path)
        if live["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27":
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the edit was not corrected: {live['spec']['template']}")
    await settle(3)
    writes = decisions.writes(since=mark)
    assert [w.rsplit(": ", 1)[1] for w in writes] == ["apply drift"], writes


async def test_an_owned_field_edited_by_hand_is_a_conflict_without_force(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, namespace: str
) -> None:
    """Without ``force`` driftbus does not take a field back from the manager that took it:
    the bundle says Conflict and names it, and the edit stays."""
    bundle = unique_name("edit")
    watch, _ = await _started(live_pipeline, lnc, bundle)
    await live_pipeline.publish(lnc.jetstream(), bundle, [deployment(namespace, "web")])
    await watch.ready("r1", 60, live_pipeline.logs)
    path = await _edit_image(live_kube, namespace, "evil:1")
    status = await watch.until(lambda s: s.phase.value == "Conflict", 30, live_pipeline.logs)
    assert any("kubectl-edit" in f for f in status.failed_objects), status
    live = await live_kube.request("GET", path)
    assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "evil:1"


async def test_drift_warn_reports_out_of_sync_and_writes_nothing(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, namespace: str
) -> None:
    bundle = unique_name("warn")
    watch, decisions = await _started(live_pipeline, lnc, bundle)
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": namespace},
        "data": {"mode": "fast"},
    }
    await live_pipeline.publish(lnc.jetstream(), bundle, [cm], drift="warn")
    await watch.ready("r1", 60, live_pipeline.logs)
    res = await live_kube.discovery.resource("v1", "ConfigMap")
    mark = len(decisions.records)
    await live_kube.request(
        "PATCH",
        res.path(namespace, "settings"),
        params={"fieldManager": "kubectl-edit"},
        body=orjson.dumps({"data": {"mode": "slow"}}),
        content_type="application/merge-patch+json",
    )
    status = await watch.until(lambda s: s.phase.value == "OutOfSync", 30, live_pipeline.logs)
    assert any("settings" in f and "drifted" in f for f in status.failed_objects), status
    await settle(3)
    assert not decisions.writes(since=mark), decisions.writes(since=mark)
    assert (await live_kube.get(res, "settings", namespace))["data"] == {"mode": "slow"}
