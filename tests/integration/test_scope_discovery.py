"""The built-in scope table (services/core/scope.py) against the real kube-apiserver.

The table is what keeps a stray ``metadata.namespace`` out of the key of a cluster-scoped
object, so it must be what the server says, not what we remember: every kind the server's
discovery reports (``/api/v1`` and ``/apis/<group>/<version>`` of every served group version)
must be in the table with the same scope. Twice: on the shared test cluster (the APIs enabled by
default), and on a private cluster with every API version enabled, alpha included, where the
table must also contain nothing the server does not serve.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from schemas.subjects import ObjectKey
from services.controlplane import servers
from services.core.scope import BUILTIN, Scopes, normalise
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from .manifests import crd

pytestmark = pytest.mark.integration

GroupKind = tuple[str, str]


async def served_scopes(kube: KubeClient) -> dict[GroupKind, set[bool]]:
    """(group, kind) → the ``namespaced`` flags discovery reports for it, over all versions."""
    paths = [f"/api/{v}" for v in (await kube.get_path("/api"))["versions"]]
    paths += [
        f"/apis/{v['groupVersion']}"
        for g in (await kube.get_path("/apis"))["groups"]
        for v in g["versions"]
    ]
    answers = await asyncio.gather(*(kube.get_path(p) for p in paths), return_exceptions=True)
    found: dict[GroupKind, set[bool]] = {}
    for doc in answers:
        if isinstance(doc, NotFound):
            # listed in /apis a moment before its own document is served (a CRD just made,
            # another test's CRD going): not served yet, or no more
            continue
        if isinstance(doc, BaseException):
            raise doc
        group = doc["groupVersion"].rpartition("/")[0]
        for r in doc["resources"]:
            if "/" in r["name"]:  # subresources: deployments/status, pods/log, ...
                continue
            found.setdefault((group, r["kind"]), set()).add(bool(r["namespaced"]))
    return found


async def not_builtin_groups(kube: KubeClient) -> set[str]:
    """Groups served by CRDs or aggregated API servers, which other tests may have added."""
    crds = await kube.get_path("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
    remote = await kube.get_path("/apis/apiregistration.k8s.io/v1/apiservices")
    return {c["spec"]["group"] for c in crds["items"]} | {
        s["spec"].get("group", "") for s in remote["items"] if s["spec"].get("service")
    }


def mismatches(served: dict[GroupKind, set[bool]], scopes: Scopes) -> list[str]:
    wrong = []
    for (group, kind), flags in sorted(served.items()):
        known = scopes.namespaced(group, kind)
        if flags != {known}:
            served_as = " and ".join("namespaced" if f else "cluster-scoped" for f in flags)
            wrong.append(f"{kind}.{group or 'core'}: served {served_as}, table says {known}")
    return wrong


async def until_served(kube: KubeClient, group: str, kinds: set[str]) -> None:
    deadline = time.monotonic() + 30
    while True:
        served = await served_scopes(kube)
        if {(group, k) for k in kinds} <= served.keys():
            return
        assert time.monotonic() < deadline, f"{group}: {sorted(kinds)} never served"
        await asyncio.sleep(0.2)


async def test_every_served_kind_has_its_scope_in_the_table(
    kube: KubeClient, measured: Any
) -> None:
    # Two CRDs of our own, so learning from a CRD manifest is proven against discovery too.
    group = f"{unique_name('scope')}.driftbus.test"
    scopes = Scopes()
    for manifest in (crd(group, "Tenant", "Cluster"), crd(group, "Widget", "Namespaced")):
        scopes.learn_crd(await kube.apply(manifest, field_manager="driftbus-tests"))
    await until_served(kube, group, {"Tenant", "Widget"})

    served = await served_scopes(kube)
    others = await not_builtin_groups(kube)
    builtin = {gk: f for gk, f in served.items() if gk[0] not in others}
    custom = {gk: f for gk, f in served.items() if gk[0] == group}

    assert mismatches(builtin, scopes) == []
    assert mismatches(custom, scopes) == []
    assert custom == {(group, "Tenant"): {False}, (group, "Widget"): {True}}
    # a sanity floor: discovery really answered (v1.36 serves ~60 kinds by default)
    assert len(builtin) > 50, sorted(builtin)
    measured(
        f"scope table: {len(builtin)} built-in kinds served by default match "
        f"({len(BUILTIN)} in the table), plus 2 CRD-learned kinds"
    )


async def test_stray_namespace_is_what_the_server_drops(kube: KubeClient) -> None:
    """The premise: the server stores a cluster-scoped object without the namespace it was sent
    with, so only the normalised manifest keys like the object the watcher sees."""
    manifest: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": unique_name("scope-stray"), "namespace": "team-a"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }
    stored = await kube.apply(manifest, field_manager="driftbus-tests")

    assert "namespace" not in stored["metadata"]
    assert ObjectKey.of(manifest) != ObjectKey.of(stored)
    assert ObjectKey.of(normalise(manifest, Scopes())) == ObjectKey.of(stored)


# Every API version the binary has, alpha included; alpha kinds also need their feature gates.
ALL_APIS = ["--runtime-config=api/all=true", "--feature-gates=AllAlpha=true,AllBeta=true"]


@pytest.fixture(scope="module")
def all_apis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Cluster]:
    cluster = servers.Cluster.start(
        "all-apis", tmp_path_factory.mktemp("all-apis"), apiserver_args=ALL_APIS
    )
    try:
        yield cluster
    finally:
        cluster.stop()


async def test_table_is_exactly_what_a_server_with_every_api_serves(
    all_apis_cluster: servers.Cluster, measured: Any
) -> None:
    kube = await KubeClient.from_kubeconfig(str(all_apis_cluster.kubeconfig))
    try:
        served = await served_scopes(kube)
        assert await not_builtin_groups(kube) == set()
    finally:
        await kube.close()

    assert mismatches(served, Scopes()) == []
    assert sorted(BUILTIN.keys() - served.keys()) == [], "in the table but not served"
    measured(f"scope table: all {len(served)} kinds of a server with every API enabled match")


async def test_aggregated_discovery_tells_every_scope_in_one_request(kube: KubeClient) -> None:
    """What the watcher tells the planner at start (so a tenant's revision of custom kinds is
    checked at once): one aggregated request agrees with every group-version's own document."""
    group = f"{unique_name('agg')}.driftbus.test"
    for manifest in (crd(group, "Tenant", "Cluster"), crd(group, "Widget", "Namespaced")):
        await kube.apply(manifest, field_manager="driftbus-tests")
    await until_served(kube, group, {"Tenant", "Widget"})
    deadline = time.monotonic() + 30
    while (group, "Widget") not in (aggregated := await kube.discovery.served_scopes()):
        assert time.monotonic() < deadline, "the CRD never reached aggregated discovery"
        await asyncio.sleep(0.2)
    per_group = {gk: f for gk, f in (await served_scopes(kube)).items() if gk[0]}
    assert aggregated[(group, "Tenant")] is False
    assert aggregated[(group, "Widget")] is True
    assert aggregated[("apps", "Deployment")] is True
    assert aggregated[("rbac.authorization.k8s.io", "ClusterRole")] is False
    # every kind both report is reported with the same scope (other tests add CRDs meanwhile)
    both = aggregated.keys() & per_group.keys()
    assert len(both) > 40
    assert {gk: {aggregated[gk]} for gk in both} == {gk: per_group[gk] for gk in both}
