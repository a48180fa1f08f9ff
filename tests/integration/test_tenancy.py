"""Tenancy (issue 20): every bundle is applied with the identity and the limits its tenant was
given, never more. On the real stack (the API server authorises with RBAC): a tenant's bundle is
checked against the tenant policy on the bus, and applied as the tenant's ServiceAccount, so the
API server's RBAC is the final judge.

The applier here runs as the cluster's admin (it may impersonate anybody); what the applier needs
in a real cluster (``impersonate`` on exactly the ServiceAccounts named) is
``test_identities.py``'s and docs/tenancy.md's.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from schemas.codec import encode
from schemas.messages import Bundle, BundlePhase, ObjectPhase
from schemas.subjects import bundle_subject
from services.cli.plan.explain import plan
from services.common import bus
from services.core.manifest import ManifestError
from services.inputs.load import Loaded, Manifest
from services.kube import KubeClient, NotFound
from services.tenancy import policy as tenancy
from services.tenancy import store as policy

from ..conftest import unique_name
from .manifests import cm, secret
from .test_cli import driftbus

SA = "deployer"


def rbac(kind: str, name: str, ns: str = "", **body: Any) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, **body}


async def tenant_namespace(
    kube: KubeClient, ns: str, resources: list[str], sa_namespace: str = ""
) -> None:
    """A namespace where the ServiceAccount ``deployer`` (its own, or ``sa_namespace``'s) may
    manage ``resources`` (and nothing else), made by the platform team outside driftbus."""
    for obj in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA, "namespace": ns}},
        grant(ns, "deploy", resources),
    ):
        await kube.apply(obj, field_manager="platform-team")
    await kube.apply(
        rbac(
            "RoleBinding",
            "deploy",
            ns,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deploy"},
            subjects=[{"kind": "ServiceAccount", "name": SA, "namespace": sa_namespace or ns}],
        ),
        field_manager="platform-team",
    )


def grant(ns: str, role: str, resources: list[str]) -> dict[str, Any]:
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return rbac(
        "Role", role, ns, rules=[{"apiGroups": [""], "resources": resources, "verbs": verbs}]
    )


async def put_policy(pnc: NATS, text: str) -> None:
    await policy.put_policy(pnc.jetstream(), tenancy.load_policy(text, "tenants.yaml"))


def team(name: str, ns: str, extra: str = "") -> str:
    """A tenant of one namespace, applied as its ServiceAccount ``deployer``."""
    return f"""
  {name}:
    serviceAccount: {ns}/{SA}
    namespaces: [{ns}]
{extra}"""


async def exists(kube: KubeClient, kind: str, name: str, ns: str = "") -> bool:
    res = await kube.discovery.resource(
        "v1" if kind in ("ConfigMap", "Secret") else "rbac.authorization.k8s.io/v1", kind
    )
    try:
        await kube.get(res, name, ns)
    except NotFound:
        return False
    return True


async def started(pipeline: Pipeline, pnc: NATS, bundle: str) -> tuple[StatusWatch, DecisionLog]:
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    return watch, decisions


async def test_a_tenants_bundle_within_its_limits_converges_as_its_service_account(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, tenant = unique_name("ta"), unique_name("t")
    bundle = f"{tenant}/web"
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    watch, decisions = await started(pipeline, pnc, bundle)
    await pipeline.publish(pnc.jetstream(), bundle, [cm(ns, "a"), cm(ns, "b")])
    await watch.ready("r1", 60, pipeline.logs)
    applies = [r for r in decisions.records if r.action == "apply"]
    assert len(applies) == 2
    assert {r.identity for r in applies} == {f"system:serviceaccount:{ns}:{SA}"}
    assert {r.bundle for r in applies} == {bundle}

    # prune is made as the ServiceAccount too
    await pipeline.publish(pnc.jetstream(), bundle, [cm(ns, "a")], revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    await settle(1)
    deletes = [r for r in decisions.records if r.action == "delete"]
    assert [(r.key.name, r.identity) for r in deletes] == [
        ("b", f"system:serviceaccount:{ns}:{SA}")
    ]
    assert not await exists(kube, "ConfigMap", "b", ns)
    # `why` names whom each write was made as, and nobody for what wrote nothing
    code, out, err = await driftbus(
        pipeline, "why", f"ConfigMap/{ns}/b", "--cluster", pipeline.cluster, "-o", "json"
    )
    assert code == 0, err
    made_as = {(r["action"], r["made_as"]) for r in json.loads(out)}
    sa = f"system:serviceaccount:{ns}:{SA}"
    assert made_as - {("hit", None)} == {("apply", sa), ("delete", sa)}, made_as


async def test_an_object_outside_the_tenants_namespaces_refuses_the_revision_whole(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, other, tenant = unique_name("ta"), unique_name("other"), unique_name("t")
    bundle = f"{tenant}/web"
    await tenant_namespace(kube, ns, ["configmaps"])
    await tenant_namespace(kube, other, ["configmaps"])  # RBAC would allow it: the policy not
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    watch, _ = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [cm(ns, "a")])
    await watch.ready("r1", 60, pipeline.logs)
    # r2 leaves `a` out: were it taken, `a` would be pruned. `plan` refuses it first.
    r2 = [cm(ns, "b"), cm(other, "c")]
    loaded = Loaded([Manifest(m, f"r2.yaml#{i}") for i, m in enumerate(r2)])
    with pytest.raises(ManifestError, match=f"ConfigMap/{other}/c"):
        await plan(js, kube, cluster=pipeline.cluster, bundle=bundle, loaded=loaded)
    await pipeline.publish(js, bundle, r2, revision="r2")
    status = await watch.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert f"ConfigMap/{other}/c" in status.message
    assert f'namespace "{other}"' in status.message
    await settle(3)
    assert await exists(kube, "ConfigMap", "a", ns), "the revision in force was pruned"
    assert not await exists(kube, "ConfigMap", "b", ns), "part of a refused revision applied"
    assert not await exists(kube, "ConfigMap", "c", other)


async def test_cluster_scoped_objects_and_denied_kinds_are_refused(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """The issue's intruder: a ClusterRoleBinding to cluster-admin in a tenant's bundle."""
    ns, tenant = unique_name("ta"), unique_name("t")
    bundle = f"{tenant}/app"
    await tenant_namespace(kube, ns, ["configmaps"])
    deny = '    kinds:\n      deny: ["rbac.authorization.k8s.io/RoleBinding"]\n'
    await put_policy(pnc, f"tenants:{team(tenant, ns, deny)}")
    watch, _ = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    crb = rbac(
        "ClusterRoleBinding",
        f"{ns}-admin",
        roleRef={
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        subjects=[{"kind": "ServiceAccount", "name": "me", "namespace": ns}],
    )
    await pipeline.publish(js, bundle, [cm(ns, "a"), crb])
    status = await watch.until(lambda s: s.revision == "r1", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert f"ClusterRoleBinding.rbac.authorization.k8s.io/{ns}-admin" in status.message
    assert "cluster-scoped" in status.message

    rb = rbac(
        "RoleBinding",
        "x",
        ns,
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        subjects=[],
    )
    await pipeline.publish(js, bundle, [cm(ns, "a"), rb], revision="r2")
    status = await watch.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "kind rbac.authorization.k8s.io/RoleBinding is denied" in status.message
    await settle(2)
    assert not await exists(kube, "ClusterRoleBinding", f"{ns}-admin")
    assert not await exists(kube, "RoleBinding", "x", ns)
    assert not await exists(kube, "ConfigMap", "a", ns)


async def test_what_rbac_forbids_is_forbidden_until_granted_then_applied_without_a_republish(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """The policy allows Secrets, the ServiceAccount's RBAC does not: the API server refuses
    the impersonated apply, which proves the impersonation is real."""
    ns, tenant = unique_name("ta"), unique_name("t")
    bundle = f"{tenant}/web"
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    watch, _ = await started(pipeline, pnc, bundle)
    await pipeline.publish(pnc.jetstream(), bundle, [cm(ns, "a"), secret(ns, "s")])
    row = await watch.object_status(
        lambda o: o.key.name == "s" and o.phase is ObjectPhase.FORBIDDEN, 60, pipeline.logs
    )
    assert f"system:serviceaccount:{ns}:{SA}" in row.message, row.message
    assert 'cannot patch resource "secrets"' in row.message, row.message
    status = await watch.until(lambda s: s.counts.applied >= 1, 30, pipeline.logs)
    assert status.phase is not BundlePhase.READY
    assert not await exists(kube, "Secret", "s", ns)

    # the platform team grants it: applied on a retry, nobody publishes again
    await kube.apply(grant(ns, "secrets", ["secrets"]), field_manager="platform-team")
    await kube.apply(
        rbac(
            "RoleBinding",
            "secrets",
            ns,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"},
            subjects=[{"kind": "ServiceAccount", "name": SA, "namespace": ns}],
        ),
        field_manager="platform-team",
    )
    await watch.ready("r1", 90, pipeline.logs)
    assert await exists(kube, "Secret", "s", ns)


async def test_a_bundle_of_an_unknown_tenant_is_refused_naming_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns = unique_name("ta")
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(unique_name('t'), ns)}")
    bundle = "team-nobody/web"
    watch, _ = await started(pipeline, pnc, bundle)
    await pipeline.publish(pnc.jetstream(), bundle, [cm(ns, "a")])
    status = await watch.until(lambda s: s.revision == "r1", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "team-nobody" in status.message
    assert "not defined" in status.message
    await settle(2)
    assert not await exists(kube, "ConfigMap", "a", ns)


async def test_a_policy_change_takes_effect_without_a_restart(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """Defining the tenant lets its refused revision in (no republish); narrowing its limits
    later reports what is outside them and prunes nothing."""
    ns, ns2, tenant = unique_name("ta"), unique_name("tb"), unique_name("t")
    bundle = f"{tenant}/web"
    await tenant_namespace(kube, ns, ["configmaps"])
    await tenant_namespace(kube, ns2, ["configmaps"], sa_namespace=ns)
    await put_policy(pnc, "tenants: {}")
    watch, _ = await started(pipeline, pnc, bundle)
    await pipeline.publish(pnc.jetstream(), bundle, [cm(ns, "a"), cm(ns2, "b")])
    status = await watch.until(lambda s: s.revision == "r1", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "not defined" in status.message

    wide = f"""
tenants:
  {tenant}:
    serviceAccount: {ns}/{SA}
    namespaces: [{ns}, {ns2}]
"""
    await put_policy(pnc, wide)
    await watch.ready("r1", 60, pipeline.logs)
    assert await exists(kube, "ConfigMap", "b", ns2)

    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    status = await watch.until(
        lambda s: s.phase is BundlePhase.FAILED and "policy changed" in s.message, 30, pipeline.logs
    )
    assert any(f"ConfigMap/{ns2}/b" in line for line in status.failed_objects), status
    await settle(3)
    assert await exists(kube, "ConfigMap", "b", ns2), "pruned for a policy change"


async def test_platform_bundles_work_as_before_unless_lockdown(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns = unique_name("plat")
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(unique_name('t'), ns)}")
    bundle = unique_name("web")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [cm(ns, "a")])
    await watch.ready("r1", 60, pipeline.logs)
    assert {r.identity for r in decisions.records if r.action == "apply"} == {""}

    await put_policy(pnc, "lockdown: true\ntenants: {}")
    await pipeline.publish(js, bundle, [cm(ns, "b")], revision="r2")
    status = await watch.until(lambda s: s.revision == "r2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "lockdown" in status.message
    await settle(2)
    assert await exists(kube, "ConfigMap", "a", ns)
    assert not await exists(kube, "ConfigMap", "b", ns)


async def test_a_raw_publish_naming_a_tenant_it_may_not_is_refused(
    pipeline: Pipeline, pnc: NATS
) -> None:
    """The tenant is the subject's, checked against the message: a message naming another
    bundle than its subject is refused (a tenant's credentials reach only its own subjects)."""
    tenant = unique_name("t")
    watch, _ = await started(pipeline, pnc, f"{tenant}/web")
    raw = Bundle(cluster=pipeline.cluster, bundle="other/web", revision="r1")
    await bus.ensure_streams(pnc.jetstream())
    await pnc.jetstream().publish(bundle_subject(pipeline.cluster, f"{tenant}/web"), encode(raw))
    status = await watch.until(lambda s: s.revision == "r1", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "published to the subject of" in status.message


async def test_an_unusable_stored_policy_fails_closed_until_a_valid_one_is_applied(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """A planner starting on a policy it cannot decode takes no revision (it cannot know the
    tenants' limits, nor whether lockdown is on) and says why on the status, instead of dying;
    a valid policy applied later lets the revision in with no restart."""
    ns = unique_name("plat")
    await tenant_namespace(kube, ns, ["configmaps"])
    js = pnc.jetstream()
    await bus.ensure_tenants_bucket(js)
    kv = await js.key_value(bus.TENANTS_BUCKET)
    await kv.put(bus.TENANTS_KEY, b'{"tenants": {"x": {"serviceAccount": 7}}}')
    bundle = unique_name("web")
    watch, _ = await started(pipeline, pnc, bundle)
    await pipeline.publish(js, bundle, [cm(ns, "a")])
    status = await watch.until(lambda s: s.revision == "r1", 60, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "tenant policy on the bus is unusable" in status.message, status.message
    await settle(2)
    assert not await exists(kube, "ConfigMap", "a", ns)

    await put_policy(pnc, "tenants: {}")  # an empty policy is a valid one
    await watch.ready("r1", 60, pipeline.logs)
    assert await exists(kube, "ConfigMap", "a", ns)

    # the same while running: no new revision is taken under an unusable policy (not the
    # previous one), the revision in force stays; a valid policy lets the new one in
    await kv.put(bus.TENANTS_KEY, b"not json")
    await settle(1)
    await pipeline.publish(js, bundle, [cm(ns, "b")], revision="r2")
    status = await watch.until(lambda s: s.revision == "r2", 60, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert "tenant policy on the bus is unusable" in status.message, status.message
    await settle(2)
    assert await exists(kube, "ConfigMap", "a", ns), "the revision in force was pruned"
    await put_policy(pnc, "tenants: {}")
    await watch.ready("r2", 60, pipeline.logs)


async def test_publish_fills_in_the_tenants_default_namespace(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Any
) -> None:
    """A new user's try: `publish --bundle team-a/web DIR` of objects naming no namespace was
    refused on the command line, although the tenant's policy names a defaultNamespace."""
    ns, tenant = unique_name("ta"), unique_name("t")
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(tenant, ns, f'    defaultNamespace: {ns}')}")
    pipeline.start_all()
    src = tmp_path / "web"
    src.mkdir()
    (src / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n")
    code, out, err = await driftbus(
        pipeline,
        "publish",
        str(src),
        "--cluster",
        pipeline.cluster,
        "--bundle",
        f"{tenant}/web",
        "--wait",
        "--timeout",
        "60",
    )
    assert code == 0, err + out
    assert await exists(kube, "ConfigMap", "plain", ns)
