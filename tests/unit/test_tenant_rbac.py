"""The applier's impersonation RBAC generated from a tenant policy (services/tenancy/rbac.py):
exactly the ServiceAccounts named, in their own namespaces; and deploy/tenants/ is its output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from services.tenancy import policy as tenancy
from services.tenancy.rbac import (
    ROLE,
    exposed_accounts,
    impersonation_rbac,
    service_accounts,
)

ROOT = Path(__file__).resolve().parents[2]


def policy(*service_accounts: str) -> Any:
    tenants = "".join(
        f"  t{i}:\n    serviceAccount: {sa}\n" for i, sa in enumerate(service_accounts)
    )
    return tenancy.load_policy(f"tenants:\n{tenants}" if tenants else "tenants: {}", "t.yaml")


@pytest.mark.parametrize(
    ("accounts", "expected"),
    [
        pytest.param((), {}, id="no-tenants-no-rights"),
        pytest.param(("a/deployer",), {"a": ["deployer"]}, id="one"),
        pytest.param(
            ("a/deployer", "b/deployer", "a/ci"),
            {"a": ["ci", "deployer"], "b": ["deployer"]},
            id="grouped-by-namespace-sorted",
        ),
        pytest.param(("a/x", "a/x"), {"a": ["x"]}, id="two-tenants-one-account"),
    ],
)
def test_service_accounts_by_namespace(
    accounts: tuple[str, ...], expected: dict[str, list[str]]
) -> None:
    assert service_accounts(policy(*accounts)) == expected


def test_a_role_per_namespace_naming_exactly_its_accounts_bound_to_the_applier() -> None:
    docs = impersonation_rbac(policy("a/deployer", "b/deployer", "a/ci"), "ops/runner")
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [
        ("Role", "a"),
        ("RoleBinding", "a"),
        ("Role", "b"),
        ("RoleBinding", "b"),
    ]
    role_a, binding_a = docs[0], docs[1]
    assert role_a["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["serviceaccounts"],
            "resourceNames": ["ci", "deployer"],
            "verbs": ["impersonate"],
        }
    ]
    assert binding_a["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": ROLE,
    }
    assert binding_a["subjects"] == [
        {"kind": "ServiceAccount", "name": "runner", "namespace": "ops"}
    ]
    # never a cluster-wide grant, never a rule without names
    assert all(d["kind"] in ("Role", "RoleBinding") for d in docs)
    assert all(r["resourceNames"] for d in docs if d["kind"] == "Role" for r in d["rules"])


@pytest.mark.parametrize("applier", ["", "driftbus", "/x", "x/", "a/b/c"])
def test_an_applier_that_is_not_namespace_slash_name_is_refused(applier: str) -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        impersonation_rbac(policy("a/deployer"), applier)


def test_shipped_deploy_tenants_is_generated_from_its_tenants_file() -> None:
    """deploy/tenants/impersonate.yaml is `driftbus tenants rbac deploy/tenants/tenants.yaml`:
    it cannot drift from the example policy next to it."""
    here = ROOT / "deploy" / "tenants"
    shipped = [d for d in yaml.safe_load_all((here / "impersonate.yaml").read_text()) if d]
    example = tenancy.load_policy((here / "tenants.yaml").read_bytes(), "tenants.yaml")
    assert shipped == impersonation_rbac(example)
    assert yaml.safe_load((here / "kustomization.yaml").read_text())["resources"] == [
        "deployers.yaml",
        "impersonate.yaml",
    ]


def test_shipped_example_keeps_its_service_accounts_where_no_tenant_runs_pods() -> None:
    """deploy/tenants/deployers.yaml makes exactly the example's ServiceAccounts, in a
    namespace no tenant of it may manage: the documented example is one that holds."""
    here = ROOT / "deploy" / "tenants"
    example = tenancy.load_policy((here / "tenants.yaml").read_bytes(), "tenants.yaml")
    docs = [d for d in yaml.safe_load_all((here / "deployers.yaml").read_text()) if d]
    made = {
        f"{d['metadata']['namespace']}/{d['metadata']['name']}"
        for d in docs
        if d["kind"] == "ServiceAccount"
    }
    assert made == {t.service_account for t in example.tenants.values()}
    namespaces = {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}
    assert namespaces == {sa.split("/")[0] for sa in made}
    assert exposed_accounts(example) == []


def tenants(**bodies: str) -> Any:
    text = "".join(f"  {name}:\n{body}" for name, body in bodies.items())
    return tenancy.load_policy(f"tenants:\n{text}", "t.yaml")


@pytest.mark.parametrize(
    ("pol", "expected"),
    [
        pytest.param(
            tenants(a="    serviceAccount: a/deployer\n    namespaces: [a]\n"),
            ["tenant a may manage namespace a, where its own ServiceAccount a/deployer lives"],
            id="in-its-own-namespace",
        ),
        pytest.param(
            tenants(a="    serviceAccount: a/deployer\n"),
            ["tenant a may manage namespace a, where its own ServiceAccount a/deployer lives"],
            id="a-tenant-of-any-namespace",
        ),
        pytest.param(
            tenants(a="    serviceAccount: a-x/deployer\n    namespaces: [a-*]\n"),
            ["tenant a may manage namespace a-x, where its own ServiceAccount a-x/deployer"],
            id="matched-by-a-glob",
        ),
        pytest.param(
            tenants(
                a="    serviceAccount: b/a\n    namespaces: [a]\n",
                b="    serviceAccount: sys/b\n    namespaces: [b]\n",
            ),
            ["tenant b may manage namespace b, where tenant a's ServiceAccount b/a lives"],
            id="in-another-tenants-namespace",
        ),
        pytest.param(
            tenants(
                a="    serviceAccount: sys/a\n    namespaces: [a]\n",
                b="    serviceAccount: sys/b\n    namespaces: [b, b-*]\n",
            ),
            [],
            id="where-no-tenant-manages",
        ),
        pytest.param(
            tenants(
                a="    serviceAccount: sys/a\n    namespaces: [a]\n",
                b="    serviceAccount: sys/b\n",
            ),
            [
                "tenant b may manage namespace sys, where tenant a's ServiceAccount sys/a lives",
                "tenant b may manage namespace sys, where its own ServiceAccount sys/b lives",
            ],
            id="a-tenant-of-any-namespace-reaches-every-account",
        ),
    ],
)
def test_exposed_accounts(pol: Any, expected: list[str]) -> None:
    got = exposed_accounts(pol)
    assert len(got) == len(expected), got
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want), line
        assert "driftbus-tenants" in line  # what to do instead


def test_the_applier_is_never_granted_to_impersonate_itself() -> None:
    """A tenant whose serviceAccount is the applier's would write with the applier's rights."""
    with pytest.raises(ValueError, match="impersonate itself"):
        impersonation_rbac(policy("a/deployer", "driftbus/driftbus-applier"))
    assert impersonation_rbac(policy("driftbus/other"))  # another account there is fine
