"""The notifications file (docs/notifications.md): where ``driftbus notify`` sends events, and
which events.

``providers`` say where (a generic webhook, a Slack- or Teams-compatible incoming webhook, or
Git commit statuses on GitHub or GitLab), ``alerts`` say what (bundles, tenants, clusters, event
kinds) goes to which providers. Secrets (a chat webhook's URL, an API token, a webhook's HMAC
key) are never in the file: it names files the service reads (``urlFile``, ``tokenFile``,
``secretFile``), so what is stored on the bus and shown by ``driftbus notify show`` holds only
their paths.

The wire keys are the file's (camelCase); the same Structs are what is stored on the bus, one
entry per configuration (the platform's, and each tenant's).
"""

from __future__ import annotations

import enum
from typing import Annotated, Final

import msgspec
from msgspec import Meta

NAME: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
Name = Annotated[str, Meta(pattern=NAME, description="a DNS label")]
Glob = Annotated[str, Meta(min_length=1, max_length=253, description="fnmatch pattern")]
Path = Annotated[str, Meta(min_length=1, max_length=4096, description="a file's path")]


class ProviderType(enum.StrEnum):
    WEBHOOK = "webhook"
    """A JSON body (the event), signed with HMAC-SHA256 when ``secretFile`` is given."""
    SLACK = "slack"
    """A Slack-compatible incoming webhook: ``{"text": ..., "blocks": [...]}``."""
    TEAMS = "teams"
    """A Teams-compatible incoming webhook (Workflows): an Adaptive Card message."""
    GITHUB = "github"
    """GitHub commit statuses: ``POST /repos/{owner}/{repo}/statuses/{sha}``."""
    GITLAB = "gitlab"
    """GitLab commit statuses: ``POST /api/v4/projects/{id}/statuses/{sha}``."""


class EventKind(enum.StrEnum):
    """What happened, as alerts name it."""

    READY = "Ready"
    """A bundle's revision is applied and healthy in a cluster."""
    FAILED = "Failed"
    """A bundle's revision failed (or conflicts with another field manager) in a cluster."""
    DEGRADED = "Degraded"
    """A bundle's revision was applied but an object is not healthy."""
    PROGRESSING = "Progressing"
    """A new revision is being applied (a commit status ``pending``); not sent unless named."""
    PRUNE_HELD = "PruneHeld"
    """A revision's deletions wait for an approval (the prune budget: ``driftbus approve``);
    the rest of it is applied."""
    DRIFT_CORRECTED = "DriftCorrected"
    """An object changed or deleted by hand was written back."""
    ROLLOUT_STEP = "RolloutStep"
    """A fleet bundle's rollout moved: started, a step, baked, halted, rolling back, rolled
    back, rollback failed, complete."""


DEFAULT_EVENTS: Final = (
    EventKind.READY,
    EventKind.FAILED,
    EventKind.DEGRADED,
    EventKind.PRUNE_HELD,
    EventKind.DRIFT_CORRECTED,
    EventKind.ROLLOUT_STEP,
)
"""The kinds an alert naming none sends (every kind but ``Progressing``)."""


class Provider(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """Where messages go. Secrets come from files the service reads when it sends."""

    name: Name
    type: ProviderType
    url: str = ""
    """``webhook`` only: the address, when it is no secret (else ``urlFile``)."""
    url_file: Path | None = None
    """A file holding the webhook's address (``webhook``, ``slack``, ``teams``: a chat
    webhook's URL is its credential, so those take only this)."""
    secret_file: Path | None = None
    """``webhook``: the HMAC-SHA256 key the body is signed with (``X-Driftbus-Signature``)."""
    token_file: Path | None = None
    """``github``, ``gitlab``: the API token."""
    api_url: str = ""
    """``github``: default https://api.github.com (GitHub Enterprise: https://HOST/api/v3);
    ``gitlab``: default https://gitlab.com."""
    repository: str = ""
    """``github``: ``OWNER/REPO``; ``gitlab``: the project's id or ``GROUP/PROJECT`` path.
    Default: read from the URL the bundle was published from."""
    context: str = ""
    """The commit status's context (GitHub) or name (GitLab); default
    ``driftbus/<cluster>/<bundle>``."""
    target_url: str = ""
    """The commit status's link (e.g. the status page)."""


class Alert(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """Which events go to which providers: every filter given must admit an event."""

    providers: tuple[Name, ...]
    bundles: tuple[Glob, ...] = ()
    """Globs over bundles' full names (``TENANT/NAME``, or ``NAME`` of a platform bundle);
    none: every bundle the configuration may see."""
    tenants: tuple[Glob, ...] = ()
    """Globs over tenant names ("" is the platform's); none: any."""
    clusters: tuple[Glob, ...] = ()
    """Globs over cluster names; none: any. A rollout's event has the clusters it concerns."""
    cluster_selector: str = ""
    """A label selector over the cluster registry (``env=prod,tier!=edge``); "" admits all."""
    events: tuple[EventKind, ...] = ()
    """Event kinds; none: ``DEFAULT_EVENTS``."""


class Limits(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """De-duplication and rate limits of a configuration's providers."""

    dedupe_seconds: Annotated[float, Meta(ge=0, le=86400)] = 300.0
    """A repeat of an event already sent (same provider, cluster, bundle, kind, revision and
    object) within this many seconds is dropped: a flapping object sends one message."""
    per_minute: Annotated[int, Meta(ge=1, le=10000)] = 20
    """At most this many messages per provider in any minute; the excess is dropped (logged)."""


class NotifyConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The notifications file: providers, alerts, limits."""

    providers: tuple[Provider, ...] = ()
    alerts: tuple[Alert, ...] = ()
    limits: Limits = Limits()


class NotifyEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One configuration in force, as ``driftbus notify show -o json`` prints it."""

    tenant: str
    """"" for the platform's configuration."""
    key: str
    """Its key in the ``driftbus-notify`` bucket: ``platform`` or ``tenant.<tenant>``."""
    config: NotifyConfig


class NotifyShow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus notify show -o json``: the configurations in force (paths of secret files,
    never their content)."""

    configurations: list[NotifyEntry]
