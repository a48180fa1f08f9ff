"""Rights a tenant's policy grants (issue 41, items 4, 6 and 7) on the real stack: what reaches
past the tenant itself is refused unless its policy says so.

- ``--override-window`` on a tenant's bundle writes through the platform's change freeze only
  with ``rights.overrideWindows``; without it the revision is refused whole, and taken once the
  right is granted;
- the platform's GitHub provider (the platform's token; a loopback server stands in for GitHub's
  API) posts a commit status for a tenant's bundle only on a repository the tenant is granted,
  whatever repository the bundle's ``source`` names; platform bundles as before;
- the documented tenant ServiceAccount (deploy/tenants/) cannot be run as from a tenant's Pod:
  what a kubelet does for a Pod naming it (a TokenRequest bound to the Pod) finds no such
  ServiceAccount, so nothing in the tenant's namespaces can use its RBAC directly; a policy
  placing it where the tenant may run Pods is warned of by ``tenants apply``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, settle
from schemas.decision import DecisionAction
from schemas.messages import BundleOptions, BundlePhase, ObjectPhase
from services.kube import KubeClient, KubeError, NotFound
from services.revisions.publish import publish_bundle
from services.tenancy import policy as tenancy

from ..conftest import unique_name
from .test_cli import driftbus
from .test_notify import Receiver, notifier, notify_command, secret_files, until
from .test_tenancy import put_policy, started, team, tenant_namespace
from .test_trust import cm
from .test_windows import apply_windows, data_of, deny_now, held_by

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


async def test_override_window_is_a_right_the_tenants_policy_grants(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    ns, tenant, freeze = unique_name("ta"), unique_name("t"), unique_name("freeze")
    bundle = f"{tenant}/web"
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [cm(ns, "a")])
    await watch.ready("r1", 60, pipeline.logs)
    await apply_windows(pipeline, tmp_path, [deny_now(freeze, ["*"])])
    await settle(1)

    # the tenant asks to write through the platform's freeze, without the right
    hotfix = [cm(ns, "a", k="hotfix")]
    await pipeline.publish(js, bundle, hotfix, revision="hotfix", override_window=True)
    status = await watch.until(lambda s: s.revision == "hotfix", 30, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    assert status.phase is BundlePhase.FAILED, (
        f"tenant {tenant} without rights.overrideWindows: revision hotfix is {status.phase} "
        f"({status.message}); ConfigMap a holds {data_of(await kube.get(res, 'a', ns))}"
    )
    assert "rights.overrideWindows" in status.message, status.message
    assert f"tenant {tenant}" in status.message, status.message
    assert bundle in status.message, status.message
    await settle(3)
    assert data_of(await kube.get(res, "a", ns)) == {"k": "a"}, "written through the freeze"
    assert not [r for r in decisions.records if r.revision == "hotfix" and r.action == "apply"]

    # granted: the refused revision goes in through the window, with no republish
    rights = "    rights:\n      overrideWindows: true\n"
    await put_policy(pnc, f"tenants:{team(tenant, ns, rights)}")
    await watch.ready("hotfix", 60, pipeline.logs)
    assert data_of(await kube.get(res, "a", ns)) == {"k": "hotfix"}
    writes = [r for r in decisions.records if r.revision == "hotfix" and r.action == "apply"]
    assert {r.window for r in writes} == {f"override: {freeze}"}, writes

    # taken back: the revision in force is held by the freeze from now on, so a drift is
    # reported and held, not written through it (the planner says when it saw the policy)
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    await until(
        lambda: "override ended" in pipeline.all_logs_text(), "the planner saw the right go"
    )
    await kube.apply(cm(ns, "a", k="intruder"), field_manager="intruder", force=True)
    await held_by(pipeline, watch, bundle, "hotfix", freeze, 30)
    held = [
        r for r in decisions.records
        if r.key.name == "a" and r.action is DecisionAction.HOLD and str(r.reason) == "window"
    ]  # fmt: skip
    assert {r.window for r in held} == {freeze}, decisions.records
    await settle(2)
    assert data_of(await kube.get(res, "a", ns)) == {"k": "intruder"}, "written through the freeze"


@pytest.fixture
async def hosts() -> AsyncIterator[Receiver]:
    """test_notify's loopback receivers: here GitHub's API and the platform's webhook."""
    async with Receiver.running() as r:
        yield r


def _refused_logged(caplog: pytest.LogCaptureFixture, repository: str) -> bool:
    return any(
        "commit status refused" in r.getMessage() and repository in r.getMessage()
        for r in caplog.records
    )


async def test_the_platforms_commit_statuses_for_a_tenant_go_only_to_granted_repositories(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    tmp_path: Path,
    hosts: Receiver,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A platform alert with no bundle or tenant filter, a GitHub provider taking the
    repository from the bundle's source: a tenant naming a repository it is not granted gets
    nothing posted there (logged, naming the tenant, the bundle and the right); one it is
    granted is posted; a platform bundle is posted as before."""
    caplog.set_level(logging.WARNING)
    js = pnc.jetstream()
    ns, tenant = unique_name("ta"), unique_name("t")
    await tenant_namespace(kube, ns, ["configmaps"])
    await put_policy(pnc, f"tenants:{team(tenant, ns)}")
    pipeline.start_all()
    s = secret_files(tmp_path, hosts)
    cfg = tmp_path / "notify.yaml"
    cfg.write_text(f"""
providers:
- name: github
  type: github
  apiUrl: {hosts.url}
  tokenFile: {s["gh"]}
- name: hook
  type: webhook
  url: {hosts.url}/platform
alerts:
- providers: [github, hook]
  events: [Ready]
""")
    code, _, err = await notify_command(pipeline, capsys, "apply", str(cfg))
    assert code == 0, err

    def sha(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()  # noqa: S324 - a commit id's shape

    async def publish(bundle: str, repository: str, commit: str, objects: list[Any]) -> None:
        await publish_bundle(
            js,
            cluster=pipeline.cluster,
            bundle=bundle,
            revision=commit,
            manifests=objects,
            options=BundleOptions(),
            source=f"https://github.com/{repository}.git@{commit}",
            manage_streams=True,
            within=60,
        )

    def posted(repository: str, commit: str) -> bool:
        path = f"/repos/{repository}/statuses/{commit}"
        return any(x.path == path and x.json()["state"] == "success" for x in hosts.seen)

    def told(bundle: str) -> bool:
        return any(
            d["bundle"] == bundle and d["kind"] == "Ready" for d in hosts.delivered("/platform")
        )

    victim, sha1 = "victim/prod", sha("one")
    async with notifier(pipeline, js):
        await publish(f"{tenant}/web", victim, sha1, [cm(ns, "a")])
        await until(lambda: told(f"{tenant}/web"), "the platform told of the tenant's bundle")
        await until(
            lambda: posted(victim, sha1) or _refused_logged(caplog, victim),
            "a commit status posted on the victim's repository, or refused",
        )
        assert not posted(victim, sha1), (
            f"the platform's token posted success on {victim}@{sha1[:12]} for tenant {tenant}'s "
            "bundle, which its policy grants no repository"
        )
        line = next(r.getMessage() for r in caplog.records if victim in r.getMessage())
        assert f"tenant {tenant}" in line, line
        assert f"{tenant}/web" in line, line
        assert "rights.commitStatusRepositories" in line, line

        # granted acme/*: a bundle naming acme/shop gets its status; the victim still nothing
        rights = '    rights:\n      commitStatusRepositories: ["acme/*"]\n'
        await put_policy(pnc, f"tenants:{team(tenant, ns, rights)}")
        await settle(1)  # the service follows the policy; the next status is judged by it
        sha2 = sha("two")
        await publish(f"{tenant}/app", "acme/shop", sha2, [cm(ns, "b")])
        await until(lambda: posted("acme/shop", sha2), "the granted repository's status")
        # a platform bundle (no tenant) is posted on whatever repository it names, as before
        sha3 = sha("three")
        await publish(unique_name("plat"), victim, sha3, [cm(ns, "c")])
        await until(lambda: posted(victim, sha3), "the platform bundle's status")
        await settle(1)
    assert not posted(victim, sha1)
    assert hosts.problems == [], hosts.problems


# --- where the tenant's ServiceAccount lives (item 7) --------------------------------------------


def _example(tenants_ns: str, team_a: str, team_b: str, tenant_a: str) -> str:
    """deploy/tenants/tenants.yaml with names unique to this test (the same layout)."""
    text = (ROOT / "deploy" / "tenants" / "tenants.yaml").read_text()
    text = text.replace("driftbus-tenants", tenants_ns)
    # the tenants' names, their namespaces, and ServiceAccounts named after either
    return (
        text.replace("team-a:", f"{tenant_a}:").replace("team-a", team_a).replace("team-b", team_b)
    )


async def _token_for_pod(kube: KubeClient, pod: dict[str, Any]) -> str | None:
    """What a kubelet asks for a Pod's projected ServiceAccount token: a TokenRequest for the
    Pod's ``serviceAccountName`` in the Pod's namespace, bound to the Pod. None if refused."""
    meta = pod["metadata"]
    sa = pod["spec"]["serviceAccountName"]
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [],
            "expirationSeconds": 600,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token"
    try:
        got = await kube.request(
            "POST", path, body=json.dumps(body).encode(), content_type="application/json"
        )
    except NotFound:
        return None
    return str(got["status"]["token"])


async def test_the_documented_tenant_service_account_cannot_be_run_as_from_a_tenants_pod(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    tenants_ns, team_a, team_b = unique_name("tenants"), unique_name("ta"), unique_name("tb")
    tenant = unique_name("t")
    text = _example(tenants_ns, team_a, team_b, tenant)
    (tmp_path / "tenants.yaml").write_text(text)
    policy = tenancy.load_policy(text, "tenants.yaml")
    sa_ns, sa_name = policy.tenants[tenant].service_account.split("/")
    # the platform team sets the example up as documented: the namespaces, the ServiceAccount
    # where the policy says, and its rights in the tenant's namespace — wider than the policy
    # (which denies RoleBindings), as RBAC roles usually are
    for name in sorted({team_a, sa_ns}):
        await kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
            field_manager="platform-team",
        )
    await kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": sa_name, "namespace": sa_ns}},
        field_manager="platform-team",
    )  # fmt: skip
    rbac = "rbac.authorization.k8s.io"
    verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
    role = {"apiGroup": rbac, "kind": "Role", "name": "deployer"}
    for obj in (
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": {"name": "deployer", "namespace": team_a},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": verbs},
                {"apiGroups": [rbac], "resources": ["roles", "rolebindings"], "verbs": verbs},
            ],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "deployer", "namespace": team_a},
            "roleRef": role,
            "subjects": [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_ns}],
        },
    ):
        await kube.apply(obj, field_manager="platform-team")
    code, _, err = await driftbus(pipeline, "tenants", "apply", str(tmp_path / "tenants.yaml"))
    assert code == 0, err
    assert "warning" not in err, err  # the documented example is one that holds

    # the tenant's bundle: a Pod in its own namespace naming its ServiceAccount
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "escape", "namespace": team_a},
        "spec": {
            "serviceAccountName": sa_name,
            "containers": [{"name": "c", "image": "registry.example/kubectl:1"}],
        },
    }
    bundle = f"{tenant}/hooks"
    watch, _ = await started(pipeline, pnc, bundle)
    await pipeline.publish(pnc.jetstream(), bundle, [pod])
    await watch.object_status(
        lambda o: o.key.name == "escape" and o.phase is ObjectPhase.APPLIED, 60, pipeline.logs
    )
    live = await kube.get(await kube.discovery.resource("v1", "Pod"), "escape", team_a)

    token = await _token_for_pod(kube, live)
    stolen: str | None = None
    if token is not None:  # what the Pod would run with: its RBAC, past the policy's limits
        config = pipeline.stack.cluster.apiserver.write_kubeconfig(
            tmp_path / "pod.kubeconfig", token=token, user="pod"
        )
        async with await KubeClient.from_kubeconfig(str(config)) as as_pod:
            binding = {
                "apiVersion": f"{rbac}/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "escalated", "namespace": team_a},
                "roleRef": role,
                "subjects": [{"kind": "Group", "name": "system:authenticated"}],
            }
            try:
                await as_pod.apply(binding, field_manager="escape")
                stolen = (
                    "created RoleBinding escalated giving every authenticated user its Role "
                    "(the policy denies RoleBindings)"
                )
            except KubeError as exc:
                stolen = f"authenticated as {sa_ns}/{sa_name}, but: {exc}"
    assert stolen is None, (  # the token itself is never printed
        f"a Pod of tenant {tenant}'s bundle in {team_a} gets a token of its ServiceAccount "
        f"{sa_ns}/{sa_name} and {stolen}"
    )


async def test_tenants_apply_warns_of_a_service_account_a_tenant_could_run_a_pod_as(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    ns, other, a, b = unique_name("ta"), unique_name("tb"), unique_name("t"), unique_name("u")
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text(
        f"tenants:\n  {a}:\n    serviceAccount: {ns}/deployer\n    namespaces: [{ns}]\n"
        f"  {b}:\n    serviceAccount: {other}-x/deployer\n    namespaces: [{other}-*]\n"
    )
    code, out, err = await driftbus(pipeline, "tenants", "apply", str(unsafe))
    assert code == 0, err  # in force all the same: a warning, not a refusal
    assert "in force" in out, out
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 2, f"no warning naming the tenants and ServiceAccounts: {err!r}"
    assert f"tenant {a} may manage namespace {ns}" in warnings[0], warnings
    assert f"{ns}/deployer" in warnings[0], warnings
    assert f"tenant {b} may manage namespace {other}-x" in warnings[1], warnings
