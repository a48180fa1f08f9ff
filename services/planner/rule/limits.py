"""A revision held to its tenant's limits (pure): refused whole when one object is outside them,
and who its writes are made as.

The planner calls ``check`` on every revision before any intent, and ``outside`` on the revisions
in force when the policy changes (what is newly outside is reported, never pruned); ``driftbus
plan`` calls ``check`` too, so a refusal is seen before anything is published. The rules
themselves are ``services.tenancy.policy``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from schemas.messages import Bundle, Impersonation
from schemas.subjects import ObjectKey
from schemas.tenants import TenantPolicy
from services.core.manifest import ManifestError
from services.core.scope import Scopes, UnknownScope
from services.tenancy import policy as tenancy
from services.tenancy.clusters import NOT_READ, Labels
from services.tenancy.rights import override_refusal

MAX_NAMED = 10
"""Objects named in one refusal message (the count says how many there are)."""


class PolicyRefused(ManifestError):
    """The revision is outside its tenant's limits; it waits for a policy that allows it."""


def with_tenant_defaults(bundle: Bundle, policy: TenantPolicy, labels: Labels = NOT_READ) -> Bundle:
    """The bundle refused outright (unknown tenant, cluster not allowed, lockdown,
    ``--override-window`` without the tenant's right) or with its tenant's default namespace
    filled in where the publisher gave none. ``labels``: the cluster's registry labels, which a
    tenant's ``clusterSelector`` must match (None: unknown, which no selector matches;
    ``NOT_READ``: only the ``clusters`` globs are checked, as ``plan`` does when it cannot read
    the registry)."""
    if why := tenancy.bundle_refusal(policy, bundle.bundle, bundle.cluster, labels):
        raise PolicyRefused(why)
    if bundle.options.override_window and (why := override_refusal(policy, bundle.bundle)):
        raise PolicyRefused(why)  # whole: held by the window instead, it would go in unasked
    default = tenancy.default_namespace(policy, bundle.bundle)
    if not default or bundle.options.namespace:
        return bundle
    options = msgspec.structs.replace(bundle.options, namespace=default)
    return msgspec.structs.replace(bundle, options=options)


def scoped(keys: Iterable[ObjectKey], scopes: Scopes) -> Iterator[tuple[ObjectKey, bool]]:
    """Each key with whether its kind is namespaced: keys are normalised (a cluster-scoped
    object's stray namespace dropped), so a namespace means namespaced; without one, discovery
    says (an unknown kind counts as cluster-scoped, the stricter reading). Lazy: a platform
    bundle's objects are never looked at (100,000 of them were 0.2 s of a planner's loop)."""
    return ((k, bool(k.namespace) or scopes.namespaced(k.group, k.kind) is True) for k in keys)


def check(bundle: Bundle, keys: Iterable[ObjectKey], scopes: Scopes, policy: TenantPolicy) -> None:
    """PolicyRefused naming every object of the revision outside its tenant's limits; for a
    tenant's bundle, UnknownScope while a kind's scope is unknown (a namespace in the manifest
    proves nothing: a cluster-scoped kind would pass as namespaced), so it waits for one."""
    keys = list(keys)
    if tenancy.tenant_of(bundle.bundle):
        unknown = sorted(
            {f"{k.kind}.{k.group}" for k in keys if scopes.namespaced(k.group, k.kind) is None}
        )
        if unknown:
            raise UnknownScope(
                f"the scope of {', '.join(unknown)} is not known yet (a tenant's objects are "
                "held to its limits by scope); the revision waits for the cluster's discovery"
            )
    if problems := tenancy.object_refusals(policy, bundle.bundle, scoped(keys, scopes)):
        raise PolicyRefused(refusal(bundle.bundle, problems))


def refusal(bundle: str, problems: list[str]) -> str:
    """One line naming the first ``MAX_NAMED`` objects outside the limits, and how many."""
    named = "; ".join(sorted(problems)[:MAX_NAMED])
    more = f" (and {len(problems) - MAX_NAMED} more)" if len(problems) > MAX_NAMED else ""
    tenant = tenancy.tenant_of(bundle)
    return f"{len(problems)} objects outside tenant {tenant}'s limits: {named}{more}"


def outside(
    bundle: str,
    cluster: str,
    keys: Iterable[ObjectKey],
    scopes: Scopes,
    policy: TenantPolicy,
    labels: Labels = NOT_READ,
) -> list[str]:
    """What of a revision in force the policy no longer allows (``[]`` when all is allowed)."""
    if why := tenancy.bundle_refusal(policy, bundle, cluster, labels):
        return [why]
    return sorted(tenancy.object_refusals(policy, bundle, scoped(keys, scopes)))


def identity(policy: TenantPolicy, bundle: str) -> Impersonation | None:
    """Whom a bundle's writes are made as: its tenant's ServiceAccount; None for driftbus.

    No groups are sent: for a ServiceAccount user the API server adds its fixed groups itself
    (``system:serviceaccounts``, ``…:<namespace>``, ``system:authenticated``), and the applier
    then needs ``impersonate`` on that one ServiceAccount only, not on groups."""
    who = tenancy.impersonation(policy, bundle)
    return None if who is None else Impersonation(user=who.user)
