"""Hooks and sync waves on a cluster whose controllers run (issue 34): a Job is Complete (or
Failed) because the Job controller says so, a Deployment Available because its controller,
the scheduler and kwok's fake kubelet made it so — never because a test wrote a status.

What each test shows is an order in the cluster: a sampler reads the objects every 50 ms while
driftbus works, and the assertions are about every sample (no Deployment changed while the
migration Job of its revision was not Complete), not about driftbus's own account of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from schemas.decision import DecisionAction
from schemas.messages import BundlePhase
from services.controlplane import assets
from services.inputs import load
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .manifests import namespace_of

pytestmark = pytest.mark.integration

HELM_PRE = {"helm.sh/hook": "pre-install,pre-upgrade"}
HELM_POST = {"helm.sh/hook": "post-install,post-upgrade"}


def job(ns: str, name: str, annotations: dict[str, str], **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x:1"}]}
    pod.update(spec.pop("pod", {}))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"backoffLimit": 0, "template": {"spec": pod}, **spec},
    }


def deployment(ns: str, image: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "annotations": annotations or {}},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def configmap(ns: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "data": {"k": name},
    }


@dataclasses.dataclass
class Sample:
    at: float
    objects: dict[str, dict[str, Any] | None]
    """kind/name -> the live object, or None when absent"""


def complete(obj: dict[str, Any] | None) -> bool:
    conds = (obj or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conds)


def available(obj: dict[str, Any] | None) -> bool:
    conds = (obj or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)


def image(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return ""
    return str(obj["spec"]["template"]["spec"]["containers"][0]["image"])


def hook_revision(obj: dict[str, Any] | None) -> str:
    return str(
        ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
            "driftbus.dev/hook-revision", ""
        )
    )


@contextlib.asynccontextmanager
async def sampled(
    kube: KubeClient, ns: str, names: list[tuple[str, str, str]]
) -> AsyncIterator[list[Sample]]:
    """Read the objects ``(apiVersion, kind, name)`` of ``ns`` every 50 ms while the block runs.

    ``names`` go in stage order; each sample reads them last first, effects before causes: an
    object a later stage wrote is never paired with an older read of what it waited for (a
    test process stalled between two reads would otherwise see a Deployment changed beside a
    migration Job read before it completed)."""
    resources = {(v, k): await kube.discovery.resource(v, k) for v, k, _ in names}
    samples: list[Sample] = []

    async def one() -> Sample:
        seen: dict[str, dict[str, Any] | None] = {}
        for version, kind, name in reversed(names):
            try:
                seen[f"{kind}/{name}"] = await kube.get(resources[(version, kind)], name, ns)
            except NotFound:
                seen[f"{kind}/{name}"] = None
        return Sample(time.monotonic(), seen)

    async def run() -> None:
        while True:
            samples.append(await one())
            await asyncio.sleep(0.05)

    task = asyncio.create_task(run())
    try:
        yield samples
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        samples.append(await one())


def never(samples: list[Sample], bad: Callable[[Sample], bool], what: str) -> None:
    found = [s for s in samples if bad(s)]
    assert not found, f"{what}: seen in {len(found)} of {len(samples)} samples"


async def until_present(
    kube: KubeClient, res: Any, name: str, ns: str, present: bool, failure: str
) -> None:
    """Wait (60 s at most) until the object exists (``present``) or is gone."""
    deadline = time.monotonic() + 60
    while True:
        try:
            await kube.get(res, name, ns)
            if present:
                return
        except NotFound:
            if not present:
                return
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.5)


async def started(p: Pipeline, nc: NATS, bundle: str) -> tuple[StatusWatch, DecisionLog]:
    watch = StatusWatch()
    await watch.start(nc, p.cluster, bundle)
    decisions = DecisionLog()
    await decisions.start(nc, p.cluster)
    p.start_all()
    return watch, decisions


async def test_a_pre_upgrade_migration_runs_to_completion_before_the_deployment_changes(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, measured: Any
) -> None:
    ns, bundle = unique_name("hooks"), unique_name("hooks")
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()

    def revision(img: str) -> list[dict[str, Any]]:
        return [
            namespace_of(ns),
            job(ns, "migrate", HELM_PRE),  # default policy: before-hook-creation
            deployment(ns, img),
            job(ns, "announce", {**HELM_POST, "helm.sh/hook-weight": "5"}),
        ]

    names = [
        ("batch/v1", "Job", "migrate"),
        ("apps/v1", "Deployment", "web"),
        ("batch/v1", "Job", "announce"),
    ]
    async with sampled(live_kube, ns, names) as samples:
        await live_pipeline.publish(js, bundle, revision("nginx:1.27"))
        await watch.ready("r1", 180, live_pipeline.logs)
    migrate = samples[-1].objects["Job/migrate"]
    assert migrate is not None
    assert complete(migrate), migrate
    assert hook_revision(migrate) == "r1"
    # install: the Deployment was created only once the migration was Complete, and the
    # post-install hook only once the Deployment was Available
    never(
        samples,
        lambda s: (
            s.objects["Deployment/web"] is not None and not complete(s.objects["Job/migrate"])
        ),
        "the Deployment existed while the pre-install Job was not Complete",
    )
    never(
        samples,
        lambda s: (
            s.objects["Job/announce"] is not None and not available(s.objects["Deployment/web"])
        ),
        "the post-install Job existed while the Deployment was not Available",
    )
    first_uid = migrate["metadata"]["uid"]

    async with sampled(live_kube, ns, names) as samples:
        await live_pipeline.publish(js, bundle, revision("nginx:1.28"), revision="r2")
        await watch.ready("r2", 180, live_pipeline.logs)
    migrate = samples[-1].objects["Job/migrate"]
    assert migrate is not None
    assert hook_revision(migrate) == "r2", migrate
    assert migrate["metadata"]["uid"] != first_uid, "the migration was patched, not run anew"
    assert complete(migrate)
    never(
        samples,
        lambda s: (
            image(s.objects["Deployment/web"]) == "nginx:1.28"
            and not (
                hook_revision(s.objects["Job/migrate"]) == "r2"
                and complete(s.objects["Job/migrate"])
            )
        ),
        "the Deployment changed before the r2 migration Job was Complete",
    )
    assert image(samples[-1].objects["Deployment/web"]) == "nginx:1.28"
    # each hook ran once per revision; nothing re-ran it in between
    await settle(3)
    assert decisions.applies("Job", "migrate") == ["new", "manifest"], decisions.reasons("migrate")
    assert "hold:wave" in decisions.reasons("web")
    measured(
        f"hooks: pre-upgrade migration Job ran anew (uid changed) and Completed before the "
        f"Deployment changed, in every one of {len(samples)} samples 50 ms apart; post-install "
        "Job only after the Deployment was Available"
    )


async def test_a_failing_pre_sync_hook_fails_the_revision_and_nothing_else_is_written(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient
) -> None:
    ns, bundle = unique_name("hookfail"), unique_name("hookfail")
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    failing = job(
        ns,
        "check",
        {
            "argocd.argoproj.io/hook": "PreSync",
            "argocd.argoproj.io/hook-delete-policy": "HookFailed",
        },
        activeDeadlineSeconds=3,
        # no node has this label: the Pod never runs, the Job controller fails the Job at its
        # deadline (DeadlineExceeded)
        pod={"nodeSelector": {"driftbus.test/no-such-node": "true"}},
    )
    manifests = [
        namespace_of(ns),
        failing,
        configmap(ns, "app"),
        deployment(ns, "nginx:1.27"),
        configmap(ns, "on-fail", {"argocd.argoproj.io/hook": "SyncFail"}),
    ]
    await live_pipeline.publish(js, bundle, manifests)
    status = await watch.until(lambda s: s.phase is BundlePhase.FAILED, 120, live_pipeline.logs)
    # named, with how it ended (the Job controller's condition)
    assert any(
        line.startswith(f"Job.batch/{ns}/check: hook failed: ") for line in status.failed_objects
    ), (status.message, status.failed_objects)
    assert f"Job.batch/{ns}/check: hook failed: " in status.message, status.message
    cm = await live_kube.discovery.resource("v1", "ConfigMap")
    dep = await live_kube.discovery.resource("apps/v1", "Deployment")
    jobs = await live_kube.discovery.resource("batch/v1", "Job")
    # the sync-fail hook runs; the revision's other objects are never written
    await until_present(live_kube, cm, "on-fail", ns, True, "the SyncFail hook was never created")
    await settle(3)
    for res, name in ((cm, "app"), (dep, "web")):
        with pytest.raises(NotFound):
            await live_kube.get(res, name, ns)
    # hook-failed: the failed Job is deleted, and not re-created; the revision stays Failed
    with pytest.raises(NotFound):
        await live_kube.get(jobs, "check", ns)
    assert decisions.applies("Job", "check") == ["new"]
    assert decisions.applies("ConfigMap", "app") == []
    assert watch.bundles[-1].phase is BundlePhase.FAILED


async def test_a_revision_stopped_by_its_pre_sync_hook_prunes_nothing(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient
) -> None:
    """What left the revision is pruned in its sync phase (wave 0, as Argo CD does), after the
    pre-sync hooks: a revision whose pre-sync hook fails deletes nothing of the one before it.
    The next revision that gets through prunes it."""
    ns, bundle = unique_name("hookprune"), unique_name("hookprune")
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    await live_pipeline.publish(
        js, bundle, [namespace_of(ns), configmap(ns, "app"), configmap(ns, "old")]
    )
    await watch.ready("r1", 90, live_pipeline.logs)
    failing = job(
        ns,
        "check",
        {"helm.sh/hook": "pre-upgrade"},
        activeDeadlineSeconds=3,
        pod={"nodeSelector": {"driftbus.test/no-such-node": "true"}},  # fails at its deadline
    )
    await live_pipeline.publish(
        js, bundle, [namespace_of(ns), failing, configmap(ns, "app")], revision="r2"
    )
    await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.FAILED, 120, live_pipeline.logs
    )
    await settle(3)
    cm = await live_kube.discovery.resource("v1", "ConfigMap")
    await live_kube.get(cm, "old", ns)  # still there: raises NotFound if it was pruned
    deletes = [
        r for r in decisions.records if r.key.name == "old" and r.action is DecisionAction.DELETE
    ]
    assert deletes == [], deletes
    # a revision that gets through (no hook now) prunes what left
    await live_pipeline.publish(js, bundle, [namespace_of(ns), configmap(ns, "app")], revision="r3")
    await watch.ready("r3", 90, live_pipeline.logs)
    await until_present(live_kube, cm, "old", ns, False, "r3 never pruned the ConfigMap")


async def test_sync_waves_and_a_hook_deleted_when_it_succeeded(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient
) -> None:
    ns, bundle = unique_name("waves"), unique_name("waves")
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    wave = "argocd.argoproj.io/sync-wave"
    manifests = [
        namespace_of(ns),
        configmap(ns, "late", {wave: "2"}),
        deployment(ns, "nginx:1.27", {wave: "1"}),
        configmap(ns, "early", {wave: "-1"}),
        job(
            ns,
            "seed",
            {
                "argocd.argoproj.io/hook": "PostSync",
                "argocd.argoproj.io/hook-delete-policy": "HookSucceeded",
            },
        ),
    ]
    names = [
        ("v1", "ConfigMap", "early"),
        ("apps/v1", "Deployment", "web"),
        ("v1", "ConfigMap", "late"),
        ("batch/v1", "Job", "seed"),
    ]
    async with sampled(live_kube, ns, names) as samples:
        await live_pipeline.publish(js, bundle, manifests)
        await watch.ready("r1", 180, live_pipeline.logs)
        # the PostSync hook ran, succeeded, and its policy deleted it
        jobs = await live_kube.discovery.resource("batch/v1", "Job")
        await until_present(live_kube, jobs, "seed", ns, False, "the hook was never deleted")
    never(
        samples,
        lambda s: s.objects["Deployment/web"] is not None and s.objects["ConfigMap/early"] is None,
        "wave 1 before wave -1",
    )
    never(
        samples,
        lambda s: (
            s.objects["ConfigMap/late"] is not None and not available(s.objects["Deployment/web"])
        ),
        "wave 2 before wave 1 was Available",
    )
    never(
        samples,
        lambda s: s.objects["Job/seed"] is not None and s.objects["ConfigMap/late"] is None,
        "the PostSync hook before the last wave",
    )
    assert any(s.objects["Job/seed"] is not None for s in samples), "the hook never ran"
    # deleted by its policy: not drift, not re-created, the bundle stays Ready
    await settle(5)
    with pytest.raises(NotFound):
        await live_kube.get(jobs, "seed", ns)
    assert decisions.applies("Job", "seed") == ["new"]
    assert watch.bundles[-1].phase is BundlePhase.READY, watch.bundles[-1]


async def test_the_ingress_nginx_chart_converges_with_its_hooks_honoured(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient, measured: Any
) -> None:
    """The real chart (k8s.io/ingress-nginx's charts/ingress-nginx, pinned in tools/go/charts),
    rendered by the real helm: its admission webhook's certificate Jobs are hooks (create:
    pre-install, patch: post-install), and so are their ServiceAccount and RBAC (both phases,
    before-hook-creation,hook-succeeded)."""
    chart = assets.ensure_chart("ingress-nginx")
    bundle = unique_name("ingress")
    ns = "ingress-nginx"
    # no cloud here to give a LoadBalancer an address: the Service is a ClusterIP one
    loaded = load.load_helm(
        str(chart),
        release="ingress-nginx",
        namespace=ns,
        values=[],
        sets=["controller.service.type=ClusterIP"],
    )
    manifests = [namespace_of(ns), *[m.obj for m in loaded.manifests]]
    hooks = [m for m in manifests if "helm.sh/hook" in (m["metadata"].get("annotations") or {})]
    assert {m["kind"] for m in hooks} >= {"Job", "ServiceAccount", "Role", "RoleBinding"}, hooks
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    names = [
        ("batch/v1", "Job", "ingress-nginx-admission-create"),
        ("apps/v1", "Deployment", "ingress-nginx-controller"),
        ("batch/v1", "Job", "ingress-nginx-admission-patch"),
        ("v1", "ServiceAccount", "ingress-nginx-admission"),
    ]
    started_at = time.monotonic()
    async with sampled(live_kube, ns, names) as samples:
        await live_pipeline.publish(js, bundle, manifests)
        await watch.ready("r1", 300, live_pipeline.logs)
        took = time.monotonic() - started_at
        await settle(3)
    create, patch = "Job/ingress-nginx-admission-create", "Job/ingress-nginx-admission-patch"
    dep = "Deployment/ingress-nginx-controller"
    # the pre-install Job is deleted once its phase is done (hook-succeeded): beside the
    # controller's Deployment it is Complete or gone, never running
    never(
        samples,
        lambda s: (
            s.objects[dep] is not None
            and s.objects[create] is not None
            and not complete(s.objects[create])
        ),
        "the controller Deployment beside a pre-install Job not Complete",
    )
    never(
        samples,
        lambda s: s.objects[patch] is not None and not available(s.objects[dep]),
        "the post-install Job before the controller was Available",
    )
    assert any(s.objects[create] is not None for s in samples)
    assert any(s.objects[patch] is not None for s in samples)
    # hook-succeeded: the Jobs and their ServiceAccount are gone once every hook is done
    last = samples[-1].objects
    assert last[create] is None, last
    assert last[patch] is None, last
    assert last["ServiceAccount/ingress-nginx-admission"] is None
    assert available(last[dep])
    assert decisions.applies("Job", "ingress-nginx-admission-create") == ["new"]
    measured(
        f"ingress-nginx chart ({len(manifests)} objects, {len(hooks)} hooks) Ready in "
        f"{took:.1f}s with its hooks in order; hook-succeeded hooks deleted, none re-created"
    )


async def test_a_planner_killed_mid_revision_neither_runs_a_hook_again_nor_stalls(
    live_pipeline: Pipeline, lnc: NATS, live_kube: KubeClient
) -> None:
    """SIGKILL the planner once the pre-install Job is applied; a new one rebuilds from the
    streams: the Job is not applied again (its stamp matches the APPLIED fact), the revision
    goes on from where the cluster is, and the succeeded hook is deleted by its policy."""
    ns, bundle = unique_name("hookkill"), unique_name("hookkill")
    watch, decisions = await started(live_pipeline, lnc, bundle)
    js = lnc.jetstream()
    manifests = [
        namespace_of(ns),
        job(ns, "migrate", {**HELM_PRE, "helm.sh/hook-delete-policy": "hook-succeeded"}),
        deployment(ns, "nginx:1.27"),
    ]
    names = [("batch/v1", "Job", "migrate"), ("apps/v1", "Deployment", "web")]
    async with sampled(live_kube, ns, names) as samples:
        await live_pipeline.publish(js, bundle, manifests)
        await watch.object_status(
            lambda o: o.key.name == "migrate" and o.message == "applied (new)",
            120,
            live_pipeline.logs,
        )
        live_pipeline.kill("planner")
        await asyncio.sleep(1)
        live_pipeline.start("planner")
        await watch.ready("r1", 180, live_pipeline.logs)
        jobs = await live_kube.discovery.resource("batch/v1", "Job")
        await until_present(live_kube, jobs, "migrate", ns, False, "the hook was never deleted")
    assert decisions.applies("Job", "migrate") == ["new"], decisions.reasons("migrate")
    never(
        samples,
        lambda s: (
            s.objects["Deployment/web"] is not None
            and s.objects["Job/migrate"] is not None
            and not complete(s.objects["Job/migrate"])
        ),
        "the Deployment beside a pre-install Job not Complete",
    )
    assert any(s.objects["Job/migrate"] is not None for s in samples), "the hook never ran"
    await settle(3)
    assert watch.bundles[-1].phase is BundlePhase.READY, watch.bundles[-1]
