"""A revision held to its tenant's limits (planner.rule.limits): refused whole, the tenant's
default namespace filled in, newly outside after a policy change, the identity of its writes;
and the bundle phase that reports what a policy change left outside."""

from __future__ import annotations

import pytest

from schemas.messages import Bundle, BundleOptions, BundlePhase, Impersonation
from schemas.subjects import ObjectKey
from services.core.scope import Scopes, UnknownScope
from services.planner.rule import limits
from services.planner.rule.takeover import may_take
from services.planner.status.phase import Tally, bundle_phase
from services.tenancy import policy as tenancy

POLICY = tenancy.load_policy(
    """
lockdown: false
tenants:
  team-a:
    serviceAccount: team-a/deployer
    namespaces: [team-a, team-a-*]
    defaultNamespace: team-a
    kinds:
      deny: ["rbac.authorization.k8s.io/RoleBinding"]
    clusters: ["prod-*"]
""",
    "tenants.yaml",
)
LOCKED = tenancy.load_policy("lockdown: true\n", "locked.yaml")


def cm(ns: str, name: str = "x") -> ObjectKey:
    return ObjectKey("", "ConfigMap", ns, name)


def bundle(name: str, cluster: str = "prod-1", namespace: str = "") -> Bundle:
    return Bundle(
        cluster=cluster, bundle=name, revision="r1", options=BundleOptions(namespace=namespace)
    )


@pytest.mark.parametrize(
    ("name", "cluster", "policy", "refused"),
    [
        ("team-a/web", "prod-1", POLICY, ""),
        ("web", "prod-1", POLICY, ""),
        ("team-x/web", "prod-1", POLICY, 'tenant "team-x" is not defined'),
        ("team-a/web", "dev-1", POLICY, "dev-1"),
        ("web", "prod-1", LOCKED, "lockdown"),
    ],
    ids=["tenant-ok", "platform-ok", "unknown-tenant", "cluster-not-allowed", "lockdown"],
)
def test_a_bundle_is_refused_outright_or_taken(
    name: str, cluster: str, policy: tenancy.TenantPolicy, refused: str
) -> None:
    if refused:
        with pytest.raises(limits.PolicyRefused, match=refused):
            limits.with_tenant_defaults(bundle(name, cluster), policy)
    else:
        limits.with_tenant_defaults(bundle(name, cluster), policy)


@pytest.mark.parametrize(
    ("name", "given", "namespace"),
    [("team-a/web", "", "team-a"), ("team-a/web", "team-a-dev", "team-a-dev"), ("web", "", "")],
    ids=["tenant-default", "publisher-wins", "platform-none"],
)
def test_the_tenants_default_namespace_fills_what_the_publisher_left_out(
    name: str, given: str, namespace: str
) -> None:
    taken = limits.with_tenant_defaults(bundle(name, namespace=given), POLICY)
    assert taken.options.namespace == namespace


def test_one_object_outside_refuses_the_revision_naming_each() -> None:
    scopes = Scopes()
    keys = [
        cm("team-a"),
        cm("other", "y"),
        ObjectKey("rbac.authorization.k8s.io", "ClusterRole", "", "r"),
    ]
    with pytest.raises(limits.PolicyRefused) as refused:
        limits.check(bundle("team-a/web"), keys, scopes, POLICY)
    message = str(refused.value)
    assert message.startswith("2 objects outside tenant team-a's limits: ")
    assert "ConfigMap/other/y" in message
    assert "ClusterRole.rbac.authorization.k8s.io/r" in message
    limits.check(bundle("team-a/web"), [cm("team-a"), cm("team-a-dev")], scopes, POLICY)
    limits.check(bundle("web"), keys, scopes, POLICY)  # platform bundles: driftbus's own rights


def test_a_refusal_names_ten_objects_and_counts_the_rest() -> None:
    keys = [cm("other", f"n{i:02}") for i in range(14)]
    with pytest.raises(limits.PolicyRefused, match=r"^14 objects .*n09.*\(and 4 more\)$"):
        limits.check(bundle("team-a/web"), keys, Scopes(), POLICY)


def test_an_unknown_kind_without_a_namespace_counts_as_cluster_scoped() -> None:
    scopes = Scopes()
    widget = ObjectKey("example.com", "Widget", "", "w")
    assert list(limits.scoped([widget, cm("team-a")], scopes)) == [
        (widget, False),
        (cm("team-a"), True),
    ]
    scopes.learn("example.com", "Widget", True)
    assert list(limits.scoped([widget], scopes)) == [(widget, True)]


def test_what_a_policy_change_leaves_outside() -> None:
    keys = {cm("team-a"), cm("team-a-dev")}
    assert limits.outside("team-a/web", "prod-1", keys, Scopes(), POLICY) == []
    narrower = tenancy.load_policy(
        "tenants:\n  team-a:\n    serviceAccount: team-a/deployer\n    namespaces: [team-a]\n",
        "narrower.yaml",
    )
    outside = limits.outside("team-a/web", "prod-1", keys, Scopes(), narrower)
    assert len(outside) == 1
    assert "ConfigMap/team-a-dev/x" in outside[0]
    gone = limits.outside("team-a/web", "prod-1", keys, Scopes(), tenancy.load_policy("", "e"))
    assert gone == ['tenant "team-a" is not defined in the tenant policy']


def test_the_identity_is_the_tenants_service_account_without_groups() -> None:
    # the API server adds a ServiceAccount's fixed groups itself when none are sent, and then
    # asks only for `impersonate` on that ServiceAccount
    assert limits.identity(POLICY, "team-a/web") == Impersonation(
        user="system:serviceaccount:team-a:deployer"
    )
    assert limits.identity(POLICY, "web") is None


@pytest.mark.parametrize(
    ("tally", "phase"),
    [
        (Tally("r1", total=2, applied=2, ready=2), BundlePhase.READY),
        (Tally("r1", total=2, applied=2, ready=2, outside=1), BundlePhase.FAILED),
        (Tally("r1", total=2, outside=1, refused="x"), BundlePhase.FAILED),
    ],
    ids=["all-inside-ready", "outside-since-a-change-fails", "refused-first"],
)
def test_objects_outside_the_policy_are_never_ready(tally: Tally, phase: BundlePhase) -> None:
    assert bundle_phase(tally)[0] is phase


def test_a_tenants_revision_waits_while_a_kinds_scope_is_unknown() -> None:
    """A namespace in the manifest proves nothing: an unknown cluster-scoped kind would pass."""
    widget = ObjectKey("example.com", "Widget", "team-a", "w")
    with pytest.raises(UnknownScope, match=r"Widget\.example\.com"):
        limits.check(bundle("team-a/web"), [widget], Scopes(), POLICY)
    limits.check(bundle("web"), [widget], Scopes(), POLICY)  # platform bundles: as before
    scopes = Scopes()
    scopes.learn("example.com", "Widget", True)
    limits.check(bundle("team-a/web"), [widget], scopes, POLICY)


def test_a_crd_cannot_redefine_a_built_in_kinds_scope() -> None:
    scopes = Scopes()
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusterrolebindings.rbac.authorization.k8s.io"},
        "spec": {
            "group": "rbac.authorization.k8s.io",
            "names": {"kind": "ClusterRoleBinding"},
            "scope": "Namespaced",
        },
    }
    assert scopes.learn_crd(crd) is False
    assert scopes.namespaced("rbac.authorization.k8s.io", "ClusterRoleBinding") is False


@pytest.mark.parametrize(
    ("taker", "owner", "may"),
    [
        ("web", "team-a/x", True),
        ("team-a/web", "team-a/x", True),
        ("team-a/web", "team-b/x", False),
        ("team-a/web", "x", False),
    ],
)
def test_take_over_never_crosses_tenants(taker: str, owner: str, may: bool) -> None:
    assert may_take(taker, owner) is may
