"""The RBAC that lets the applier impersonate exactly the ServiceAccounts a tenant policy names,
and nothing else (pure): what ``driftbus tenants rbac`` prints and ``deploy/tenants/`` ships; and
the tenants' ServiceAccounts a tenant could use directly (:func:`exposed_accounts`).

The API server asks the impersonating user for the verb ``impersonate`` on the resource
``serviceaccounts``, in the ServiceAccount's namespace, named by it. So one Role per namespace
that holds tenant ServiceAccounts, with those names as ``resourceNames``, bound to the applier
by a RoleBinding in the same namespace, grants exactly that: a ClusterRole would grant the same
names in every namespace, and a rule without ``resourceNames`` every ServiceAccount there.
"""

from __future__ import annotations

from collections import defaultdict
from fnmatch import fnmatchcase
from typing import Any, Final

import msgspec

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


def exposed_accounts(policy: TenantPolicy) -> list[str]:
    """One warning per tenant ServiceAccount living in a namespace a tenant may manage objects
    in (its ``namespaces`` match it, or are unset): a Pod of that tenant's bundle there may name
    it as its ``serviceAccountName`` and run with its token, so its RBAC is used directly, past
    the policy's kinds and namespaces. ``tenants rbac`` grants a deployer none of its own rights,
    so RBAC cannot be known to hold the line instead: only where it lives can."""
    out = []
    for owner, tenant in sorted(policy.tenants.items()):
        namespace = tenant.service_account.split("/")[0]
        for user, other in sorted(policy.tenants.items()):
            allowed = other.namespaces
            if not isinstance(allowed, msgspec.UnsetType) and not any(
                fnmatchcase(namespace, p) for p in allowed
            ):
                continue
            whose = "its own" if user == owner else f"tenant {owner}'s"
            out.append(
                f"tenant {user} may manage namespace {namespace}, where {whose} ServiceAccount "
                f"{tenant.service_account} lives: a Pod of its bundles can run as "
                f"{tenant.service_account} and use its RBAC directly, past the policy's kinds and "
                f"namespaces (and `tenants rbac` does not limit that RBAC); keep tenants' "
                f"ServiceAccounts in a namespace no tenant manages (e.g. driftbus-tenants/{owner})"
            )
    return out


def _service_account(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"the applier's ServiceAccount {value!r} is not NAMESPACE/NAME")
    return namespace, name
