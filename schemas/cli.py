"""What the command line prints with ``-o json``, as typed Structs (``schemas/json/cli-*``):
numbers are numbers, times RFC 3339, absent values null — never a table's display strings."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import msgspec

from schemas.windows import BundleWindow as BundleWindow


class FleetSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The rollout of a fleet bundle, on each cluster's row of it (docs/fleet.md)."""

    phase: str
    """Progressing, Paused, Halted, RollingBack, RolledBack, RollbackFailed, Complete or
    Deleted."""
    revision: str
    """The revision being rolled out (the cluster's own row says which one it is on)."""
    step: int
    """The current step, from 1."""
    steps: int
    ready: int
    """Clusters Ready on ``revision``."""
    total: int
    """Clusters of the fleet."""


class BundleRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One bundle of ``driftbus bundles -o json`` (the output is a JSON array of these)."""

    cluster: str
    bundle: str
    """Full name: ``name``, or ``tenant/name`` for a tenant's."""
    phase: str
    """Reconciling, Ready, Degraded, Failed, Conflict, OutOfSync or Deleted."""
    revision: str
    published_at: dt.datetime | None
    age_seconds: float | None
    """Seconds since the revision shown was published."""
    objects: int
    applied: int
    ready: int
    failed: int
    suspended: bool
    depends_on: list[str]
    rollback_of: str | None
    """The revision that was in force when this one was put back by ``driftbus rollback``."""
    message: str
    updated_at: dt.datetime | None
    """When the status last changed."""
    fleet: FleetSummary | None = None
    """Set when the bundle is a fleet bundle's placement in this cluster: its rollout."""


class ObjectRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One object of ``driftbus status --bundle B -o json``."""

    api_version: str
    """As last seen live ("" before the watcher saw it)."""
    group: str
    kind: str
    namespace: str
    name: str
    phase: str
    """The object's phase (Pending, Applied, Failed, Conflict, Drifted, Kept, Pruned, …)."""
    health: str
    """Live health (Ready, InProgress, Failed, Unknown), or Deleted."""
    message: str
    revision: str
    last_change: dt.datetime | None


class StatusDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus status --bundle B -o json``."""

    bundle: BundleRow | None
    objects: list[ObjectRow]
    git_source: dict[str, Any] | None
    """The Git source's last report (``schemas/json/source-status.schema.json``), if followed."""
    windows: BundleWindow | None = None
    """The sync windows for the bundle in this cluster (null: no window names it)."""
    windows_unusable: str = ""
    """Why the latest windows stored on the bus are unusable (the planners keep the last good
    ones, which ``windows`` describes); "" when they are usable."""


class WhyRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One decision of ``driftbus why … -o json`` (the output is an array, oldest first)."""

    at: dt.datetime | None
    api_version: str
    """As last seen live ("" when the watcher never saw the object)."""
    api_group: str
    kind: str
    namespace: str
    name: str
    bundle: str
    revision: str
    action: str
    """hit, apply, delete, keep or hold."""
    reason: str
    made_as: str | None
    """Whom a write was made as (a tenant's ServiceAccount, or ``driftbus``); null for what
    wrote nothing."""
    manifest_sha: str | None
    last_applied_manifest_sha: str | None
    apply_sha: str | None
    server_sha: str | None
    planner: str
    window: str = ""
    """The sync window that held this decision, or ``override: NAME`` for a write
    ``--override-window`` let through ("" when no window was in force; docs/windows.md)."""


class PlannerRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    planner: str
    clusters: list[str]
    heartbeat_at: dt.datetime
    heartbeat_age_seconds: float


class ClaimRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cluster: str
    planner: str | None
    """null: released."""
    fencing_token: int
    since: dt.datetime
    since_seconds: float


class ShardsDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus shards -o json``: the planner replicas and who plans which cluster."""

    planners: list[PlannerRow]
    clusters: list[ClaimRow]


PlanAction = Literal["apply", "delete", "keep", "unchanged", "error"]


class PlanChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One field that differs between the live object and the server's dry-run of the manifest
    (Secret values are ``***``)."""

    op: Literal["add", "remove", "change"]
    path: str
    """Dotted path into the object, list items as ``[i]``: ``spec.template.spec.containers[0]``."""
    old: Any = None
    new: Any = None


class PlanObject(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    api_version: str
    """``apps/v1``; "" only for an object to delete whose version was never seen."""
    group: str
    kind: str
    namespace: str
    name: str
    action: PlanAction
    reason: str
    """The planner's reason (``new``, ``manifest``, ``drift``, ``prune``, ``annotation``…) or,
    for ``error``, what the server answered to the dry-run."""
    changes: list[PlanChange]
    ignored: list[str]
    """JSON pointers of fields neither applied nor compared."""


class PlanSummary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    apply: int
    delete: int
    keep: int
    unchanged: int
    error: int


class PlanDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus plan -o json``: what a publish would do, and why."""

    cluster: str
    bundle: str
    changes: bool
    """Anything to apply or delete (``--exit-code`` 2)."""
    errors: bool
    """An object the server refuses in a dry-run (``--exit-code`` 1)."""
    force: bool
    """Planned as a publish with ``--force`` (field conflicts taken over)."""
    summary: PlanSummary
    objects: list[PlanObject]


class FleetPlanCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Objects by what a fleet publish would do to them (the planner's reasons)."""

    new: int
    """Never applied by driftbus (``new``): created, or taken over."""
    changed: int
    """Applied before, the manifest differs (``manifest``; ``retry`` after a failure)."""
    drift: int
    """Changed or deleted by someone else since driftbus applied it: restored."""
    prune: int
    """Left out of the revision (or the cluster leaves the fleet): deleted."""
    unchanged: int
    keep: int
    """Left out of the revision but kept (not applied by this bundle, the keep annotation,
    ``--no-prune``)."""
    error: int
    """Refused by the server in a ``--diff`` dry-run."""


class FleetPlanCluster(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cluster: str
    labels: dict[str, str]
    step: int | None
    """The rollout step it falls in (1-based; the implicit last step is the number of steps
    plus one); null: not placed (``refused`` by the tenant's clusters) or ``leaving``."""
    leaving: bool
    """The bundle is placed there and the targeting no longer names it."""
    refused: str
    """Why nothing would be placed or applied there ("" when it would): the tenant policy, a
    label a substituted variable needs."""
    held: str
    """What holds its writes now ("" when nothing does): a sync window, or, for a cluster
    ``leaving``, the fleet's prune budget (more of the bundle's clusters leave at once than it
    lets go: its prune waits for ``driftbus approve``)."""
    values: dict[str, str]
    """Each ``${cluster.…}`` variable of the manifests with its value there (``--substitute``)."""
    summary: FleetPlanCounts
    objects: list[PlanObject]
    """Only the objects that would change (or be kept, or refused): unchanged ones are counted."""


class FleetPlanDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus plan -o json`` for a fleet (a selector, several clusters or a rollout flag):
    what a fleet publish would do to each cluster, from the recorded state alone."""

    bundle: str
    selector: str
    clusters_named: list[str]
    unregistered: list[str]
    """Clusters named with ``--cluster`` that are not in the registry (nothing is placed)."""
    steps: list[str]
    """The rollout steps given; each cluster's ``step`` indexes them (the last: the fleet)."""
    diff: bool
    """Field-level changes computed by server-side dry-run (``--diff``); else from the bus."""
    changes: bool
    """Anything to apply or delete on any cluster (``--exit-code`` 2)."""
    errors: bool
    """A refusal or a dry-run error on some cluster (``--exit-code`` 1)."""
    summary: FleetPlanCounts
    clusters: list[FleetPlanCluster]


class BinaryVersion(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    version: str
    """The pinned version driftbus builds it at (``tools/go/``)."""
    path: str | None
    """Where it is found (a cache build, ``PATH``, ``KUBEBUILDER_ASSETS``); null: not built."""


class VersionDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus version -o json``."""

    driftbus: str
    python: str
    binaries: list[BinaryVersion]


class UpCluster(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One cluster ``driftbus up`` serves."""

    name: str
    labels: dict[str, str]
    """What its watcher registers it with (``--cluster NAME:KEY=VALUE,…``)."""
    context: str | None
    """Its context in ``kubeconfig`` (a local cluster's is its name; null: the current one)."""


class UpInfo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus up -o json``: one line describing the running stack, once it runs."""

    cluster: str
    """The first cluster: every command's default ``--cluster``."""
    clusters: list[UpCluster]
    """Every cluster it serves, in the order given (one control plane, watcher and appliers
    each; one NATS and planner for all)."""
    nats_url: str
    kubeconfig: str
    """One file for all clusters: a context per cluster."""
    workdir: str
    pid: int
    """The ``up`` process: stop it (SIGINT/SIGTERM, or ``driftbus down``) to stop everything."""
    services: dict[str, int]
    """Each service's name and pid."""
    logs: str
    context: str
    """The context file commands read to find this stack."""
    ui: str | None = None
    """The status page's URL (null: no page)."""
