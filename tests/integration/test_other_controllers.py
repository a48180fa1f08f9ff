"""Living with other controllers (issue 15), end to end: the real watcher, planner and appliers,
and another client scaling a Deployment through ``/scale`` the way an HPA does.

Counted with the API server's own request counters: the scaler's writes are known, so what is
left over is driftbus's. (No kube-controller-manager runs here yet: the Deployments never roll
out, which does not matter to what is counted.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from services.common.kube import KubeClient
from services.core.ignore import parse_rule

from ..conftest import unique_name
from .test_trust_cli import driftbus

SCALES = 20


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


async def _scaled_twenty_times(pipeline: Pipeline, kube: KubeClient, path: str) -> tuple[int, int]:
    """(driftbus's writes to deployments while the scaler scaled 20 times, the last value)."""
    before = write_counts(pipeline.api)
    for i in range(SCALES):
        await _scale(kube, path, 2 + i % 7)
        await asyncio.sleep(0.1)  # let the watcher see each one, as it would an HPA's
    await settle(3)
    return writes_since(pipeline.api, before, {"deployments"}) - SCALES, 2 + (SCALES - 1) % 7


async def _applied(watch: StatusWatch, revision: str, pipeline: Pipeline) -> None:
    await watch.until(lambda s: s.revision == revision and s.counts.applied >= 1, 60, pipeline.logs)


async def test_a_scaler_changing_replicas_the_manifest_omits_costs_no_write(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    bundle = unique_name("hpa")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    await pipeline.publish(pnc.jetstream(), bundle, [deployment(namespace, "web")])
    await _applied(watch, "r1", pipeline)
    path = (await kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    writes, last = await _scaled_twenty_times(pipeline, kube, path)
    assert writes == 0, f"driftbus wrote {writes} times while another manager scaled"
    assert await _replicas(kube, path) == last
    measured(f"{SCALES} scales of a Deployment whose manifest omits replicas: {writes} writes")


async def test_an_ignore_rule_hands_replicas_over_and_then_costs_no_write(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    measured: Any,
    tmp_path: Path,
) -> None:
    """r1 sets replicas: 3 (driftbus owns it); r2 adds the rule: replicas stays 3 (plain
    server-side apply would have removed it, and the API server defaulted it to 1), and the
    scaler's changes stay and cost nothing."""
    bundle = unique_name("ignore")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    js = pnc.jetstream()
    manifests = [deployment(namespace, "web", replicas=3)]
    await pipeline.publish(js, bundle, manifests)
    await _applied(watch, "r1", pipeline)
    path = (await kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    rule = parse_rule("apps/Deployment:/spec/replicas")
    await pipeline.publish(js, bundle, manifests, revision="r2", ignore=[rule])
    await _applied(watch, "r2", pipeline)
    await settle(2)
    assert await _replicas(kube, path) == 3, "the field was removed when it became ignored"
    writes, last = await _scaled_twenty_times(pipeline, kube, path)
    assert writes == 0, f"driftbus wrote {writes} times over an ignored field"
    assert await _replicas(kube, path) == last
    # plan agrees with the planner: with the rule nothing to do, the field shown as ignored
    src = tmp_path / "web.json"
    src.write_bytes(orjson.dumps(manifests[0]))
    plan_args = ["plan", str(src), "--cluster", pipeline.cluster, "--bundle", bundle, "-o", "json"]
    env = {"KUBECONFIG": str(pipeline.stack.cluster.kubeconfig)}
    code, out, err = await driftbus(
        pipeline.nats.client_url, *plan_args, "--ignore", "apps/Deployment:/spec/replicas", env=env
    )
    assert code == 0, err
    [row] = orjson.loads(out)
    assert (row["action"], row["ignored"]) == ("unchanged", ["/spec/replicas"]), row
    code, out, err = await driftbus(pipeline.nats.client_url, *plan_args, env=env)
    assert code == 0, err
    [row] = orjson.loads(out)
    # without it the manifest's replicas is back, and the scaler owns the field now
    assert (row["action"], row["ignored"]) == ("error", []), row
    assert "conflict" in row["reason"].lower(), row
    assert "replicas" in row["reason"], row
    measured(
        f"{SCALES} scales of a Deployment whose manifest sets replicas, ignored by a rule "
        f"(handed over at 3): {writes} writes, the scaler's value stays"
    )


async def test_without_a_rule_and_with_force_the_manifest_wins_each_time(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    """What the rule is for: a manifest that sets replicas fights the scaler, every change
    corrected (the drift is real: the field driftbus owns left it)."""
    bundle = unique_name("fight")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    await pipeline.publish(
        pnc.jetstream(), bundle, [deployment(namespace, "web", replicas=3)], force=True
    )
    await _applied(watch, "r1", pipeline)
    path = (await kube.discovery.resource("apps/v1", "Deployment")).path(namespace, "web")
    before = write_counts(pipeline.api)
    rounds = 5
    for i in range(rounds):
        await _scale(kube, path, 10 + i)
        for _ in range(100):
            if await _replicas(kube, path) == 3:
                break
            await asyncio.sleep(0.1)
        assert await _replicas(kube, path) == 3, f"scale {i} was not corrected"
    await settle(2)
    corrections = writes_since(pipeline.api, before, {"deployments"}) - rounds
    assert corrections == rounds
    measured(f"replicas set with force, scaled {rounds} times: {corrections} corrections")


async def test_drift_warn_reports_out_of_sync_and_writes_nothing(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    bundle = unique_name("warn")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": namespace},
        "data": {"mode": "fast"},
    }
    await pipeline.publish(pnc.jetstream(), bundle, [cm], drift="warn")
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    before = write_counts(pipeline.api)
    await kube.request(
        "PATCH",
        res.path(namespace, "settings"),
        params={"fieldManager": "kubectl-edit"},
        body=orjson.dumps({"data": {"mode": "slow"}}),
        content_type="application/merge-patch+json",
    )
    status = await watch.until(lambda s: s.phase.value == "OutOfSync", 30, pipeline.logs)
    assert any("settings" in f and "drifted" in f for f in status.failed_objects), status
    await settle(3)
    assert writes_since(pipeline.api, before, {"configmaps"}) == 1  # the edit, nothing else
    assert (await kube.get(res, "settings", namespace))["data"] == {"mode": "slow"}
