"""Which clusters a tenant may use (issue 31): its ``clusters`` globs and its ``clusterSelector``
over the cluster registry's labels must both admit a cluster; platform bundles go anywhere unless
the policy is in lockdown (``services/tenancy/clusters.py``). Parsing ``clusterSelector`` is
in tests/unit/test_tenancy.py with the rest of the file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from schemas.tenants import Tenant, TenantPolicy
from services.tenancy.clusters import NOT_READ, cluster_refusal, selector_problem
from services.tenancy.policy import bundle_refusal, load_policy

P = pytest.param
DEV = {"env": "dev", "region": "eu"}
PROD = {"env": "prod", "region": "eu"}


def sa(**fields: Any) -> Tenant:
    return Tenant(service_account="team-a/deployer", **fields)


def team_a(lockdown: bool = False, **fields: Any) -> TenantPolicy:
    return TenantPolicy(lockdown=lockdown, tenants={"team-a": sa(**fields)})


def refused(cluster: str, why: str) -> str:
    return f'tenant team-a may not publish to cluster "{cluster}" ({why})'


LOCKDOWN = (
    'bundles of no tenant may not publish to cluster "prod-1": the tenant policy is in lockdown '
    "(name the bundle TENANT/NAME)"
)
UNKNOWN = (
    "its labels are unknown: it has no readable registry entry, so its clusterSelector "
    '"{}" admits nothing'
)
UNDEFINED = (
    'tenant "team-x" may not publish to cluster "prod-1": it is not defined in the tenant policy'
)


@pytest.mark.parametrize(
    ("pol", "tenant", "cluster", "labels", "refusal"),
    [
        # platform bundles: anywhere, unless the policy is in lockdown
        P(TenantPolicy(), "", "prod-1", PROD, None, id="platform-bundle-anywhere"),
        P(team_a(cluster_selector="env=dev"), "", "prod-1", PROD, None, id="platform-no-limits"),
        P(TenantPolicy(lockdown=True), "", "prod-1", PROD, LOCKDOWN, id="platform-in-lockdown"),
        P(team_a(lockdown=True), "team-a", "prod-1", PROD, None, id="tenant-in-lockdown-is-fine"),
        # tenants the policy does not define: nowhere
        P(team_a(), "team-x", "prod-1", PROD, UNDEFINED, id="unknown-tenant"),
        P(TenantPolicy(), "team-x", "prod-1", {}, UNDEFINED, id="unknown-tenant-empty-policy"),
        # clusters: globs of names
        P(team_a(), "team-a", "prod-1", PROD, None, id="defaults-admit-every-cluster"),
        P(team_a(clusters=("dev-*",)), "team-a", "dev-2", DEV, None, id="glob-admits"),
        P(
            team_a(clusters=("dev-*", "qa")),
            "team-a",
            "prod-1",
            DEV,  # the labels do not make up for the name
            refused("prod-1", "its clusters: [dev-*, qa]"),
            id="not-among-the-globs",
        ),
        P(
            team_a(clusters=()),
            "team-a",
            "prod-1",
            DEV,
            refused("prod-1", "its clusters: []"),
            id="no-clusters-at-all",
        ),
        # clusterSelector: the registry's labels
        P(team_a(cluster_selector="env=dev"), "team-a", "c1", DEV, None, id="selector-admits"),
        P(
            team_a(cluster_selector="env=dev"),
            "team-a",
            "prod-1",
            PROD,
            refused("prod-1", 'its labels do not match its clusterSelector "env=dev"'),
            id="selector-refuses",
        ),
        P(
            team_a(cluster_selector="env=dev"),
            "team-a",
            "new-1",
            {},
            refused("new-1", 'its labels do not match its clusterSelector "env=dev"'),
            id="a-cluster-without-labels-matches-no-equality",
        ),
        P(
            team_a(cluster_selector="env in (dev, qa), region=eu"),
            "team-a",
            "c1",
            DEV,
            None,
            id="set-and-equality-all-match",
        ),
        P(
            team_a(cluster_selector="env in (dev, qa), region=us"),
            "team-a",
            "c1",
            DEV,
            refused(
                "c1", 'its labels do not match its clusterSelector "env in (dev, qa), region=us"'
            ),
            id="every-requirement-must-match",
        ),
        P(
            team_a(cluster_selector="env!=prod"),
            "team-a",
            "new-1",
            {},
            None,
            id="inequality-admits-a-cluster-without-the-label-as-kubectl",
        ),
        P(
            team_a(cluster_selector="!frozen"),
            "team-a",
            "c1",
            {**DEV, "frozen": ""},
            refused("c1", 'its labels do not match its clusterSelector "!frozen"'),
            id="absence-refuses-a-labelled-cluster",
        ),
        P(team_a(cluster_selector="gpu"), "team-a", "c1", {"gpu": ""}, None, id="existence"),
        # both must admit; the name is checked first
        P(
            team_a(clusters=("prod-*",), cluster_selector="env=dev"),
            "team-a",
            "prod-1",
            PROD,
            refused("prod-1", 'its labels do not match its clusterSelector "env=dev"'),
            id="glob-admits-selector-refuses",
        ),
        P(
            team_a(clusters=("dev-*",), cluster_selector="env=prod"),
            "team-a",
            "prod-1",
            PROD,
            refused("prod-1", "its clusters: [dev-*]"),
            id="selector-admits-glob-refuses",
        ),
        P(
            team_a(clusters=("prod-*",), cluster_selector="env=prod"),
            "team-a",
            "prod-1",
            PROD,
            None,
            id="both-admit",
        ),
        # labels unknown to the registry (no entry, removed, unreadable): None, never {}
        P(
            team_a(cluster_selector="env!=prod"),
            "team-a",
            "gone-1",
            None,
            refused("gone-1", UNKNOWN.format("env!=prod")),
            id="unknown-labels-match-no-inequality",
        ),
        P(
            team_a(cluster_selector="!frozen"),
            "team-a",
            "gone-1",
            None,
            refused("gone-1", UNKNOWN.format("!frozen")),
            id="unknown-labels-match-no-absence",
        ),
        P(
            team_a(cluster_selector="env notin (prod)"),
            "team-a",
            "gone-1",
            None,
            refused("gone-1", UNKNOWN.format("env notin (prod)")),
            id="unknown-labels-match-no-notin",
        ),
        P(
            team_a(cluster_selector="env=dev"),
            "team-a",
            "gone-1",
            None,
            refused("gone-1", UNKNOWN.format("env=dev")),
            id="unknown-labels-match-no-equality",
        ),
        P(team_a(), "team-a", "gone-1", None, None, id="no-selector-needs-no-labels"),
        P(
            team_a(clusters=("dev-*",), cluster_selector="env!=prod"),
            "team-a",
            "gone-1",
            None,
            refused("gone-1", "its clusters: [dev-*]"),
            id="unknown-labels-the-glob-first",
        ),
        P(TenantPolicy(), "", "gone-1", None, None, id="platform-bundle-unknown-labels"),
        # a policy made in code, never read from a file: an unreadable selector admits nothing
        P(
            team_a(cluster_selector="env in (dev"),
            "team-a",
            "c1",
            DEV,
            refused("c1", 'selector "env in (dev": missing ")" (at the end)'),
            id="unreadable-selector-fails-closed",
        ),
    ],
)
def test_cluster_refusal(
    pol: TenantPolicy,
    tenant: str,
    cluster: str,
    labels: Mapping[str, str] | None,
    refusal: str | None,
) -> None:
    assert cluster_refusal(pol, tenant, cluster, labels) == refusal


@pytest.mark.parametrize(
    ("fields", "cluster", "labels"),
    [
        P({}, "prod-1", PROD, id="defaults"),
        P({"clusters": ("dev-*",)}, "prod-1", PROD, id="glob-refuses"),
        P({"cluster_selector": "env=dev"}, "c1", DEV, id="selector-admits"),
        P({"cluster_selector": "env=dev"}, "prod-1", PROD, id="selector-refuses"),
        P({"clusters": ("dev-*",), "cluster_selector": "env=dev"}, "prod-1", DEV, id="both"),
        P({"cluster_selector": "env!=prod"}, "gone-1", None, id="unknown-labels"),
        P({"cluster_selector": "env!=prod"}, "new-1", {}, id="known-no-labels"),
    ],
)
def test_the_planners_check_of_a_bundle_says_the_same_given_the_labels(
    fields: dict[str, Any], cluster: str, labels: Mapping[str, str] | None
) -> None:
    """``bundle_refusal`` (every bundle the planner takes) and ``cluster_refusal`` (the rollout
    driver, per cluster of a fleet) give one verdict and one message for a tenant's bundle."""
    pol = team_a(**fields)
    assert bundle_refusal(pol, "team-a/web", cluster, labels) == cluster_refusal(
        pol, "team-a", cluster, labels
    )


def test_labels_not_read_check_the_clusters_globs_only() -> None:
    """``plan`` when it cannot read the registry (not the same as labels the registry does not
    have: those admit nothing)."""
    pol = team_a(clusters=("prod-*",), cluster_selector="env=dev")
    assert bundle_refusal(pol, "team-a/web", "prod-1") is None
    assert bundle_refusal(pol, "team-a/web", "prod-1", NOT_READ) is None
    assert bundle_refusal(pol, "team-a/web", "prod-1", PROD) is not None
    assert bundle_refusal(pol, "team-a/web", "prod-1", None) is not None
    assert bundle_refusal(pol, "team-a/web", "dev-1") == refused("dev-1", "its clusters: [prod-*]")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        P("", "", id="empty-admits-all"),
        P("env=dev,tier in (web, api),!frozen", "", id="readable"),
        P("env in (dev", 'selector "env in (dev": missing ")" (at the end)', id="unbalanced"),
        P("x" * 5000, f'selector "{"x" * 80}"…: over 4096 characters', id="too-long"),
    ],
)
def test_selector_problem(text: str, problem: str) -> None:
    assert selector_problem(text) == problem


def test_the_documented_example_admits_what_the_documentation_says() -> None:
    text = (Path(__file__).parents[2] / "docs" / "tenancy.md").read_text()
    found = re.search(r"### Clusters by label\n.*?```yaml\n(.*?)```", text, re.DOTALL)
    assert found, "docs/tenancy.md shows a clusterSelector"
    pol = load_policy(found[1], "docs/tenancy.md")
    assert cluster_refusal(pol, "team-a", "eu-2", {"env": "dev"}) is None
    assert cluster_refusal(pol, "team-a", "eu-3", {"env": "prod"}) is not None
    assert cluster_refusal(pol, "team-a", "us-1", {"env": "dev"}) is not None
