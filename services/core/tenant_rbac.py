"""The RBAC that lets the applier impersonate exactly the ServiceAccounts a tenant policy names,
and nothing else (pure): what ``driftbus tenants rbac`` prints and ``deploy/tenants/`` ships.

The API server asks the impersonating user for the verb ``impersonate`` on the resource
``serviceaccounts``, in the ServiceAccount's namespace, named by it. So one Role per namespace
that holds tenant ServiceAccounts, with those names as ``resourceNames``, bound to the applier
by a RoleBinding in the same namespace, grants exactly that: a ClusterRole would grant the same
names in every namespace, and a rule without ``resourceNames`` every ServiceAccount there.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from schemas.tenants import TenantPolicy

ROLE: Final = "driftbus:impersonate"
APPLIER: Final = "driftbus/driftbus-applier"
"""The applier's own ServiceAccount in ``deploy/`` (NAMESPACE/NAME)."""
_RBAC: Final = "rbac.authorization.k8s.io"


def service_accounts(policy: TenantPolicy) -> dict[str, list[str]]:
    """namespace -> the names of the ServiceAccounts the policy's tenants impersonate, sorted
    (two tenants may share one)."""
    names: defaultdict[str, set[str]] = defaultdict(set)
    for tenant in policy.tenants.values():
        namespace, name = tenant.service_account.split("/")
        names[namespace].add(name)
    return {ns: sorted(names[ns]) for ns in sorted(names)}


def impersonation_rbac(policy: TenantPolicy, applier: str = APPLIER) -> list[dict[str, Any]]:
    """A Role and a RoleBinding per ServiceAccount namespace of ``policy``, in apply order: the
    ``applier`` ServiceAccount (NAMESPACE/NAME) may impersonate those ServiceAccounts only."""
    applier_ns, applier_name = _service_account(applier)
    accounts = service_accounts(policy)
    if applier_name in accounts.get(applier_ns, []):
        # the tenant's writes would carry the applier's own, cluster-wide rights
        raise ValueError(
            f"a tenant's serviceAccount is the applier's own ({applier}): refusing to let the "
            "applier impersonate itself"
        )
    docs: list[dict[str, Any]] = []
    for namespace, names in accounts.items():
        meta = {
            "name": ROLE,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "driftbus-tenants-rbac"},
        }
        docs.append(
            {
                "apiVersion": f"{_RBAC}/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["serviceaccounts"],
                        "resourceNames": names,
                        "verbs": ["impersonate"],
                    }
                ],
            }
        )
        docs.append(
            {
                "apiVersion": f"{_RBAC}/v1",
                "kind": "RoleBinding",
                "metadata": dict(meta),
                "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": ROLE},
                "subjects": [
                    {"kind": "ServiceAccount", "name": applier_name, "namespace": applier_ns}
                ],
            }
        )
    return docs


def _service_account(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"the applier's ServiceAccount {value!r} is not NAMESPACE/NAME")
    return namespace, name
