"""Which providers of a configuration an event goes to (pure).

An event goes to a provider when some alert naming the provider admits it: every filter the
alert gives (bundles, tenants, clusters, clusterSelector, events) must. And never beyond the
configuration's tenant: a tenant's configuration is sent only events of that tenant's bundles,
whatever its alerts say (``apply`` refused filters reaching further; this holds again here).

And the platform's token posts a commit status for a tenant's bundle only on a repository the
tenant's policy grants (``rights.commitStatusRepositories``, :func:`platform_token_refusal`):
the repository comes from the bundle's ``source``, which its publisher writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase

from schemas.notify import DEFAULT_EVENTS, Alert, NotifyConfig, Provider
from schemas.tenants import TenantPolicy
from services.clusters.selector import SelectorError, parse_selector, selects
from services.notify.events import Event
from services.notify.render import commit_status_repository
from services.tenancy.rights import commit_status_refusal

Labels = Callable[[str], Mapping[str, str] | None]
"""A cluster's registry labels (None when unknown: not registered, removed or unreadable, which
no ``clusterSelector`` matches)."""


def _any(globs: tuple[str, ...], value: str) -> bool:
    return any(fnmatchcase(value, g) for g in globs)


def in_scope(tenant: str, event: Event) -> bool:
    """Whether a configuration of ``tenant`` ("" the platform's) may be told of ``event``."""
    return not tenant or event.tenant == tenant


def admits(alert: Alert, event: Event, labels: Labels) -> bool:
    """Whether every filter of ``alert`` admits ``event``."""
    if event.kind not in (alert.events or DEFAULT_EVENTS):
        return False
    if alert.bundles and not _any(alert.bundles, event.bundle):
        return False
    if alert.tenants and not _any(alert.tenants, event.tenant):
        return False
    where = event.where
    if alert.clusters and not any(_any(alert.clusters, c) for c in where):
        return False
    if alert.cluster_selector:
        try:
            selector = parse_selector(alert.cluster_selector)
        except SelectorError:
            return False  # checked at apply: a stored one that is not admits nothing
        if not any(selects(selector, labels(c)) for c in where):
            return False
    return True


def needs_labels(config: NotifyConfig) -> bool:
    """Whether any alert selects clusters by label (the registry must then be read)."""
    return any(a.cluster_selector for a in config.alerts)


def providers_for(config: NotifyConfig, tenant: str, event: Event, labels: Labels) -> list[str]:
    """The names of the providers ``event`` goes to, in the order the file defines them."""
    if not in_scope(tenant, event):
        return []
    wanted = {p for a in config.alerts if admits(a, event, labels) for p in a.providers}
    return [p.name for p in config.providers if p.name in wanted]


def platform_token_refusal(
    tenant: str, provider: Provider, event: Event, policy: TenantPolicy | None
) -> str | None:
    """Why the provider of a configuration of ``tenant`` may not tell ``event`` (a commit
    status with the platform's token, on a repository the event's tenant is not granted), or
    None. ``policy`` None: not known, so no tenant's bundle is granted anything. A tenant's own
    providers use its own token: they need no right."""
    if tenant:
        return None
    repository = commit_status_repository(provider, event)
    if repository is None:
        return None
    return commit_status_refusal(policy, event.bundle, repository)
