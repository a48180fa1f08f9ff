"""Wire facts → decision events: the one adapter the planner and ``driftbus plan`` fold with.

SERVER, APPLIED and OUTCOMES messages become the ``Observed``, ``Applied`` and
``Failed``/``Working``/``Declined`` events of ``decide.py``. An outcome is read against the
entry it concerns: a failure older than what is known, or a "still working" about an intent
that is no longer the one in flight, says nothing new and becomes no event.
"""

from __future__ import annotations

from schemas.decision import DecisionReason
from schemas.messages import WORKING_PHASES, AppliedEvent, ObjectPhase, OutcomeEvent, ServerEvent
from schemas.subjects import ObjectKey
from services.core.manifest import rv_int
from services.planner.rule.decide import (
    Applied,
    Declined,
    Entry,
    Event,
    Failed,
    Observed,
    Working,
    restore,
)


def observed(ev: ServerEvent) -> Observed:
    """The watcher's fact about a live object (or its tombstone)."""
    return Observed(
        rv_int(ev.resource_version),
        bytes.fromhex(ev.server_sha) if ev.server_sha else None,
        ev.deleted,
        ev.bundle,
        api_version=ev.api_version,
        keep=ev.keep,
        retired=ev.deleted and ev.retired,
    )


def applied(ap: AppliedEvent) -> Applied:
    """An applier's fact: this manifest was applied (or the object deleted)."""
    return Applied(
        bytes.fromhex(ap.manifest_sha),
        bytes.fromhex(ap.apply_sha) if ap.apply_sha else None,
        rv_int(ap.resource_version),
        ap.deleted,
        ap.applied_at.timestamp() if ap.applied_at else 0.0,
        ap.bundle,
        ap.revision,
    )


def outcome(oc: OutcomeEvent, entry: Entry | None) -> Event | None:
    """An applier's last word that is not an applied fact, or None if it says nothing new."""
    sha = bytes.fromhex(oc.manifest_sha)
    at = oc.at.timestamp() if oc.at else 0.0
    if oc.phase in (ObjectPhase.FAILED, ObjectPhase.CONFLICT):
        if entry is not None and at < max(entry.applied_at, entry.failed_at):
            return None  # older than what we know (a replayed fact superseded since)
        return Failed(sha, at)
    if oc.phase in WORKING_PHASES:
        if entry is not None and entry.inflight == sha:
            return Working(sha, at)
        return None
    if oc.phase is ObjectPhase.KEPT:
        return Declined(DecisionReason.NOT_OWNED)
    return None


Fact = ServerEvent | AppliedEvent | OutcomeEvent


def fold(entry: Entry, fact: Fact) -> Entry:
    """Replay one fact into ``entry`` without deciding, exactly as the planner's rebuild does."""
    match fact:
        case ServerEvent():
            return restore(entry, observed(fact))
        case AppliedEvent():
            return restore(entry, applied(fact))
        case OutcomeEvent():
            event = outcome(fact, entry)
            return entry if event is None else restore(entry, event)


def rebuilt(key: ObjectKey, facts: list[Fact]) -> Entry:
    """The entry of ``key`` after replaying ``facts`` in order (a compacted view: the last fact
    of each stream), as a planner that starts now would hold it."""
    entry = Entry(key)
    for fact in facts:
        entry = fold(entry, fact)
    return entry
