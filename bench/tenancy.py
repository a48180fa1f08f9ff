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
Target: the tenant's time ≤ 1.05 × the platform's.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import orjson

from bench.report import Result
from bench.stack import BUNDLE, CRD_GROUP, BenchStack, DriftbusRun, Run, manifests, namespaces_for
from harness.pipeline import DecisionLog, settle
from services.common import members
from services.core import tenancy

TENANT = "bench"
SA = "deployer"
ROLE = "bench-tenant-admin"


async def grant_tenant(b: BenchStack, namespaces: list[str]) -> None:
    """The tenant's ServiceAccount (in the first namespace) may do anything in ``namespaces``,
    through a RoleBinding in each: RBAC evaluates real bindings for every impersonated write."""
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
    for path, doc in docs:
        await b.request(
            "PATCH",
            path,
            params={"fieldManager": "bench-setup", "force": "true"},
            data=orjson.dumps(doc),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
    # the RBAC authorizer reads bindings from its informers: wait until it answers yes
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{sa_ns}:{SA}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{sa_ns}"],
            "resourceAttributes": {
                "namespace": namespaces[-1],
                "verb": "patch",
                "resource": "roles",
                "group": "rbac.authorization.k8s.io",
            },
        },
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
    raise RuntimeError("the tenant's RoleBindings were never in effect")


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
    async with BenchStack.start(objects) as b:
        for rep in range(repetitions):
            order = ("tenant", "platform") if rep % 2 == 0 else ("platform", "tenant")
            for who in order:
                # cleanup removes every Role and RoleBinding of the bench namespaces: the
                # tenant's are granted again, untimed, before each run (the platform's too)
                await grant_tenant(b, namespaces)
                bundle = f"{TENANT}/{BUNDLE}" if who == "tenant" else BUNDLE
                async with b.pipeline(4, bundle=bundle, policy=policy) as d:
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
    for name, rs in runs.items():
        wrote = {r.writes for r in rs}
        assert wrote == {objects}, f"{name} wrote {[r.writes_by for r in rs]} for {objects} objects"
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
        )
    ]


def run(*, objects: int = 1000, repetitions: int = 6) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
