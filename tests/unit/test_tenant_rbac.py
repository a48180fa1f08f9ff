"""The applier's impersonation RBAC generated from a tenant policy (services/core/tenant_rbac.py):
exactly the ServiceAccounts named, in their own namespaces; and deploy/tenants/ is its output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from services.core import tenancy
from services.core.tenant_rbac import ROLE, impersonation_rbac, service_accounts

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
        "impersonate.yaml"
    ]


def test_the_applier_is_never_granted_to_impersonate_itself() -> None:
    """A tenant whose serviceAccount is the applier's would write with the applier's rights."""
    with pytest.raises(ValueError, match="impersonate itself"):
        impersonation_rbac(policy("a/deployer", "driftbus/driftbus-applier"))
    assert impersonation_rbac(policy("driftbus/other"))  # another account there is fine
