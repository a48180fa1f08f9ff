"""The planner's audit log: one ``DecisionRecord`` per decision, on
``driftbus.decision.<cluster>.<key>`` (planner → DECISION stream), with the action it took and why.

Every write the planner asks for (and every one it holds back or declines) is recorded here, so
``driftbus why`` and a replay can explain any object's history. Part of the wire contract
(``schemas.messages``, whose registry names it).
"""

from __future__ import annotations

import datetime as dt
import enum

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
