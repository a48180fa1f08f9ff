"""The wire contract: every message driftbus puts on NATS (DESIGN §4–7).

Each message type is a msgspec Struct tagged with its schema and version in the ``schema`` field
(``"driftbus.bundle/v1"``). Decoding checks the tag, so a message of another version or type is
refused with an error naming the field instead of being misread. JSON Schema files generated
from these Structs live in ``schemas/json/`` for non-Python publishers; a test keeps them equal.

SHAs travel as lower-case hex; raw Kubernetes objects travel as JSON objects exactly as given.

Some messages are defined in modules of their own (``schemas.bundle``, ``schemas.fleet``, the
intents in ``schemas.intents``, the planner's audit log in ``schemas.decision``);
``MESSAGE_TYPES`` at the end names every one. The bundle's and the intents' types that were
defined here before are still importable from here; the decision types are imported from
``schemas.decision``.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Final, Literal

import msgspec

from schemas.base import Count as Count
from schemas.base import Message as _Message
from schemas.base import Name as Name
from schemas.base import RawObject as RawObject
from schemas.base import Sha as Sha
from schemas.base import tag as _tag
from schemas.bundle import Bundle as Bundle
from schemas.bundle import BundleControl as BundleControl
from schemas.bundle import BundleOptions as BundleOptions
from schemas.bundle import BundleRef as BundleRef
from schemas.bundle import DriftMode as DriftMode
from schemas.bundle import IgnoreRule as IgnoreRule
from schemas.bundle import JsonPointer as JsonPointer
from schemas.bundle import ObjectStoreRef as ObjectStoreRef
from schemas.bundle import Propagation as Propagation
from schemas.bundle import PruneApproval as PruneApproval
from schemas.bundle import RollbackAnswer as RollbackAnswer
from schemas.bundle import RollbackRequest as RollbackRequest
from schemas.decision import DecisionRecord, DecisionRecords
from schemas.fleet import FleetBundle, RolloutControl, RolloutEvent
from schemas.intents import ApplyIntent as ApplyIntent
from schemas.intents import DeleteIntent as DeleteIntent
from schemas.intents import Impersonation as Impersonation
from schemas.intents import Intent as Intent
from schemas.intents import IntentBatch as IntentBatch
from schemas.intents import Queued as Queued
from schemas.subjects import ObjectKey
from schemas.windows import BundleWindow

# --- watcher → driftbus.server.<cluster>.<key> --------------------------------------------------


class Health(enum.StrEnum):
    READY = "Ready"
    IN_PROGRESS = "InProgress"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class ServerEvent(_Message, frozen=True, tag=_tag("server")):
    """The latest state of an owned object as the watcher saw it, or its tombstone."""

    cluster: Name
    key: ObjectKey
    resource_version: str
    """resourceVersion of the event (of the list that noticed a deletion, for a tombstone)."""
    server_sha: Sha | None
    """None exactly when ``deleted`` is true."""
    deleted: bool = False
    health: Health = Health.UNKNOWN
    health_message: str = ""
    api_version: str = ""
    bundle: str = ""
    """The bundle named by the object's ownership label, if any."""
    keep: bool = False
    """The live object opts out of prune (annotation ``driftbus.dev/prune: disabled``)."""
    retired: bool = False
    """A tombstone of an object that finished its work and that its own controller removes, as
    its manifest asks (a completed Job with ``ttlSecondsAfterFinished``): not re-created until its
    manifest changes, and counted as Ready (docs/drift.md)."""
    observed_at: dt.datetime | None = None
    watcher: str = ""


class ServerFacts(_Message, frozen=True, tag=_tag("server-facts")):
    """Server facts of one cluster sent together (issue 44): what one list page or one burst of
    watch events said, on ``driftbus.server.<cluster>.batch.<id>`` (``server_batch_subject``).
    Each event means exactly what it would alone; a reader folds them in order. The stream keeps
    every batch until a checkpoint of the cluster covers it (``docs/architecture.md``)."""

    cluster: Name
    events: list[ServerEvent]
    watcher: str = ""


# --- applier → driftbus.applied.<cluster>.<key> -------------------------------------------------


class AppliedEvent(_Message, frozen=True, tag=_tag("applied")):
    """The result of a successful server-side apply (or delete) of one object."""

    cluster: Name
    key: ObjectKey
    bundle: Name
    revision: str
    manifest_sha: Sha
    """The desired manifestSHA this apply carried out (may be stale: the planner checks)."""
    apply_sha: Sha | None
    """SHA of the pruned SSA response; None for a delete."""
    resource_version: str
    deleted: bool = False
    applied_at: dt.datetime | None = None
    applier: str = ""
    intent_seq: int = 0
    """Stream sequence of the intent this carried out: a redelivered intent (its ack was lost,
    e.g. NATS restarted) that the same applier already reported is acked without a second
    apply (``applier.reports``)."""


class AppliedFacts(_Message, frozen=True, tag=_tag("applied-facts")):
    """Applied facts of one cluster sent together (issue 44): one applier's report of the
    intents it carried out within a few milliseconds of each other, on
    ``driftbus.applied.<cluster>.batch.<id>``. Each event means exactly what it would alone; the
    stream keeps every batch until a checkpoint of the cluster covers it."""

    cluster: Name
    events: list[AppliedEvent]
    applier: str = ""


# --- applier/planner → driftbus.status.<cluster>.<bundle>.… ------------------------------------


class ObjectPhase(enum.StrEnum):
    PENDING = "Pending"
    """An intent is on its way (new object or changed manifest). Not written since issue 44
    (the bundle's row counts what is not applied yet); rows written before may still say it."""
    APPLIED = "Applied"
    FAILED = "Failed"
    CONFLICT = "Conflict"
    PRUNED = "Pruned"
    DRIFTED = "Drifted"
    """The live object differs from what was applied; a correction is on its way."""
    WAITING = "Waiting"
    """A prerequisite (its CRD, its namespace) is missing; retried until it appears."""
    RETRYING = "Retrying"
    """A transient error (429, 5xx, timeout); retried with backoff until it goes away."""
    KEPT = "Kept"
    """It left the bundle but was not pruned (an annotation, or other bundles' objects in it)."""
    FORBIDDEN = "Forbidden"
    """The API server refused the identity the write was made as (403: RBAC, or an admission
    policy); retried with backoff, since the right may be granted later."""


WORKING_PHASES: Final = frozenset(
    (ObjectPhase.WAITING, ObjectPhase.RETRYING, ObjectPhase.FORBIDDEN)
)
"""Phases of an intent still being worked on: not final, never Ready."""


class ObjectStatus(_Message, frozen=True, tag=_tag("object-status")):
    cluster: Name
    bundle: Name
    revision: str
    key: ObjectKey
    phase: ObjectPhase
    health: Health = Health.UNKNOWN
    message: str = ""
    """Human-readable reason; API error text is scrubbed of Secret values before it lands here."""
    apply_sha: Sha | None = None
    manifest_sha: Sha | None = None
    """The desired manifestSHA this status is about (a failure is for one manifest only)."""
    attempts: Count = 0
    at: dt.datetime | None = None
    trace_id: str = ""


class ObjectRows(_Message, frozen=True, tag=_tag("object-rows")):
    """Object status rows of one bundle sent together (issue 44): an applier's rows of the
    intents it carried out within a few milliseconds of each other, on
    ``driftbus.status.<cluster>.<tenant>.<name>.rows.<id>``, published with its applied report.
    Each row means exactly what it would alone on the object's subject; the newest row of an
    object (by stream sequence, wherever it is) is the object's status."""

    cluster: Name
    bundle: Name
    rows: list[ObjectStatus]
    applier: str = ""


class BundlePhase(enum.StrEnum):
    """Overall phase of a bundle's revision (see ``services.planner.status.bundle_phase``)."""

    RECONCILING = "Reconciling"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    CONFLICT = "Conflict"
    OUT_OF_SYNC = "OutOfSync"
    DELETED = "Deleted"
    """The bundle was deleted (``Bundle.delete``): its objects pruned, the bundle forgotten."""
    PRUNE_HELD = "PruneHeld"
    """The revision is applied, but its deletions wait: it would delete more of the bundle than
    the prune budget lets through at once, or a Namespace or CRD (docs/lifecycle.md). Never
    Ready; ``--allow-prune`` or ``driftbus approve`` lets them through."""


class BundleCounts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    total: Count = 0
    applied: Count = 0
    failed: Count = 0
    ready: Count = 0
    conflicts: Count = 0
    drifted: Count = 0
    """applied, but the live object differs and no correction is on its way"""
    pruning: Count = 0
    """objects that left the revision and are still to be deleted"""
    kept: Count = 0
    """objects that left the revision and were deliberately not pruned"""
    not_declared: Count = 0
    """live objects carrying the bundle's label that none of its revisions applied (a copy of a
    managed object, another's label): reported, never pruned, not in the way of Ready"""


class BundleStatus(_Message, frozen=True, tag=_tag("bundle-status")):
    cluster: Name
    bundle: Name
    revision: str
    phase: BundlePhase
    counts: BundleCounts
    message: str = ""
    failed_objects: list[str] = []
    """``Kind/ns/name: reason`` of objects that keep the bundle from Ready, or that it reports
    (carrying its label, not declared by it), bounded."""
    at: dt.datetime | None = None
    source: str = ""
    """Where the revision came from and what rendered it (``Bundle.source``)."""
    published_at: dt.datetime | None = None
    """When the revision shown was published (``Bundle.published_at``)."""
    suspended: bool = False
    """Reconciliation is suspended (``BundleControl``): nothing of the bundle is written."""
    depends_on: list[str] = []
    """The bundles (full names) this one waits for (``BundleOptions.depends_on``)."""
    rollback_of: str = ""
    """The revision shown was republished by a rollback from this one (``Bundle.rollback_of``)."""
    window: str = ""
    """The sync window holding the writes that keep the bundle ``OutOfSync`` (docs/windows.md):
    nothing changes before it ends ("" when no window holds it)."""
    windows: BundleWindow | None = None
    """The sync windows as they stand for the bundle, whether or not it has writes to hold: the
    one answer to "is this bundle held by a window", which ``driftbus status`` and the status
    page show (null: no window names it)."""


# --- source → driftbus.status.<cluster>.<bundle>.source ------------------------------------------


class SourcePhase(enum.StrEnum):
    PUBLISHED = "Published"
    """The followed ref's commit is the bundle's current revision."""
    FAILED = "Failed"
    """The newest commit could not be fetched or rendered; the last good revision stays."""


class SourceStatus(_Message, frozen=True, tag=_tag("source-status")):
    """What ``driftbus source`` last did for a bundle it follows (one per bundle, replaced)."""

    cluster: Name
    bundle: Name
    url: str
    ref: str
    """What is followed: ``refs/heads/main``, ``refs/tags/v1``, or a semver range."""
    phase: SourcePhase
    commit: str = ""
    """The commit the attempt was about (empty when fetching failed)."""
    revision: str = ""
    """The last revision published from this source (the last good one, after a failure)."""
    message: str = ""
    at: dt.datetime | None = None


# --- applier → driftbus.outcome.<cluster>.<key> ------------------------------------------------


class OutcomeEvent(_Message, frozen=True, tag=_tag("outcome")):
    """What became of an intent that did not end in an applied fact: failed, in conflict, still
    waiting or retrying, or a prune the applier declined. A control input of the planner, kept
    (compacted, no age limit) in its own stream, unlike the user-facing STATUS."""

    cluster: Name
    key: ObjectKey
    bundle: str
    revision: str
    manifest_sha: Sha
    """The manifestSHA of the intent; all zeros for a delete."""
    phase: ObjectPhase
    """Failed, Conflict (final until republished or changed), Waiting, Retrying (still being
    worked on), or Kept (a prune declined at delete time)."""
    message: str = ""
    at: dt.datetime | None = None
    intent_seq: int = 0
    applier: str = ""


# --- watcher/applier → driftbus.member.<cluster>.<role> ------------------------------------------


class KindScope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Whether objects of a kind live in a namespace, as the API server's discovery says."""

    group: str
    kind: str
    namespaced: bool


class MemberHeartbeat(_Message, frozen=True, tag=_tag("member")):
    """A watcher or applier serving a cluster says so every few seconds."""

    cluster: Name
    role: Literal["watcher", "applier"]
    id: str
    at: dt.datetime
    synced: bool = True
    """Watcher: every watch has completed its initial list (prune waits for it)."""
    problems: list[str] = []
    """Watcher: watches that are not running, and why."""
    scopes: list[KindScope] = []
    """Watcher: the scope of every kind it watches that is not built into Kubernetes (the
    planner has no connection to the cluster; it needs these to apply a default namespace)."""


# --- registry -----------------------------------------------------------------------------------

MESSAGE_TYPES: Final[dict[str, type[_Message]]] = {
    "bundle": Bundle,
    "server-event": ServerEvent,
    "server-facts": ServerFacts,
    "applied-event": AppliedEvent,
    "applied-facts": AppliedFacts,
    "apply-intent": ApplyIntent,
    "delete-intent": DeleteIntent,
    "intent-batch": IntentBatch,
    "object-status": ObjectStatus,
    "object-rows": ObjectRows,
    "bundle-status": BundleStatus,
    "bundle-control": BundleControl,
    "rollback-request": RollbackRequest,
    "rollback-answer": RollbackAnswer,
    "prune-approval": PruneApproval,
    "source-status": SourceStatus,
    "decision": DecisionRecord,
    "decision-records": DecisionRecords,
    "outcome": OutcomeEvent,
    "member": MemberHeartbeat,
    "fleet-bundle": FleetBundle,
    "rollout-event": RolloutEvent,
    "rollout-control": RolloutControl,
}
