"""The tenant policy: what it allows a bundle (docs/tenancy.md).

A bundle's full name says whose it is (``team-a/web``; a plain ``web`` is the platform team's).
Everything here is a pure decision on the policy and names: whether a bundle may be taken at
all (:func:`bundle_refusal`; the clusters a tenant may use are ``tenant_clusters``', the rights
it may be granted ``tenant_rights``'), which of its objects fall outside the tenant's limits
(:func:`object_refusals`), and whose identity its requests carry (:func:`impersonation`). The
limits are a first fence that names the rule broken before anything is written; what the API
server enforces is the impersonated ServiceAccount's RBAC.

The tenants file — read, checked, ``FILE:LINE`` errors naming the tenant or key — and the stored
policy are ``services.tenancy.document``'s; ``load_policy``, ``dump_policy`` and
``decode_stored`` here are its ``TENANTS`` document's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

import msgspec

from schemas.subjects import ObjectKey, split_bundle
from schemas.tenants import Tenant, TenantPolicy
from services.tenancy.clusters import NOT_READ, Labels, cluster_problem
from services.tenancy.document import TENANTS, listed, matches_any
from services.tenancy.document import PolicyError as PolicyError

_NAMESPACE: Final = ("", "Namespace")


@dataclass(frozen=True)
class Identity:
    """Who a tenant's requests are made as: what the API server gives its ServiceAccount."""

    user: str
    groups: tuple[str, ...]


def tenant_of(bundle: str) -> str:
    """The tenant of a bundle's full name ("" for a platform bundle)."""
    return split_bundle(bundle)[0]


def load_policy(text: str | bytes, where: str) -> TenantPolicy:
    """The policy of a tenants file (YAML or JSON) named ``where``; PolicyError if unusable."""
    return TENANTS.load(text, where)


def dump_policy(policy: TenantPolicy) -> bytes:
    """The policy as JSON, as it is stored on the bus (tenants sorted by name)."""
    return TENANTS.dump(policy)


def decode_stored(data: bytes) -> TenantPolicy:
    """The policy of stored bytes (``dump_policy``'s; empty: the empty policy); PolicyError if
    they are not one."""
    return TENANTS.decode(data)


def identity(tenant: Tenant) -> Identity:
    """The user and groups a real token of the tenant's ServiceAccount authenticates as."""
    namespace, name = tenant.service_account.split("/")
    return Identity(
        user=f"system:serviceaccount:{namespace}:{name}",
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
    )


def impersonation(policy: TenantPolicy, bundle: str) -> Identity | None:
    """Whom requests for ``bundle`` impersonate; None for platform bundles and unknown tenants."""
    tenant = policy.tenants.get(tenant_of(bundle))
    return identity(tenant) if tenant is not None else None


def default_namespace(policy: TenantPolicy, bundle: str) -> str:
    """The namespace the tenant of ``bundle`` gives objects naming none ("" when none)."""
    tenant = policy.tenants.get(tenant_of(bundle))
    return tenant.default_namespace if tenant is not None else ""


def may_manage_cluster_scoped(tenant: Tenant) -> bool:
    """Whether the tenant may manage cluster-scoped objects (unset: only if its namespaces are)."""
    if isinstance(tenant.cluster_scoped, bool):
        return tenant.cluster_scoped
    return isinstance(tenant.namespaces, msgspec.UnsetType)


def bundle_refusal(
    policy: TenantPolicy, bundle: str, cluster: str, labels: Labels = NOT_READ
) -> str | None:
    """Why ``bundle`` may not be taken for ``cluster`` at all, or None if it may. The tenant's
    ``clusterSelector`` is checked against the cluster's registry ``labels`` (None: unknown,
    admitted by no selector) unless they were not read."""
    name = tenant_of(bundle)
    if not name:
        if policy.lockdown:
            return (
                "bundles of no tenant are refused: the tenant policy is in lockdown "
                "(name the bundle TENANT/NAME)"
            )
        return None
    tenant = policy.tenants.get(name)
    if tenant is None:
        return _undefined(name)
    return cluster_problem(name, tenant, cluster, labels)


def object_refusals(
    policy: TenantPolicy, bundle: str, objects: Iterable[tuple[ObjectKey, bool]]
) -> list[str]:
    """One message per object of ``bundle`` outside its tenant's limits; ``bool`` is whether
    the object's kind is namespaced. Always empty for a platform bundle."""
    name = tenant_of(bundle)
    if not name:
        return []
    tenant = policy.tenants.get(name)
    out = []
    for key, namespaced in objects:
        why = _undefined(name) if tenant is None else _object_problem(name, tenant, key, namespaced)
        if why is not None:
            out.append(f"{key}: {why}")
    return out


def _object_problem(name: str, tenant: Tenant, key: ObjectKey, namespaced: bool) -> str | None:
    """The first rule ``key`` breaks: kinds, then scope, then namespace."""
    kind = f"{key.group}/{key.kind}"
    if any(_kind_match(p, key) for p in tenant.kinds.deny):
        return f"kind {kind} is denied to tenant {name}"
    if not any(_kind_match(p, key) for p in tenant.kinds.allow):
        return f"kind {kind} is not among tenant {name}'s kinds {listed(tenant.kinds.allow)}"
    if (key.group, key.kind) == _NAMESPACE:
        namespace = key.name  # a tenant's own namespace is inside its namespaces, not cluster-wide
    elif namespaced:
        namespace = key.namespace
    elif not may_manage_cluster_scoped(tenant):
        return f"tenant {name} may not manage cluster-scoped objects"
    else:
        return None
    allowed = tenant.namespaces
    if isinstance(allowed, msgspec.UnsetType) or matches_any(namespace, allowed):
        return None
    if not namespace:
        return f"names no namespace, and tenant {name}'s objects must be in {listed(allowed)}"
    return f'namespace "{namespace}" is outside tenant {name}\'s namespaces {listed(allowed)}'


def _kind_match(pattern: str, key: ObjectKey) -> bool:
    """Whether a ``GROUP/KIND`` pattern matches the object's group and kind."""
    group, _, kind = pattern.partition("/")
    return fnmatchcase(key.group, group) and fnmatchcase(key.kind, kind)


def _undefined(name: str) -> str:
    return f'tenant "{name}" is not defined in the tenant policy'
