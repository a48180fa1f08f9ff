"""The planner's audit log: one ``DecisionRecord`` per decision, on
``driftbus.decision.<cluster>.<key>`` (planner → DECISION stream), with the action it took and why.

Every write the planner asks for (and every one it holds back or declines) is recorded here, so
``driftbus why`` and a replay can explain any object's history. Part of the wire contract
(``schemas.messages``, whose registry names it).
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated

import msgspec

from schemas.base import Message, Name, Sha, tag
from schemas.subjects import ObjectKey


class DecisionAction(enum.StrEnum):
    HIT = "hit"
    APPLY = "apply"
    DELETE = "delete"
    KEEP = "keep"
    """An object left its bundle but prune=false (or it is not ours): left in place."""
    HOLD = "hold"
    """A write the rule asks for, not sent: the bundle is suspended or waits for a bundle it
    depends on. Decided again when the hold ends."""


class DecisionReason(enum.StrEnum):
    HIT = "hit"
    NEW = "new"
    MANIFEST = "manifest"
    DRIFT = "drift"
    DELETED = "deleted"
    RETRY = "retry"
    RESEND = "resend"
    """The intent sent earlier got no outcome in time (lost): sent again."""
    PRUNE = "prune"
    NOT_OWNED = "not-owned"
    NOT_DECLARED = "not-declared"
    """Kept: the live object carries the bundle's label, but no revision of the bundle was ever
    applied to it (a copy of a managed object, another's label): not in its inventory."""
    PRUNE_DISABLED = "prune-disabled"
    ANNOTATION = "annotation"
    """Kept: the live object carries ``driftbus.dev/prune: disabled``."""
    IN_USE = "in-use"
    """Kept: a Namespace or CRD that still holds objects of other bundles (or desired ones)."""
    SUSPENDED = "suspended"
    """Held: the bundle is suspended (``driftbus suspend``)."""
    DEPENDENCIES = "dependencies"
    """Held: a bundle of ``depends_on`` is not Ready."""
    WINDOW = "window"
    """Held: a deny sync window is in force, or no allow window is (docs/windows.md)."""
    WAVE = "wave"
    """Held: an earlier sync wave or hook phase of the bundle's revision is not done yet
    (docs/hooks.md)."""
    PRUNE_BUDGET = "prune-budget"
    """Held: the revision would delete more of the bundle than the prune budget lets through at
    once, or a Namespace or CRD; its deletions wait for ``--allow-prune`` or ``driftbus approve``
    (docs/lifecycle.md)."""
    HOOK = "hook"
    """A hook of the revision run (applied), or deleted by its ``hook-delete-policy``."""


class DecisionRecord(Message, frozen=True, tag=tag("decision")):
    """One planner decision, appended to the audit log so any write can be explained by replay."""

    cluster: Name
    key: ObjectKey
    bundle: str
    revision: str
    action: DecisionAction
    reason: DecisionReason
    manifest_sha: Sha | None = None
    last_applied_manifest_sha: Sha | None = None
    apply_sha: Sha | None = None
    server_sha: Sha | None = None
    at: dt.datetime | None = None
    planner: str = ""
    identity: str = ""
    """Whom a write was made as: the tenant's ServiceAccount user, "" for driftbus's own."""
    window: str = ""
    """The sync window that held this decision, or that ``--override-window`` overrode
    (``override: NAME``); "" when no window was in force."""
    inputs: DecisionInputs | None = None
    """What the decision rule decided from (``driftbus replay`` re-runs it); None in records
    written before the inputs were kept, and for decisions the rule does not make (a hook's
    delete policy)."""


class DecisionRecords(Message, frozen=True, tag=tag("decision-records")):
    """Decision records of one cluster sent together (issue 44): those a planner made within a
    moment of each other whose objects share a shelf (``schemas.subjects.decision_shelf``), on
    ``driftbus.decision.<cluster>.batch.<shelf>.<id>``. Each record means exactly what it would
    alone; ``driftbus why`` reads one shelf, not the whole log."""

    cluster: Name
    records: list[DecisionRecord]
    planner: str = ""


# The inputs of a decision: the planner's entry for the object before the fact, the fact, the
# hold. Field names are those of ``services.planner.rule.entry`` (``Entry`` and each event), so
# the planner converts them field by field. Defaults are left out on the wire, and a SHA equal
# to one of the record's own is written as a reference to it: most inputs repeat them.

ShaRef = Annotated[
    str,
    msgspec.Meta(
        pattern="^([0-9a-f]{64}|@(manifest_sha|last_applied_manifest_sha|apply_sha|server_sha))$",
        description="SHA-256 in lower-case hex, or @FIELD: the value of the record's FIELD",
    ),
]


class _Kept(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=False):
    """Base of the recorded inputs: compact (defaults omitted), and readable by an older build."""


class KeptEntry(_Kept, frozen=True):
    """``rule.entry.Entry`` before the fact, its key aside (the record's ``key``)."""

    bundle: str = ""
    revision: str = ""
    manifest_sha: ShaRef | None = None
    prune: bool = True
    correct_drift: bool = True
    applied_manifest_sha: ShaRef | None = None
    apply_sha: ShaRef | None = None
    applied_rv: int = 0
    applied_bundle: str = ""
    applied_revision: str = ""
    server_sha: ShaRef | None = None
    server_deleted: bool = False
    server_rv: int = 0
    owner_bundle: str = ""
    api_version: str = ""
    keep: bool = False
    server_retired: bool = False
    inflight: ShaRef | None = None
    """manifestSHA of the intent in flight; 64 zeros for a delete (``DELETE_INFLIGHT``)."""
    inflight_at: float = 0.0
    failed: ShaRef | None = None
    failed_at: float = 0.0
    applied_at: float = 0.0


class KeptDesired(_Kept, frozen=True, tag_field="kind", tag="desired"):
    """A bundle publish declared the object (``rule.entry.Desired``)."""

    bundle: str
    revision: str
    manifest_sha: ShaRef
    prune: bool = True
    correct_drift: bool = True


class KeptRemoved(_Kept, frozen=True, tag_field="kind", tag="removed"):
    """The object left its bundle's revision (``rule.entry.Removed``)."""

    bundle: str
    revision: str
    prune: bool = True
    in_use: str = ""


class KeptObserved(_Kept, frozen=True, tag_field="kind", tag="observed"):
    """A watcher's server fact (``rule.entry.Observed``)."""

    resource_version: int
    server_sha: ShaRef | None = None
    deleted: bool = False
    owner_bundle: str = ""
    api_version: str = ""
    keep: bool = False
    retired: bool = False


class KeptApplied(_Kept, frozen=True, tag_field="kind", tag="applied"):
    """An applier's applied fact (``rule.entry.Applied``)."""

    manifest_sha: ShaRef
    apply_sha: ShaRef | None
    resource_version: int
    deleted: bool = False
    at: float = 0.0
    bundle: str = ""
    revision: str = ""


class KeptFailed(_Kept, frozen=True, tag_field="kind", tag="failed"):
    """An applier gave up (``rule.entry.Failed``)."""

    manifest_sha: ShaRef
    at: float = 0.0


class KeptDeclined(_Kept, frozen=True, tag_field="kind", tag="declined"):
    """An applier did not delete (``rule.entry.Declined``)."""

    reason: DecisionReason = DecisionReason.NOT_OWNED


class KeptResend(_Kept, frozen=True, tag_field="kind", tag="resend"):
    """The intent in flight got no word in time (``rule.entry.Resend``)."""


class KeptRelease(_Kept, frozen=True, tag_field="kind", tag="release"):
    """The bundle's hold ended (``rule.entry.Release``)."""


KeptEvent = (
    KeptDesired
    | KeptRemoved
    | KeptObserved
    | KeptApplied
    | KeptFailed
    | KeptDeclined
    | KeptResend
    | KeptRelease
)


class DecisionInputs(_Kept, frozen=True):
    """Everything ``rule.decide`` read to make one decision: ``step(entry, event, hold=hold)``,
    or with no ``event`` the evaluation of every entry once the planner's rebuild completed
    (``reevaluate(entry, hold=hold)``)."""

    entry: KeptEntry
    event: KeptEvent | None = None
    hold: DecisionReason | None = None
    """Why the bundle's writes waited (``step``'s ``hold``): a write became a ``hold``."""
