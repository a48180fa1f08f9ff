"""The tenant policy (issue 20): reading the tenants file, refusing bundles and objects outside a
tenant's limits, and the identity a tenant's requests impersonate
(``services/tenancy/policy.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import orjson
import pytest

from schemas.subjects import ObjectKey
from schemas.tenants import KindRules, Rights, Tenant, TenantPolicy
from services.core.kyaml import documents
from services.tenancy.policy import (
    Identity,
    PolicyError,
    bundle_refusal,
    decode_stored,
    default_namespace,
    dump_policy,
    identity,
    impersonation,
    load_policy,
    may_manage_cluster_scoped,
    object_refusals,
    tenant_of,
)
from services.tenancy.rbac import exposed_accounts

ROOT = Path(__file__).parents[2]
EXAMPLE = """\
lockdown: false
tenants:
  team-a:
    serviceAccount: team-a/deployer
    namespaces: [team-a, team-a-*]
    clusterScoped: false
    defaultNamespace: team-a
    kinds:
      allow: ["*/*"]
      deny: ["rbac.authorization.k8s.io/RoleBinding"]
    clusters: ["*"]
"""
TEAM_A = Tenant(
    service_account="team-a/deployer",
    namespaces=("team-a", "team-a-*"),
    cluster_scoped=False,
    default_namespace="team-a",
    kinds=KindRules(deny=("rbac.authorization.k8s.io/RoleBinding",)),
)


def policy(lockdown: bool = False, **tenants: Tenant) -> TenantPolicy:
    return TenantPolicy(
        lockdown=lockdown, tenants={k.replace("_", "-"): v for k, v in tenants.items()}
    )


def sa(name: str = "team-a/deployer", **fields: Any) -> Tenant:
    return Tenant(service_account=name, **fields)


# --- reading the file -----------------------------------------------------------------------------


P = pytest.param


@pytest.mark.parametrize(
    ("text", "want"),
    [
        P(EXAMPLE, policy(team_a=TEAM_A), id="the-documented-example"),
        P("", TenantPolicy(), id="empty-file"),
        P("# no tenants yet\n", TenantPolicy(), id="comments-only"),
        P("tenants: {}\n", TenantPolicy(), id="no-tenants"),
        P("lockdown: true\n", TenantPolicy(lockdown=True), id="lockdown-only"),
        P(
            "tenants:\n  ops:\n    serviceAccount: ops/driftbus\n",
            policy(ops=sa("ops/driftbus")),
            id="defaults-for-everything-but-the-service-account",
        ),
        P(
            '{"tenants": {"team-a": {"serviceAccount": "team-a/deployer", '
            '"namespaces": ["team-a"]}}}',
            policy(team_a=sa(namespaces=("team-a",))),
            id="json-is-yaml",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/sa.with.dots\n    clusterScoped: yes\n",
            policy(t=sa("t/sa.with.dots", cluster_scoped=True)),
            id="service-account-name-is-a-subdomain-and-yes-is-true",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/d\n    kinds: {allow: [/ConfigMap, apps/*]}\n"
            "    clusters: [dev, 'staging-[0-9]']\n",
            policy(
                t=sa(
                    "t/d",
                    kinds=KindRules(allow=("/ConfigMap", "apps/*")),
                    clusters=("dev", "staging-[0-9]"),
                )
            ),
            id="core-group-kind-group-glob-and-cluster-globs",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/d\n    namespaces: []\n",
            policy(t=sa("t/d", namespaces=())),
            id="empty-namespaces-allows-none",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/d\n    clusterSelector: env=dev\n",
            policy(t=sa("t/d", cluster_selector="env=dev")),
            id="cluster-selector",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/d\n    clusters: [eu-*]\n"
            "    clusterSelector: 'env in (dev, staging), !frozen, tier!=db'\n",
            policy(
                t=sa(
                    "t/d",
                    clusters=("eu-*",),
                    cluster_selector="env in (dev, staging), !frozen, tier!=db",
                )
            ),
            id="cluster-selector-with-set-existence-and-inequality-and-cluster-globs",
        ),
        P(
            "tenants:\n  t:\n    serviceAccount: t/d\n    clusterSelector: ''\n",
            policy(t=sa("t/d")),
            id="empty-cluster-selector-admits-every-cluster-of-clusters",
        ),
    ],
)
def test_load_accepts(text: str, want: TenantPolicy) -> None:
    assert load_policy(text, "tenants.yaml") == want


def test_load_takes_bytes() -> None:
    assert load_policy(EXAMPLE.encode(), "tenants.yaml") == policy(team_a=TEAM_A)


T = "tenants:\n  team-a:\n    serviceAccount: team-a/deployer\n"
"""A valid file up to line 3, for the refusals below to extend."""
K = T + "    kinds:\n"
NS = "tenants:\n  team-a:\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        P(
            T + "  team-a:\n    x: 1\n",
            "t.yaml:4: invalid YAML: duplicate key 'team-a' (first at line 2)",
            id="duplicate-tenant",
        ),
        P(
            T + "    serviceAccount: a/b\n",
            "t.yaml:4: invalid YAML: duplicate key 'serviceAccount' (first at line 3)",
            id="duplicate-key-in-a-tenant",
        ),
        P("tenants: [\n", "t.yaml:2: invalid YAML: ", id="invalid-yaml"),
        P(
            T + "    namespace: team-a\n",
            "t.yaml:4: tenant team-a: unknown key 'namespace'",
            id="unknown-tenant-key",
        ),
        P(
            K + "      allowed: [apps/*]\n",
            "t.yaml:5: tenant team-a: kinds: unknown key 'allowed'",
            id="unknown-kinds-key",
        ),
        P(
            "lockdown: false\nlockdwn: true\n",
            "t.yaml:2: unknown key 'lockdwn'",
            id="unknown-top-level-key",
        ),
        P(
            "lockdown: maybe\n",
            "t.yaml:1: lockdown: Expected `bool`, got `str`",
            id="lockdown-not-a-bool",
        ),
        P(
            "- team-a\n",
            "t.yaml:1: the tenants file must be a map (lockdown, tenants), not a list",
            id="file-not-a-map",
        ),
        P(
            "tenants: [team-a]\n",
            "t.yaml:1: tenants must be a map of tenant names, not a list",
            id="tenants-not-a-map",
        ),
        P(
            "tenants: {}\n---\nlockdown: true\n",
            "t.yaml:3: a second document",
            id="second-document",
        ),
        P(
            T + "  Team_B:\n    x: 1\n",
            "t.yaml:4: tenant name 'Team_B' must be a DNS label",
            id="tenant-name-upper-case-and-underscore",
        ),
        P(
            "tenants:\n  " + "a" * 64 + ": {}\n",
            f"t.yaml:2: tenant name '{'a' * 64}' must be a DNS label",
            id="tenant-name-too-long",
        ),
        P(
            "tenants:\n  -team: {}\n",
            "t.yaml:2: tenant name '-team' must be a DNS label",
            id="tenant-name-starts-with-dash",
        ),
        P(NS, "t.yaml:2: tenant team-a: empty (null)", id="tenant-without-body"),
        P(
            NS + "    namespaces: [team-a]\n",
            "t.yaml:2: tenant team-a: serviceAccount is required",
            id="service-account-missing",
        ),
        P(
            NS + "    serviceAccount: deployer\n",
            "t.yaml:3: tenant team-a: serviceAccount 'deployer' must be NAMESPACE/NAME",
            id="service-account-without-namespace",
        ),
        P(
            NS + "    serviceAccount: Team-A/d\n",
            "t.yaml:3: tenant team-a: serviceAccount 'Team-A/d' must be NAMESPACE/NAME",
            id="service-account-namespace-not-a-label",
        ),
        P(
            NS + "    serviceAccount: a/b/c\n",
            "t.yaml:3: tenant team-a: serviceAccount 'a/b/c' must be NAMESPACE/NAME",
            id="service-account-two-slashes",
        ),
        P(
            NS + "    serviceAccount: a/" + "d" * 254 + "\n",
            "t.yaml:3: tenant team-a: serviceAccount: the name is longer than 253",
            id="service-account-name-too-long",
        ),
        P(
            T + "    namespaces: [team-a]\n    defaultNamespace: other\n",
            "t.yaml:5: tenant team-a: defaultNamespace 'other' is not in its namespaces [team-a]",
            id="default-namespace-outside-namespaces",
        ),
        P(
            T + "    defaultNamespace: Team-A\n",
            "t.yaml:4: tenant team-a: defaultNamespace 'Team-A' must be a DNS label",
            id="default-namespace-not-a-label",
        ),
        P(
            T + "    namespaces:\n",
            "t.yaml:4: tenant team-a: namespaces: empty (null)",
            id="namespaces-null",
        ),
        P(
            T + "    namespaces: [team-a, no]\n",
            "t.yaml:4: tenant team-a: namespaces[1]: Expected `str`, got `bool` (YAML reads",
            id="namespace-unquoted-no",
        ),
        P(
            T + "    namespaces:\n      - team-a\n      - Team-B\n",
            "t.yaml:6: tenant team-a: namespaces[1] 'Team-B': has characters a namespace cannot",
            id="namespace-glob-upper-case-on-its-own-line",
        ),
        P(
            T + "    namespaces: ['team-[ab']\n",
            "t.yaml:4: tenant team-a: namespaces[0] 'team-[ab': has an unbalanced",
            id="namespace-glob-unbalanced-bracket",
        ),
        P(
            T + "    namespaces: ['']\n",
            "t.yaml:4: tenant team-a: namespaces[0] must not be empty",
            id="namespace-glob-empty",
        ),
        P(
            K + "      allow: [ConfigMap]\n",
            "t.yaml:5: tenant team-a: kinds.allow[0] 'ConfigMap' must be GROUP/KIND with exactly "
            "one '/'",
            id="kind-without-group-slash",
        ),
        P(
            K + "      deny: [apps/v1/Deployment]\n",
            "t.yaml:5: tenant team-a: kinds.deny[0] 'apps/v1/Deployment' must be GROUP/KIND",
            id="kind-with-version",
        ),
        P(
            K + "      deny: [apps/]\n",
            "t.yaml:5: tenant team-a: kinds.deny[0] 'apps/' must be GROUP/KIND",
            id="kind-empty",
        ),
        P(
            K + "      deny: [Apps/Deployment]\n",
            "t.yaml:5: tenant team-a: kinds.deny[0] 'Apps/Deployment': has characters an API group",
            id="kind-group-upper-case",
        ),
        P(
            K + "      deny: [apps/De-ploy]\n",
            "t.yaml:5: tenant team-a: kinds.deny[0] 'apps/De-ploy': has characters a kind cannot",
            id="kind-with-dash",
        ),
        P(
            T + "    clusters: ['']\n",
            "t.yaml:4: tenant team-a: clusters[0] must not be empty",
            id="cluster-glob-empty",
        ),
        P(
            T + "    clusters: ['prod *']\n",
            "t.yaml:4: tenant team-a: clusters[0] 'prod *': contains white space",
            id="cluster-glob-with-space",
        ),
        P(
            T + "    clusterSelector: 'env in (dev'\n",
            't.yaml:4: tenant team-a: clusterSelector: selector "env in (dev": missing ")"',
            id="cluster-selector-unbalanced",
        ),
        P(
            T + "    clusterSelector: env dev\n",
            't.yaml:4: tenant team-a: clusterSelector: selector "env dev": expected one of',
            id="cluster-selector-without-operator",
        ),
        P(
            T + "    clusterSelector: env>1\n",
            't.yaml:4: tenant team-a: clusterSelector: selector "env>1"',
            id="cluster-selector-integer-operator",
        ),
        P(
            T + "    clusterSelector: yes\n",
            "t.yaml:4: tenant team-a: clusterSelector: Expected `str`, got `bool` (YAML reads",
            id="cluster-selector-yes-is-a-boolean",
        ),
        P(
            T + "    clusterSelector:\n",
            "t.yaml:4: tenant team-a: clusterSelector: empty (null)",
            id="cluster-selector-null",
        ),
        P(
            T + "    cluster_selector: env=dev\n",
            "t.yaml:4: tenant team-a: unknown key 'cluster_selector'",
            id="cluster-selector-snake-case",
        ),
        P(
            T + "    clusterScoped: 'no'\n",
            "t.yaml:4: tenant team-a: clusterScoped: Expected `bool`, got `str`",
            id="cluster-scoped-quoted-string",
        ),
        P(
            '{\n "tenants": {\n  "team-a": {"serviceAccount": "a/d", "x": 1}\n }\n}\n',
            "t.yaml:3: tenant team-a: unknown key 'x'",
            id="json-unknown-key-with-its-line",
        ),
    ],
)
def test_load_refuses_naming_file_and_line(text: str, error: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(text, "t.yaml")
    assert str(caught.value).startswith(error)
    assert "\n" not in str(caught.value)


def test_load_refuses_bytes_that_are_not_utf8() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(b"tenants: {\xff}", "t.yaml")
    assert str(caught.value) == "t.yaml: not UTF-8 text"


# --- whether a bundle may be taken at all ---------------------------------------------------------


PROD_ONLY = sa(clusters=("prod", "prod-*"))
LOCKDOWN = (
    "bundles of no tenant are refused: the tenant policy is in lockdown "
    "(name the bundle TENANT/NAME)"
)
UNDEFINED = 'tenant "team-x" is not defined in the tenant policy'


@pytest.mark.parametrize(
    ("pol", "bundle", "cluster", "refusal"),
    [
        P(policy(team_a=sa()), "team-a/web", "prod", None, id="tenant-bundle-any-cluster"),
        P(policy(), "web", "prod", None, id="platform-bundle-without-lockdown"),
        P(policy(lockdown=True), "web", "prod", LOCKDOWN, id="platform-bundle-in-lockdown"),
        P(
            policy(lockdown=True, team_a=sa()),
            "team-a/web",
            "prod",
            None,
            id="tenant-bundle-in-lockdown",
        ),
        P(policy(team_a=sa()), "team-x/web", "prod", UNDEFINED, id="unknown-tenant"),
        P(TenantPolicy(), "team-x/web", "prod", UNDEFINED, id="unknown-tenant-of-the-empty-policy"),
        P(policy(team_a=PROD_ONLY), "team-a/web", "prod-eu", None, id="cluster-glob-matches"),
        P(
            policy(team_a=PROD_ONLY),
            "team-a/web",
            "staging",
            'tenant team-a may not publish to cluster "staging" (its clusters: [prod, prod-*])',
            id="cluster-not-among-the-tenants",
        ),
        P(
            policy(team_a=sa(clusters=())),
            "team-a/web",
            "prod",
            'tenant team-a may not publish to cluster "prod" (its clusters: [])',
            id="no-clusters-at-all",
        ),
    ],
)
def test_bundle_refusal(pol: TenantPolicy, bundle: str, cluster: str, refusal: str | None) -> None:
    assert bundle_refusal(pol, bundle, cluster) == refusal


# --- objects outside a tenant's limits ------------------------------------------------------------


def cm(ns: str, name: str = "x") -> ObjectKey:
    return ObjectKey("", "ConfigMap", ns, name)


NS_ONLY = sa(namespaces=("team-a", "team-a-*"))
CORE_AND_APPS = sa(kinds=KindRules(allow=("/ConfigMap", "apps/*")))
RBAC = "rbac.authorization.k8s.io"
CRB = ObjectKey(RBAC, "ClusterRoleBinding", "", "x")
RB = ObjectKey(RBAC, "RoleBinding", "team-a", "x")
DEPLOY = ObjectKey("apps", "Deployment", "team-a", "web")
SECRET = ObjectKey("", "Secret", "team-a", "s")
NAMESPACE_OTHER = ObjectKey("", "Namespace", "", "other")
NAMESPACE_OWN = ObjectKey("", "Namespace", "", "team-a-dev")
CRB_REFUSED = f"ClusterRoleBinding.{RBAC}/x: tenant team-a may not manage cluster-scoped objects"
RB_DENIED = f"RoleBinding.{RBAC}/team-a/x: kind {RBAC}/RoleBinding is denied to tenant team-a"
OUTSIDE = "is outside tenant team-a's namespaces [team-a, team-a-*]"


@pytest.mark.parametrize(
    ("tenant", "objects", "refusals"),
    [
        P(
            NS_ONLY,
            [(cm("team-a"), True), (cm("team-a-dev"), True)],
            [],
            id="namespaced-objects-in-its-namespaces",
        ),
        P(
            NS_ONLY,
            [(cm("other"), True)],
            [f'ConfigMap/other/x: namespace "other" {OUTSIDE}'],
            id="namespace-outside",
        ),
        P(
            NS_ONLY,
            [(cm(""), True)],
            [
                "ConfigMap/x: names no namespace, and tenant team-a's objects must be in "
                "[team-a, team-a-*]"
            ],
            id="no-namespace-when-namespaces-are-limited",
        ),
        P(sa(), [(cm("anywhere"), True)], [], id="any-namespace-when-namespaces-are-unset"),
        P(
            sa(namespaces=()),
            [(cm("team-a"), True)],
            ['ConfigMap/team-a/x: namespace "team-a" is outside tenant team-a\'s namespaces []'],
            id="empty-namespaces-allow-none",
        ),
        P(
            NS_ONLY,
            [(CRB, False)],
            [CRB_REFUSED],
            id="cluster-scoped-refused-by-default-with-namespaces",
        ),
        P(sa(), [(CRB, False)], [], id="cluster-scoped-allowed-by-default-without-namespaces"),
        P(
            sa(cluster_scoped=False),
            [(CRB, False)],
            [CRB_REFUSED],
            id="cluster-scoped-refused-explicitly",
        ),
        P(
            sa(namespaces=("team-a",), cluster_scoped=True),
            [(CRB, False), (cm("other"), True)],
            [
                'ConfigMap/other/x: namespace "other" is outside tenant team-a\'s namespaces '
                "[team-a]"
            ],
            id="cluster-scoped-allowed-explicitly-namespaces-still-apply",
        ),
        P(TEAM_A, [(RB, True)], [RB_DENIED], id="kind-denied"),
        P(
            sa(kinds=KindRules(allow=(f"{RBAC}/RoleBinding",), deny=(f"{RBAC}/*",))),
            [(RB, True)],
            [RB_DENIED],
            id="deny-wins-over-allow",
        ),
        P(
            sa(kinds=KindRules(deny=("*/Secret",))),
            [(SECRET, True), (cm("team-a"), True)],
            ["Secret/team-a/s: kind /Secret is denied to tenant team-a"],
            id="deny-any-group-secret",
        ),
        P(
            CORE_AND_APPS,
            [(cm("team-a"), True), (DEPLOY, True)],
            [],
            id="core-group-and-apps-glob-allowed",
        ),
        P(
            CORE_AND_APPS,
            [(SECRET, True)],
            [
                "Secret/team-a/s: kind /Secret is not among tenant team-a's kinds "
                "[/ConfigMap, apps/*]"
            ],
            id="kind-not-allowed",
        ),
        P(
            CORE_AND_APPS,
            [(ObjectKey("x.io", "ConfigMap", "team-a", "c"), True)],
            [
                "ConfigMap.x.io/team-a/c: kind x.io/ConfigMap is not among tenant team-a's kinds "
                "[/ConfigMap, apps/*]"
            ],
            id="core-pattern-does-not-match-other-groups",
        ),
        P(
            sa(kinds=KindRules(allow=("*/*",))),
            [(ObjectKey("x.io", "Widget", "", "w"), True)],
            [],
            id="star-star-allows-any-kind",
        ),
        P(
            sa(kinds=KindRules(allow=())),
            [(cm("team-a"), True)],
            ["ConfigMap/team-a/x: kind /ConfigMap is not among tenant team-a's kinds []"],
            id="nothing-allowed",
        ),
        P(NS_ONLY, [(NAMESPACE_OWN, False)], [], id="own-namespace-object-needs-no-cluster-scope"),
        P(
            NS_ONLY,
            [(NAMESPACE_OTHER, False)],
            [f'Namespace/other: namespace "other" {OUTSIDE}'],
            id="namespace-object-outside-its-namespaces",
        ),
        P(
            sa(namespaces=("team-a-*",), kinds=KindRules(deny=("/Namespace",))),
            [(NAMESPACE_OWN, False)],
            ["Namespace/team-a-dev: kind /Namespace is denied to tenant team-a"],
            id="namespace-object-denied-by-kind",
        ),
        P(
            sa(cluster_scoped=False),
            [(NAMESPACE_OTHER, False)],
            [],
            id="namespace-object-with-any-namespace",
        ),
        P(
            NS_ONLY,
            [(cm("other", "a"), True), (DEPLOY, True), (CRB, False)],
            [f'ConfigMap/other/a: namespace "other" {OUTSIDE}', CRB_REFUSED],
            id="one-message-per-object-in-order",
        ),
    ],
)
def test_object_refusals(
    tenant: Tenant, objects: list[tuple[ObjectKey, bool]], refusals: list[str]
) -> None:
    assert object_refusals(policy(team_a=tenant), "team-a/web", objects) == refusals


def test_platform_bundles_have_no_object_limits() -> None:
    pol = policy(lockdown=True, team_a=sa(namespaces=(), kinds=KindRules(allow=())))
    assert object_refusals(pol, "web", [(CRB, False), (cm("kube-system"), True)]) == []


def test_objects_of_an_unknown_tenant_are_all_refused() -> None:
    assert object_refusals(TenantPolicy(), "team-x/web", [(cm("a"), True), (CRB, False)]) == [
        f"ConfigMap/a/x: {UNDEFINED}",
        f"ClusterRoleBinding.{RBAC}/x: {UNDEFINED}",
    ]


@pytest.mark.parametrize(
    ("tenant", "may"),
    [
        P(sa(), True, id="unset-without-namespaces"),
        P(sa(namespaces=("a",)), False, id="unset-with-namespaces"),
        P(sa(namespaces=("a",), cluster_scoped=True), True, id="explicit-true"),
        P(sa(cluster_scoped=False), False, id="explicit-false"),
    ],
)
def test_may_manage_cluster_scoped(tenant: Tenant, may: bool) -> None:
    assert may_manage_cluster_scoped(tenant) is may


# --- identity, default namespace, names -----------------------------------------------------------


def test_identity_is_what_a_real_service_account_token_gives() -> None:
    assert identity(sa("team-a/deployer")) == Identity(
        user="system:serviceaccount:team-a:deployer",
        groups=("system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"),
    )


@pytest.mark.parametrize(
    ("bundle", "user"),
    [
        P("team-a/web", "system:serviceaccount:team-a:deployer", id="tenant"),
        P("ops/web", "system:serviceaccount:ops:sa.x", id="other-tenant-dotted-name"),
        P("web", None, id="platform-bundle"),
        P("team-x/web", None, id="unknown-tenant"),
    ],
)
def test_impersonation(bundle: str, user: str | None) -> None:
    pol = policy(team_a=TEAM_A, ops=sa("ops/sa.x"))
    who = impersonation(pol, bundle)
    assert (who.user if who else None) == user


@pytest.mark.parametrize(
    ("bundle", "namespace"),
    [
        P("team-a/web", "team-a", id="set"),
        P("ops/web", "", id="unset"),
        P("web", "", id="platform-bundle"),
        P("team-x/web", "", id="unknown-tenant"),
    ],
)
def test_default_namespace(bundle: str, namespace: str) -> None:
    assert default_namespace(policy(team_a=TEAM_A, ops=sa("ops/d")), bundle) == namespace


@pytest.mark.parametrize(
    ("bundle", "tenant"), [P("team-a/web", "team-a", id="tenant"), P("web", "", id="platform")]
)
def test_tenant_of(bundle: str, tenant: str) -> None:
    assert tenant_of(bundle) == tenant


# --- stored on the bus ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pol",
    [
        TenantPolicy(),
        policy(lockdown=True, team_a=TEAM_A, ops=sa("ops/d", namespaces=(), cluster_scoped=True)),
    ],
    ids=["empty", "full"],
)
def test_dump_and_decode_round_trip(pol: TenantPolicy) -> None:
    assert decode_stored(dump_policy(pol)) == pol


def test_dump_keeps_the_file_keys_and_leaves_out_what_was_not_written() -> None:
    stored = orjson.loads(dump_policy(load_policy(EXAMPLE, "t.yaml")))
    assert stored["tenants"]["team-a"] == {
        "serviceAccount": "team-a/deployer",
        "namespaces": ["team-a", "team-a-*"],
        "clusterScoped": False,
        "defaultNamespace": "team-a",
        "kinds": {"allow": ["*/*"], "deny": ["rbac.authorization.k8s.io/RoleBinding"]},
        "clusters": ["*"],
    }
    assert orjson.loads(dump_policy(policy(b=sa(), a=sa()))) == {
        "tenants": {
            "a": {"serviceAccount": "team-a/deployer"},
            "b": {"serviceAccount": "team-a/deployer"},
        }
    }
    assert list(orjson.loads(dump_policy(policy(b=sa(), a=sa())))["tenants"]) == ["a", "b"]


def test_an_empty_stored_value_is_the_empty_policy() -> None:
    assert decode_stored(b"") == TenantPolicy()


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"{", "stored tenant policy: "),
        (b'{"tenants": {"Team": {"serviceAccount": "a/b"}}}', "stored tenant policy: .*regex"),
        (
            b'{"tenants": {"a": {"serviceAccount": "a/b", "x": 1}}}',
            "stored tenant policy: .*unknown field",
        ),
        (
            b'{"tenants": {"a": {"serviceAccount": "a/b", "namespaces": ["a"], '
            b'"defaultNamespace": "b"}}}',
            "stored tenant policy: tenant a: defaultNamespace 'b' is not in its namespaces",
        ),
        (
            b'{"tenants": {"a": {"serviceAccount": "a/b", "clusterSelector": "env in (x"}}}',
            'stored tenant policy: tenant a: clusterSelector: selector "env in \\(x": missing',
        ),
    ],
    ids=[
        "not-json",
        "bad-tenant-name",
        "unknown-key",
        "default-namespace-outside",
        "cluster-selector-unreadable",
    ],
)
def test_decode_stored_refuses(data: bytes, error: str) -> None:
    with pytest.raises(PolicyError, match="^" + error):
        decode_stored(data)


# --- the documentation and the schema -------------------------------------------------------------


def _doc_example() -> str:
    text = (ROOT / "docs" / "tenancy.md").read_text()
    found = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert found, "docs/tenancy.md has a yaml example"
    return found[1]


def test_the_documented_example_is_what_the_tests_read() -> None:
    """docs/tenancy.md's example: the tests' team-a, its ServiceAccount where no tenant runs
    Pods (nothing for ``tenants apply`` to warn of), and a right granted."""
    documented = msgspec.structs.replace(
        TEAM_A,
        service_account="driftbus-tenants/team-a",
        rights=Rights(commit_status_repositories=("acme/team-a-*",)),
    )
    example = load_policy(_doc_example(), "docs/tenancy.md")
    assert example == policy(team_a=documented)
    assert exposed_accounts(example) == []


@pytest.mark.parametrize(
    ("doc", "valid"),
    [
        (EXAMPLE, True),
        ("tenants: {t: {serviceAccount: t/d, namespaces: [t]}}", True),
        ("tenants: {Team: {serviceAccount: t/d}}", False),
        ("tenants: {t: {serviceAccount: d}}", False),
        ("tenants: {t: {serviceAccount: t/d, namespace: t}}", False),
        ("tenants: {t: {serviceAccount: t/d, kinds: {allow: [ConfigMap]}}}", False),
        ("tenants: {t: {serviceAccount: t/d, clusterSelector: env=dev}}", True),
        ("tenants: {t: {serviceAccount: t/d, clusterSelector: [env=dev]}}", False),
    ],
    ids=[
        "example",
        "small",
        "bad-name",
        "bad-service-account",
        "unknown-key",
        "bad-kind",
        "cluster-selector",
        "cluster-selector-as-a-list",
    ],
)
def test_the_json_schema_agrees(doc: str, valid: bool) -> None:
    schema = orjson.loads((ROOT / "schemas" / "json" / "tenants.schema.json").read_bytes())
    [(_, value)] = list(documents(doc))
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
    assert not errors if valid else errors
