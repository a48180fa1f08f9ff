"""Which clusters a tenant may use (docs/tenancy.md): its ``clusters`` globs and its
``clusterSelector`` over the labels of the cluster registry; both must admit a cluster.

``cluster_refusal`` is the whole rule for one tenant and one cluster, the tenant policy's other
bundle-wide rules included (an undefined tenant, platform bundles under lockdown): the rollout
driver asks it of every cluster a fleet bundle names, and names the clusters refused in the
rollout's status rather than leaving them out silently. ``tenancy.bundle_refusal`` asks
``cluster_problem`` of each bundle the planner takes, with the cluster's labels when its caller
has them. ``credentials_refusal`` holds a tenant's fleet placements to the clusters of its NATS
publisher as the admin recorded them (the driver publishes for every tenant, so the NATS server
cannot). Pure: the registry and the record are read by the caller.

Labels the registry cannot give (no entry, removed, unreadable) are None, never ``{}``: a tenant
with a ``clusterSelector`` may not use such a cluster, whatever the selector (``env!=prod`` too,
which a known cluster without ``env`` matches). ``NOT_READ`` is a caller that did not read
them (``plan`` without the registry): only the ``clusters`` globs are checked then.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Final, Literal

from schemas.tenants import Tenant, TenantCredentials, TenantPolicy
from services.clusters.selector import Selector, SelectorError, parse_selector, selects


class _NotRead(enum.Enum):
    NOT_READ = "not read"


NOT_READ: Final = _NotRead.NOT_READ
"""Labels the caller did not read (not "unknown": the registry was not asked)."""

Labels = Mapping[str, str] | None | Literal[_NotRead.NOT_READ]
"""A cluster's registry labels; None: unknown to the registry; ``NOT_READ``: not asked."""


def cluster_refusal(
    policy: TenantPolicy, tenant: str, cluster: str, labels: Mapping[str, str] | None
) -> str | None:
    """Why the bundles of ``tenant`` ("": the platform's) may not be placed in ``cluster``,
    whose registry labels are ``labels`` (None: unknown), in one line naming both, or None if
    they may."""
    if not tenant:
        if policy.lockdown:
            return (
                f'bundles of no tenant may not publish to cluster "{cluster}": the tenant policy '
                "is in lockdown (name the bundle TENANT/NAME)"
            )
        return None
    rules = policy.tenants.get(tenant)
    if rules is None:
        return (
            f'tenant "{tenant}" may not publish to cluster "{cluster}": it is not defined in the '
            "tenant policy"
        )
    return cluster_problem(tenant, rules, cluster, labels)


def cluster_problem(name: str, tenant: Tenant, cluster: str, labels: Labels) -> str | None:
    """Why tenant ``name`` (its rules ``tenant``) may not publish to ``cluster``, or None.
    ``labels`` None: unknown to the registry, so a ``clusterSelector`` admits nothing;
    ``NOT_READ``: not read by the caller, so only the ``clusters`` globs are checked."""
    if not any(fnmatchcase(cluster, p) for p in tenant.clusters):
        clusters = f"[{', '.join(tenant.clusters)}]"
        return f'tenant {name} may not publish to cluster "{cluster}" (its clusters: {clusters})'
    text = tenant.cluster_selector
    if not text or labels is NOT_READ:
        return None
    try:
        selector = _parsed(text)
    except SelectorError as exc:  # a policy checked on reading never has one; fail closed
        return f'tenant {name} may not publish to cluster "{cluster}" ({exc})'
    if selects(selector, labels):
        return None
    if labels is None:
        return (
            f'tenant {name} may not publish to cluster "{cluster}" (its labels are unknown: it '
            f'has no readable registry entry, so its clusterSelector "{text}" admits nothing)'
        )
    return (
        f'tenant {name} may not publish to cluster "{cluster}" (its labels do not match its '
        f'clusterSelector "{text}")'
    )


def selector_problem(text: str) -> str:
    """Why a tenant's ``clusterSelector`` cannot be read ("" if it can)."""
    try:
        _parsed(text)
    except SelectorError as exc:
        return str(exc)
    return ""


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> Selector:
    """A tenant's selector, parsed once: the driver asks of every cluster of every fleet."""
    return parse_selector(text)


def credentials_refusal(
    credentials: TenantCredentials | None, tenant: str, cluster: str
) -> str | None:
    """Why the rollout driver may not place ``tenant``'s fleet bundle in ``cluster``: the
    tenant's NATS publisher could not publish there itself (one line naming both), or None.
    ``credentials`` None: none recorded (a bus without tenant publishers), nothing to hold
    to. Platform bundles ("") are not a tenant's."""
    if credentials is None or not tenant:
        return None
    clusters = credentials.tenants.get(tenant)
    if clusters is None:
        return (
            f'tenant {tenant} may not publish to cluster "{cluster}": its NATS credentials name '
            "no cluster (nats-config --tenant records none for it)"
        )
    if cluster in clusters:
        return None
    return (
        f'tenant {tenant} may not publish to cluster "{cluster}": its NATS credentials allow '
        f"only [{', '.join(clusters)}]"
    )
