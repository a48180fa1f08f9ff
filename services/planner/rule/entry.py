"""What the planner knows about one object (``Entry``) and the events that change it: the
pure records that ``decide`` folds, apart from the rule itself.

``Entry`` holds three views of an object (desired from BUNDLES, last apply from APPLIED, live
from SERVER) and the in-flight bookkeeping; each event is one fact, already decoded (``facts``
reads the SERVER, APPLIED and OUTCOMES messages into them). All immutable: a step returns a new
entry.
"""

from __future__ import annotations

import dataclasses

import msgspec

from schemas.decision import DecisionReason
from schemas.subjects import ObjectKey

Sha = bytes  # 32 raw bytes in memory; hex only on the wire

Slot = tuple[str, ObjectKey]
"""(cluster, key): where an object is, in every map the planner keeps."""

DELETE_INFLIGHT: Sha = b"\0" * 32
"""The ``inflight``/``failed`` marker of a delete (prune) rather than an apply."""


@dataclasses.dataclass(frozen=True, slots=True)
class Desired:
    """The object is in revision ``revision`` of ``bundle`` with this manifestSHA."""

    bundle: str
    revision: str
    manifest_sha: Sha
    prune: bool = True
    correct_drift: bool = True
    """False for a bundle in ``drift: warn``: drift is reported, never corrected."""


@dataclasses.dataclass(frozen=True, slots=True)
class Removed:
    """The object left ``bundle`` in ``revision`` (it was in the previous revision)."""

    bundle: str
    revision: str
    prune: bool = True
    in_use: str = ""
    """Why deleting it would destroy what others still want (a Namespace holding other bundles'
    objects, a CRD whose custom resources others declare); empty when nothing is in the way."""


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """A server event from the watcher (``server_sha=None`` with ``deleted`` for a tombstone)."""

    resource_version: int
    server_sha: Sha | None
    deleted: bool = False
    owner_bundle: str = ""
    api_version: str = ""
    keep: bool = False
    """The live object opts out of prune."""
    retired: bool = False
    """A tombstone of an object that finished and that its controller removed (a completed Job
    with ``ttlSecondsAfterFinished``): its end, not drift."""


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """An applier applied ``manifest_sha`` (or deleted the object) and saw ``apply_sha``."""

    manifest_sha: Sha
    apply_sha: Sha | None
    resource_version: int
    deleted: bool = False
    at: float = 0.0
    """When it was applied (seconds since the epoch): orders it against failures."""
    bundle: str = ""
    """The bundle whose intent this carried out: the object is in its inventory from now on."""
    revision: str = ""
    """The revision of that bundle it was applied for (the prune budget counts what predates
    a revision by it)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Failed:
    """An applier gave up on ``manifest_sha`` (invalid, conflict, ... : reported, not looped);
    ``DELETE_INFLIGHT`` for a prune that failed."""

    manifest_sha: Sha
    at: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Working:
    """An applier is still on the intent for ``manifest_sha`` (waiting for a prerequisite or
    retrying a transient error), or it is still queued: it is not lost."""

    manifest_sha: Sha
    at: float


@dataclasses.dataclass(frozen=True, slots=True)
class Declined:
    """The applier did not delete: at delete time the live object no longer carried the bundle's
    label or opted out of prune."""

    reason: DecisionReason = DecisionReason.NOT_OWNED


@dataclasses.dataclass(frozen=True, slots=True)
class Resend:
    """The intent in flight got no outcome in time and is not queued any more: send it again."""


@dataclasses.dataclass(frozen=True, slots=True)
class Release:
    """The hold on the object's bundle ended (resumed, its dependencies Ready): decide again."""


Event = Desired | Removed | Observed | Applied | Failed | Working | Declined | Resend | Release


class Entry(msgspec.Struct, frozen=True, gc=False):
    """Everything the planner knows about one object. Immutable: ``step`` returns a new one
    (``msgspec.structs.replace``).

    A struct, not a dataclass: the rule makes a new entry for nearly every fact, and a frozen
    dataclass of 22 fields cost 4 µs to build and 7 µs to ``dataclasses.replace`` (22 guarded
    ``object.__setattr__`` calls), most of a plan's and a rebuild's time per object; a struct
    costs a small fraction of that. No cycles can go through it (scalars, bytes, a key): it
    need not be tracked by the garbage collector."""

    key: ObjectKey
    # desired (from BUNDLES)
    bundle: str = ""
    revision: str = ""
    manifest_sha: Sha | None = None
    prune: bool = True
    correct_drift: bool = True
    """The bundle corrects drift (``drift: correct``); False: it only reports it."""
    # last apply (from APPLIED)
    applied_manifest_sha: Sha | None = None
    apply_sha: Sha | None = None
    applied_rv: int = 0
    applied_bundle: str = ""
    """The bundle driftbus last applied the object for (its inventory): the only bundle that
    may prune it. The ownership label alone is anyone's to copy (``kubectl get -o yaml`` of a
    managed object, renamed) and never makes an object a bundle's to delete."""
    applied_revision: str = ""
    """The revision of ``applied_bundle`` it was last applied for: what the prune budget counts
    as the bundle's objects before a revision (those applied for another one)."""
    # live object (from SERVER)
    server_sha: Sha | None = None
    server_deleted: bool = False
    server_rv: int = 0
    owner_bundle: str = ""
    api_version: str = ""
    """apiVersion the watcher last saw it under: what a prune addresses it with (the manifest is
    gone by then, and after a restart it was never known)."""
    keep: bool = False
    """The live object opts out of prune (annotation)."""
    server_retired: bool = False
    """It is gone because it finished (``Observed.retired``): not re-created, counted Ready,
    until its manifest changes."""
    # bookkeeping
    inflight: Sha | None = None
    """manifestSHA of the apply intent sent and not yet answered; ``DELETE_INFLIGHT`` for a
    delete."""
    inflight_at: float = 0.0
    """When the intent in flight was sent, or an applier last said it is working on it."""
    failed: Sha | None = None
    """manifestSHA whose apply failed; not retried until republished or changed.
    ``DELETE_INFLIGHT``: the prune failed."""
    failed_at: float = 0.0
    applied_at: float = 0.0

    @property
    def failing(self) -> bool:
        """The desired manifest failed and nothing succeeded since."""
        return (
            self.manifest_sha is not None
            and self.failed == self.manifest_sha
            and self.failed_at >= self.applied_at
        )

    @property
    def live(self) -> bool:
        return self.server_rv > 0 and not self.server_deleted

    @property
    def observed(self) -> bool:
        """The watcher has shown the result of the last apply: a fact as new as it, or one
        already equal to it (an apply changing nothing the pruned SHA covers — a finalizer —
        brings no new fact, since the watcher publishes only SHA or health changes)."""
        same = self.apply_sha is not None and self.server_sha == self.apply_sha
        return self.server_rv > 0 and (
            self.server_rv >= self.applied_rv or (same and not self.server_deleted)
        )

    @property
    def drifted(self) -> bool:
        """Applied, seen since, and the live object differs (or is gone)."""
        return (
            self.apply_sha is not None
            and self.server_rv >= self.applied_rv
            and self.server_rv > 0
            and (
                (self.server_deleted and not self.server_retired)
                or (not self.server_deleted and self.server_sha != self.apply_sha)
            )
        )
