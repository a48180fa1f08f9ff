"""Scenario `tenancy`: what impersonation costs on a cold apply (issue 20).

The same 1,000 objects (the `cold` mix) applied from nothing by driftbus with 4 appliers, in the
same run against the same API server, two ways:

* as a tenant's bundle (``bench/bench``): every object within the tenant's limits, every write
  impersonating its ServiceAccount, which the RBAC authorizer judges (a RoleBinding per
  namespace to a namespace-admin ClusterRole, as a platform team would grant a tenant);
* as the platform bundle ``bench`` (driftbus's own identity): the peer.

The order alternates between repetitions so that a machine getting busier favours neither. Both
start timing once the planner knows the custom kind's scope (a tenant's revision waits for it
on a stack started a second ago, see docs/tenancy.md): what is measured is impersonation.
Target: the tenant's time ≤ 1.05 × the platform's. Also reported: the API server's CPU seconds
per run, where impersonation's cost lands (far less noisy than wall time here).

Both contenders run the applier as deploy/rbac.yaml's least-privileged ServiceAccount user,
plus ``driftbus tenants rbac``'s Role: the API server checks ``impersonate`` through RBAC, as it
would in a cluster, rather than waving through a ``system:masters`` admin.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import orjson
import yaml

from bench.report import Result
from bench.stack import (
    BUNDLE,
    CRD_GROUP,
    BenchStack,
    DriftbusRun,
    Run,
    check_writes,
    manifests,
    namespaces_for,
)
from harness.pipeline import DecisionLog, settle
from schemas.tenants import TenantPolicy
from services.clusters import members
from services.controlplane import servers
from services.tenancy import policy as tenancy
from services.tenancy.rbac import impersonation_rbac

TENANT = "bench"
SA = "deployer"
ROLE = "bench-tenant-admin"
APPLIER = "driftbus/driftbus-applier"
APPLIER_USER = "system:serviceaccount:driftbus:driftbus-applier"
APPLIER_GROUPS = (
    "system:serviceaccounts",
    "system:serviceaccounts:driftbus",
    "system:authenticated",
)
ROOT = Path(__file__).resolve().parents[1]


async def allowed(b: BenchStack, user: str, groups: list[str], attributes: dict[str, str]) -> None:
    """Until the RBAC authorizer (which reads bindings from its informers) says yes."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "resourceAttributes": attributes},
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = await b.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            data=orjson.dumps(review),
            headers={"Content-Type": "application/json"},
        )
        if answer["status"].get("allowed"):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{user} was never allowed {attributes}")


async def least_privilege_applier(b: BenchStack) -> None:
    """The applier's ClusterRole and binding as deploy/rbac.yaml ships them (no impersonate)."""
    docs = yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text())
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    for doc in docs:
        if doc and doc["metadata"]["name"] == "driftbus:applier":
            plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}
            await b.apply(f"{rbac}/{plural[doc['kind']]}/driftbus:applier", doc)


async def grant_tenant(b: BenchStack, namespaces: list[str], policy: TenantPolicy) -> None:
    """The tenant's ServiceAccount (in the first namespace) may do anything in ``namespaces``,
    through a RoleBinding in each: RBAC evaluates real bindings for every impersonated write;
    and the applier may impersonate it (``driftbus tenants rbac``'s Role)."""
    sa_ns = namespaces[0]
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    docs: list[tuple[str, dict[str, object]]] = [
        (
            f"/api/v1/namespaces/{sa_ns}/serviceaccounts/{SA}",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA}},
        ),
        (
            f"{rbac}/clusterroles/{ROLE}",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": ROLE},
                "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
            },
        ),
    ]
    for ns in namespaces:
        docs.append(
            (
                f"{rbac}/namespaces/{ns}/rolebindings/{ROLE}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": ROLE, "namespace": ns},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": ROLE,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": sa_ns}],
                },
            )
        )
    for doc in impersonation_rbac(policy, APPLIER):
        plural = "roles" if doc["kind"] == "Role" else "rolebindings"
        meta = doc["metadata"]
        docs.append((f"{rbac}/namespaces/{meta['namespace']}/{plural}/{meta['name']}", doc))
    for path, doc in docs:
        await b.apply(path, doc)
    tenant_groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}"]
    await allowed(
        b,
        f"system:serviceaccount:{sa_ns}:{SA}",
        tenant_groups,
        {
            "namespace": namespaces[-1],
            "verb": "patch",
            "resource": "roles",
            "group": "rbac.authorization.k8s.io",
        },
    )
    await allowed(
        b,
        APPLIER_USER,
        list(APPLIER_GROUPS),
        {"namespace": sa_ns, "verb": "impersonate", "resource": "serviceaccounts", "name": SA},
    )


async def scopes_known(d: DriftbusRun) -> None:
    """Warm-up, untimed and for both contenders: the watcher has announced the scope of the
    mix's custom kind and the planner has had a heartbeat read since (its members interval), as
    in a planner that has been running for a while. What a tenant's first revision waits for on
    a stack started a second ago is the scope, not impersonation."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        beat = (await members.heartbeats(d.js, d.p.cluster)).get("watcher")
        if beat is not None and any(sc.group == CRD_GROUP for sc in beat.scopes):
            await asyncio.sleep(2.5)  # the planner reads heartbeats every 2 s
            return
        await asyncio.sleep(0.1)
    raise RuntimeError("the watcher never announced the bench CRD's scope")


async def _main(objects: int, repetitions: int) -> list[Result]:
    objs = manifests(objects)
    namespaces = namespaces_for(objects)
    policy = tenancy.load_policy(
        f"tenants:\n  {TENANT}:\n    serviceAccount: {namespaces[0]}/{SA}\n"
        f"    namespaces: [bench-*]\n",
        "bench-tenants.yaml",
    )
    runs: dict[str, list[Run]] = {"tenant": [], "platform": []}
    token = secrets.token_urlsafe(24)
    applier = servers.User(APPLIER_USER, token, APPLIER_GROUPS)
    async with BenchStack.start(objects, users=[applier]) as b:
        await least_privilege_applier(b)
        kubeconfig = b.api.write_kubeconfig(b.workdir / "applier.kubeconfig", token=token, user="a")
        role_env = {"applier": {"KUBECONFIG": str(kubeconfig)}}
        for rep in range(repetitions):
            order = ("tenant", "platform") if rep % 2 == 0 else ("platform", "tenant")
            for who in order:
                # cleanup removes every Role and RoleBinding of the bench namespaces: the
                # tenant's are granted again, untimed, before each run (the platform's too)
                await grant_tenant(b, namespaces, policy)
                bundle = f"{TENANT}/{BUNDLE}" if who == "tenant" else BUNDLE
                async with b.pipeline(4, bundle=bundle, policy=policy, role_env=role_env) as d:
                    await scopes_known(d)
                    decisions = DecisionLog()
                    await decisions.start(d.nc, d.p.cluster)
                    runs[who].append(await b.measured(d.cold_apply(objs)))
                    await settle(0.5)
                    identities = {r.identity for r in decisions.records if r.action == "apply"}
                # the tenant's writes really were impersonated, the platform's not
                expected = f"system:serviceaccount:{namespaces[0]}:{SA}" if who == "tenant" else ""
                assert identities == {expected}, f"{who}: applies made as {identities}"
                await b.cleanup(namespaces)
            print(
                f"  tenancy rep {rep + 1}/{repetitions}: "
                + ", ".join(f"{k} {v[-1].seconds:.2f}s" for k, v in runs.items()),
                file=sys.stderr,
                flush=True,
            )
    check_writes(runs, objects)
    params = {
        "objects": objects,
        "appliers": 4,
        "mix": "the cold mix; the tenant's objects are all within its limits",
        "tenant_rbac": "a RoleBinding per namespace to a namespace-admin ClusterRole",
        "warm_up": "both contenders start once the planner knows the custom kind's scope",
        "apiserver_cpu_share": {
            k: round(statistics.median(r.apiserver_cpu for r in v), 3) for k, v in runs.items()
        },
    }
    return [
        Result(
            "cold-apply-impersonated-vs-own-identity",
            "s",
            [r.seconds for r in runs["tenant"]],
            "the same bundle as a platform bundle (no impersonation)",
            [r.seconds for r in runs["platform"]],
            params,
            higher_is_better=False,
            target="ratio ≤ 1.05",
        ),
        # what the API server spent: impersonation's cost is the API server's (one more
        # authorization per request, RBAC walking the ServiceAccount's bindings), and its CPU
        # time is far less noisy than the wall time of a run on a shared two-core machine
        Result(
            "apiserver-cpu-impersonated-vs-own-identity",
            "cpu-s",
            [cpu_seconds(r) for r in runs["tenant"]],
            "the same bundle as a platform bundle (no impersonation)",
            [cpu_seconds(r) for r in runs["platform"]],
            params,
            higher_is_better=False,
            target="reported",
        ),
    ]


def cpu_seconds(r: Run) -> float:
    """The API server's CPU seconds during the run (``Run.apiserver_cpu`` is a machine share)."""
    return r.apiserver_cpu * r.seconds * (os.cpu_count() or 1)


def run(*, objects: int = 1000, repetitions: int = 12) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
