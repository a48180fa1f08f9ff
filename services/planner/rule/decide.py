"""The planner's decision rule (DESIGN §3) as a pure state machine per object.

``step(entry, event) -> (entry, Decision | None)`` folds one fact into the planner's view of one
object and says what, if anything, to send to the cluster. The NATS shell feeds it the three
compacted streams and publishes what it returns; nothing here does I/O, reads a clock, or keeps
hidden state, so every behaviour is a table row or a property test.

Rules, in order, for an object in the current revision of its bundle:

1. no applySHA is known                         → apply, reason ``new``
2. manifestSHA != last applied manifestSHA      → apply, reason ``manifest``
3. the live object was deleted out of band      → apply, reason ``deleted``
   applySHA != serverSHA                        → apply, reason ``drift``
otherwise it is a cache hit. There is no time-based expiry.

Level-triggered safeguards instead of locks:

* **In flight.** After an intent for manifestSHA M is emitted, no other intent for M is emitted
  until an applied event or a failure for M arrives, so a new object is applied exactly once
  (the watch event of our own apply often arrives before the applied event).
* **Stale facts.** A server event older than the last applied resourceVersion (or than the last
  server event: active-active watchers may deliver out of order) is ignored; an applied event
  for an older manifest leaves the newer intent in flight.
* **Failures** are reported, not retried in a loop: a failed manifest is retried only when the
  bundle is published again (reason ``retry``) or the manifest changes. Transient trouble
  (429, 5xx, a missing CRD) is not a failure: the applier keeps retrying and says so
  (``Working``), which keeps the intent in flight.
* **Nothing stuck.** Every intent ends in a fact (applied, failed, declined) or is sent again:
  the shell folds ``Resend`` into an entry whose intent got no word for too long and is no
  longer queued (lost: a publish that never landed, a dedup-window collision), and the entry's
  ``inflight_at`` says how long it has waited.
* **Prune** deletes only what is in the bundle's inventory (driftbus applied it for this bundle:
  ``Entry.applied_bundle``, from the APPLIED facts), still carries the bundle's label, was seen
  live, does not opt out (``keep``: the live object's annotation) and holds nothing of others
  (``Removed.in_use``). The label alone never makes an object a bundle's to delete.
* **Holds.** While the object's bundle is suspended or waits for a bundle it depends on, the
  shell passes ``hold``: every fact is folded as usual, but a write the rule asks for becomes a
  ``hold`` decision (recorded, nothing sent, nothing marked in flight). ``Release`` decides
  again when the hold ends, and the shell's level-triggered prune catches up on deletes.
"""

from __future__ import annotations

import dataclasses
import enum

import msgspec

from schemas.decision import DecisionAction, DecisionReason
from services.planner.rule.entry import (
    DELETE_INFLIGHT,
    Applied,
    Declined,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Release,
    Removed,
    Resend,
    Sha,
    Working,
)

# The records live in ``entry``; they stay importable from here, next to the rule that folds them.
__all__ = [
    "DELETE_INFLIGHT",
    "HIT",
    "Applied",
    "Decision",
    "Declined",
    "Desired",
    "Entry",
    "Event",
    "Failed",
    "Observed",
    "Release",
    "Removed",
    "Resend",
    "Sha",
    "Trigger",
    "Working",
    "evaluate",
    "reevaluate",
    "restore",
    "step",
]


class Trigger(enum.Enum):
    """What caused a step: bundle publishes record hits; events record only misses."""

    BUNDLE = "bundle"
    SERVER = "server"
    APPLIED = "applied"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    action: DecisionAction
    reason: DecisionReason

    @property
    def writes(self) -> bool:
        return self.action in (DecisionAction.APPLY, DecisionAction.DELETE)


HIT = Decision(DecisionAction.HIT, DecisionReason.HIT)


def _apply(reason: DecisionReason) -> Decision:
    return Decision(DecisionAction.APPLY, reason)


def evaluate(e: Entry, *, republished: bool = False) -> Decision | None:
    """The rule itself, on a settled entry: an intent to send, a hit, or None (waiting)."""
    if e.manifest_sha is None:
        return None
    if e.inflight is not None:
        if e.inflight == e.manifest_sha:
            return None  # our intent for exactly this manifest is still on its way
        # a newer manifest supersedes the one in flight (the applier drops the old intent)
        return _apply(DecisionReason.MANIFEST)
    if e.failing:
        # failed, and no successful apply since: report, do not loop (a republish retries)
        return _apply(DecisionReason.RETRY) if republished else None
    if e.apply_sha is None:
        return _apply(DecisionReason.NEW)
    if e.applied_manifest_sha != e.manifest_sha:
        return _apply(DecisionReason.MANIFEST)
    if e.drifted:
        if not e.correct_drift:
            return None  # reported (the bundle is OutOfSync), never written: drift: warn
        return _apply(DecisionReason.DELETED if e.server_deleted else DecisionReason.DRIFT)
    return HIT


def step(
    e: Entry, event: Event, *, now: float = 0.0, hold: DecisionReason | None = None
) -> tuple[Entry, Decision | None]:
    """Fold one event into ``e``; return the new entry and the decision to publish, if any.

    Intents go out for every returned decision that ``writes``; a HIT is returned (and recorded)
    only when a bundle publish asked, so the audit log holds one row per object per publish.
    ``now`` (seconds since the epoch) stamps an intent sent, for ``Resend``. ``hold`` (why the
    bundle's writes wait) turns a write into a ``hold`` decision with that reason.
    """
    held = Decision(DecisionAction.HOLD, hold) if hold is not None else None
    e, d = _step(e, event, held)
    if d is not None and d.writes:
        e = msgspec.structs.replace(e, inflight_at=now)
    return e, d


def _step(e: Entry, event: Event, held: Decision | None) -> tuple[Entry, Decision | None]:
    match event:
        case Desired():
            republished = e.manifest_sha == event.manifest_sha
            if not (
                republished
                and e.bundle == event.bundle
                and e.revision == event.revision
                and e.prune == event.prune
                and e.correct_drift == event.correct_drift
            ):  # a republish of the same revision (a periodic reconcile) changes nothing
                e = msgspec.structs.replace(
                    e,
                    bundle=event.bundle,
                    revision=event.revision,
                    manifest_sha=event.manifest_sha,
                    prune=event.prune,
                    correct_drift=event.correct_drift,
                )
            return _emit(e, evaluate(e, republished=republished), Trigger.BUNDLE, held)
        case Removed():
            return _removed(e, event, held)
        case Observed():
            if event.resource_version < max(e.applied_rv, e.server_rv):
                return e, None  # older than our last apply or the last event: a stale fact
            e = _observe(e, event)
            return _emit(e, evaluate(e), Trigger.SERVER, held)
        case Applied():
            return _applied(e, event, held)
        case Failed():
            if e.inflight == event.manifest_sha:
                e = msgspec.structs.replace(e, inflight=None)
            if event.manifest_sha in (e.manifest_sha, DELETE_INFLIGHT):
                e = msgspec.structs.replace(e, failed=event.manifest_sha, failed_at=event.at)
            return _emit(e, evaluate(e), Trigger.FAILED, held)
        case Working():
            if e.inflight == event.manifest_sha:
                e = msgspec.structs.replace(e, inflight_at=max(e.inflight_at, event.at))
            return e, None
        case Declined():
            if e.inflight != DELETE_INFLIGHT:
                return e, None
            return msgspec.structs.replace(e, inflight=None), Decision(
                DecisionAction.KEEP, event.reason
            )
        case Resend():
            if e.inflight is None:
                return e, None
            if e.inflight == DELETE_INFLIGHT:
                if held is not None:  # lost, and not sent again while held: a prune decides
                    return msgspec.structs.replace(e, inflight=None), held
                return e, Decision(DecisionAction.DELETE, DecisionReason.RESEND)
            settled = msgspec.structs.replace(e, inflight=None)
            d = evaluate(settled)
            if d is None or not d.writes:
                return settled, None
            resend = Decision(DecisionAction.APPLY, DecisionReason.RESEND)
            return _emit(settled, resend, Trigger.BUNDLE, held)
        case Release():
            return _emit(e, evaluate(e), Trigger.SERVER, held)
    raise TypeError(f"{e.key}: unknown event {event!r}")  # pragma: no cover


def _observe(e: Entry, ev: Observed) -> Entry:
    e = msgspec.structs.replace(
        e,
        server_sha=ev.server_sha,
        server_deleted=ev.deleted,
        server_rv=ev.resource_version,
        server_retired=ev.deleted and ev.retired,
    )
    if ev.deleted:
        return msgspec.structs.replace(e, owner_bundle=ev.owner_bundle or e.owner_bundle)
    # a live object's own label and annotation are the truth (also when they were removed)
    return msgspec.structs.replace(
        e, owner_bundle=ev.owner_bundle, api_version=ev.api_version or e.api_version, keep=ev.keep
    )


def reevaluate(
    e: Entry, *, now: float = 0.0, hold: DecisionReason | None = None
) -> tuple[Entry, Decision | None]:
    """Decide on a restored entry (after the rebuild), marking what it sends as in flight."""
    held = Decision(DecisionAction.HOLD, hold) if hold is not None else None
    e, d = _emit(e, evaluate(e), Trigger.BUNDLE, held)
    if d is not None and d.writes:
        e = msgspec.structs.replace(e, inflight_at=now)
    return e, d


def restore(e: Entry, event: Event) -> Entry:
    """Fold a replayed fact into ``e`` without deciding (the planner's start-up rebuild).

    Unlike ``step`` it never marks anything in flight: after the rebuild the planner evaluates
    every entry once, which is when intents go out.
    """
    match event:
        case Desired():
            return msgspec.structs.replace(
                e,
                bundle=event.bundle,
                revision=event.revision,
                manifest_sha=event.manifest_sha,
                prune=event.prune,
                correct_drift=event.correct_drift,
            )
        case Observed() if event.resource_version >= e.server_rv:
            return _observe(e, event)
        # a prune that found the object gone already reports no resourceVersion (0): it still
        # ends the applied state and the inventory, as it does live (``_applied``)
        case Applied() if event.resource_version >= e.applied_rv or (
            event.deleted and not event.resource_version
        ):
            if event.deleted:
                return msgspec.structs.replace(
                    e,
                    applied_manifest_sha=None,
                    apply_sha=None,
                    applied_rv=event.resource_version,
                    applied_bundle="",
                    applied_revision="",
                )
            return msgspec.structs.replace(
                e,
                applied_manifest_sha=event.manifest_sha,
                apply_sha=event.apply_sha,
                applied_rv=event.resource_version,
                applied_at=max(e.applied_at, event.at),
                applied_bundle=event.bundle,
                applied_revision=event.revision,
            )
        case Failed() if event.at >= e.failed_at:
            return msgspec.structs.replace(e, failed=event.manifest_sha, failed_at=event.at)
    return e


def _emit(
    e: Entry, d: Decision | None, trigger: Trigger, held: Decision | None
) -> tuple[Entry, Decision | None]:
    if d is None:
        return e, None
    if d.writes and held is not None:
        return e, held  # nothing sent, nothing in flight: decided again on ``Release``
    if d.writes:
        return msgspec.structs.replace(e, inflight=e.manifest_sha, failed=None), d
    return e, (d if trigger is Trigger.BUNDLE else None)


def _applied(e: Entry, ev: Applied, held: Decision | None) -> tuple[Entry, Decision | None]:
    if ev.deleted:
        if e.inflight == DELETE_INFLIGHT:
            # pruned: forget the applied state, keep desired (none) and the tombstone
            e = msgspec.structs.replace(
                e,
                inflight=None,
                applied_manifest_sha=None,
                apply_sha=None,
                applied_rv=ev.resource_version,
                applied_bundle="",
                applied_revision="",
                failed=None if e.failed == DELETE_INFLIGHT else e.failed,
            )
        return e, None
    # The result answers the intent for its manifest whatever order results arrive in (two
    # appliers may finish in reverse), but only the newest result is the applied state.
    inflight = None if e.inflight == ev.manifest_sha else e.inflight
    if ev.resource_version >= e.applied_rv:
        e = msgspec.structs.replace(
            e,
            applied_manifest_sha=ev.manifest_sha,
            apply_sha=ev.apply_sha,
            applied_rv=ev.resource_version,
            applied_at=max(e.applied_at, ev.at),
            applied_bundle=ev.bundle,
            applied_revision=ev.revision,
        )
    e = msgspec.structs.replace(e, inflight=inflight)
    return _emit(e, evaluate(e), Trigger.APPLIED, held)


def _removed(e: Entry, ev: Removed, held: Decision | None) -> tuple[Entry, Decision | None]:
    if e.bundle and e.bundle != ev.bundle:
        return e, None  # the object moved to another bundle meanwhile: not ours to prune
    e = msgspec.structs.replace(
        e, bundle="", revision=ev.revision, manifest_sha=None, prune=ev.prune
    )
    d = _prune(e, ev)
    if d is None or not d.writes:
        return e, d
    if held is not None:
        return e, held  # the level-triggered prune deletes it when the hold ends
    return msgspec.structs.replace(e, inflight=DELETE_INFLIGHT), d


def _prune(e: Entry, ev: Removed) -> Decision | None:
    """What an object that left ``ev``'s bundle gets: deleted, kept (and why), or nothing."""
    applying = e.inflight is not None and e.inflight != DELETE_INFLIGHT
    if applying and ev.prune and e.owner_bundle in ("", ev.bundle) and not (e.keep or ev.in_use):
        # an apply is on its way (perhaps waiting for its CRD): a delete replaces it in the
        # queue, so it neither creates the object after all nor waits for ever
        return Decision(DecisionAction.DELETE, DecisionReason.PRUNE)
    if not e.live or e.owner_bundle != ev.bundle:
        return Decision(DecisionAction.KEEP, DecisionReason.NOT_OWNED)
    if e.applied_bundle != ev.bundle:
        # it carries the label, but driftbus never applied it for this bundle: a copy, or
        # someone else's label — not in the bundle's inventory, never its to delete
        return Decision(DecisionAction.KEEP, DecisionReason.NOT_DECLARED)
    if not ev.prune:
        return Decision(DecisionAction.KEEP, DecisionReason.PRUNE_DISABLED)
    if e.keep:
        return Decision(DecisionAction.KEEP, DecisionReason.ANNOTATION)
    if ev.in_use:
        return Decision(DecisionAction.KEEP, DecisionReason.IN_USE)
    if e.inflight == DELETE_INFLIGHT:
        return None
    return Decision(DecisionAction.DELETE, DecisionReason.PRUNE)
