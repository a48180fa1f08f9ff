"""The tenants file (docs/tenancy.md): which tenants exist, whose identity each one's bundles are
applied with, and the limits on what they may manage.

The wire keys are the user-facing file format (``serviceAccount``, ``clusterScoped``,
``defaultNamespace``, ``clusterSelector``, ``rights.overrideWindows``), so the Structs rename to
camelCase. The same Structs
are what is stored on the bus (``services/tenancy/policy.py`` dumps and reads them). Keys left out
of a file stay out of the stored form (``omit_defaults``), and ``namespaces``/``clusterScoped``
are ``UNSET`` when not written: "omitted" means something different from any value they can be
given, and an empty ``namespaces:`` (null) is refused rather than read as "any namespace".
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec
from msgspec import UNSET, Meta, UnsetType

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_SUBDOMAIN_PART = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL: Final = f"^{_LABEL}$"
"""A namespace's or a tenant's name (the tenant also names a NATS user and subject token)."""
SERVICE_ACCOUNT: Final = rf"^{_LABEL}/{_SUBDOMAIN_PART}(\.{_SUBDOMAIN_PART})*$"
"""``NAMESPACE/NAME`` of a ServiceAccount: a DNS label, then a DNS subdomain."""
NAMESPACE_OR_NONE: Final = f"^({_LABEL})?$"
GROUP_KIND: Final = r"^[^/]*/[^/]+$"
"""A kind pattern: exactly one ``/``, a kind after it."""

TenantName = Annotated[str, Meta(pattern=DNS_LABEL, description="a DNS label")]
Glob = Annotated[str, Meta(min_length=1, max_length=253, description="fnmatch pattern")]
KindPattern = Annotated[
    str,
    Meta(
        pattern=GROUP_KIND,
        max_length=400,
        description='GROUP/KIND, "*" allowed on either side; "" group = core, e.g. "/ConfigMap"',
    ),
]


class KindRules(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Which kinds a tenant may manage: those ``allow`` matches and ``deny`` does not."""

    allow: tuple[KindPattern, ...] = ("*/*",)
    deny: tuple[KindPattern, ...] = ()
    """Wins over ``allow``."""


class Rights(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """What a tenant may ask of the platform beyond its own limits: nothing unless granted."""

    override_windows: bool = False
    """Its revisions may be published with ``--override-window``: written through the
    platform's sync windows. Without it such a revision is refused whole."""
    commit_status_repositories: tuple[Glob, ...] = ()
    """Repositories (``OWNER/REPO``, GitLab's ``GROUP/SUB/PROJECT``; globs, ``*`` matching
    ``/`` too, case-insensitive) on which the platform's commit-status providers may post
    statuses for its bundles. Its own notifications, with its own token, need none."""


class Tenant(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """One tenant: the identity its bundles are applied with and the limits on them."""

    service_account: Annotated[str, Meta(pattern=SERVICE_ACCOUNT, max_length=317)]
    """``NAMESPACE/NAME``: every request for the tenant's bundles impersonates it."""
    namespaces: tuple[Glob, ...] | UnsetType = UNSET
    """Namespaces its objects may be in (globs); unset: any namespace."""
    cluster_scoped: bool | UnsetType = UNSET
    """Whether it may manage cluster-scoped objects; unset: only if ``namespaces`` is unset."""
    default_namespace: Annotated[str, Meta(pattern=NAMESPACE_OR_NONE)] = ""
    """Set on objects of a namespaced kind naming none (``kubectl apply -n``); "" for none."""
    kinds: KindRules = KindRules()
    clusters: tuple[Glob, ...] = ("*",)
    """Clusters it may publish to (globs)."""
    cluster_selector: str = ""
    """Clusters it may publish to, by their registry labels (a kubectl label selector); both
    this and ``clusters`` must admit a cluster. "" admits every cluster ``clusters`` does."""
    rights: Rights = Rights()
    """What it may ask of the platform beyond its limits (none unless granted)."""


class TenantPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The tenants file: tenants by name, and whether bundles of no tenant are refused."""

    lockdown: bool = False
    """Refuse platform bundles (those of no tenant)."""
    tenants: dict[TenantName, Tenant] = {}


ClusterName = Annotated[str, Meta(pattern=DNS_LABEL, description="a cluster's name")]


class TenantCredentials(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The clusters each tenant's NATS publisher (``tenant-<name>``) may publish to, as
    ``driftbus nats-config --tenant NAME=CLUSTER[,CLUSTER] --record`` grants and records them
    (key ``credentials`` of the tenants bucket, written by the admin). The rollout driver holds a
    tenant's fleet placements to it: a fleet revision never reaches a cluster the tenant's own
    credentials could not publish to (docs/tenancy.md)."""

    tenants: dict[TenantName, tuple[ClusterName, ...]] = {}
    """Tenant → the clusters of its NATS publisher. A tenant missing here has no publisher."""
