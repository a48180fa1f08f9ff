"""A decision's inputs, kept in its record and re-run: ``driftbus replay``'s core.

The rule (``decide``) is pure, so a decision is a function of three things: the entry as it was
before the fact, the fact, and the bundle's hold (``step(entry, event, hold=hold)``; after the
rebuild, ``reevaluate(entry, hold=hold)``). ``Inputs`` is that triple; the planner's shell hands
it to the record (``kept``: the wire form of ``schemas.decision.DecisionInputs``), and a replay
reads it back (``inputs_of``) and calls the same two functions of ``decide`` again (``rerun``):
never a second copy of the rule. ``replayed`` says what this build decides on a record's inputs
and whether it agrees with what was decided then (action and reason).

What a record cannot say is not guessed: a record written before the inputs were kept, and a
decision the rule does not make (a hook deleted by its policy), are ``skipped`` with why.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from schemas.decision import (
    DecisionAction,
    DecisionInputs,
    DecisionReason,
    DecisionRecord,
    KeptApplied,
    KeptDeclined,
    KeptDesired,
    KeptEntry,
    KeptEvent,
    KeptFailed,
    KeptObserved,
    KeptRelease,
    KeptRemoved,
    KeptResend,
)
from services.planner.rule.decide import Decision, reevaluate, step
from services.planner.rule.entry import (
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
)

KEPT: dict[type[Any], type[KeptEvent]] = {
    Desired: KeptDesired,
    Removed: KeptRemoved,
    Observed: KeptObserved,
    Applied: KeptApplied,
    Failed: KeptFailed,
    Declined: KeptDeclined,
    Resend: KeptResend,
    Release: KeptRelease,
}
"""Each fact that can lead to a decision, and its wire form (same field names). ``Working``
never decides, so it is never a decision's input."""
_EVENT_OF = {kept: event for event, kept in KEPT.items()}
SHA_FIELDS = frozenset(
    ("manifest_sha", "applied_manifest_sha", "apply_sha", "server_sha", "inflight", "failed")
)
"""The fields that hold a SHA: raw bytes in the rule, hex on the wire."""
REFERABLE = {
    "manifest_sha": "manifest_sha",
    "last_applied_manifest_sha": "applied_manifest_sha",
    "apply_sha": "apply_sha",
    "server_sha": "server_sha",
}
"""The record's own SHAs (``messages.record``: those of the entry after the decision), which an
input equal to one of them names (``@apply_sha``) instead of repeating it: a hit's inputs would
otherwise double the record."""
_DEFAULTS: dict[type[Any], tuple[tuple[str, Any], ...]] = {}
NOT_KEPT = "recorded before inputs were kept"
BY_HOOK_POLICY = "a hook's delete policy decided it, not the decision rule"


@dataclasses.dataclass(frozen=True, slots=True)
class Inputs:
    """What ``decide`` read for one decision; ``event`` None: decided once the planner's
    rebuild completed (``reevaluate``)."""

    entry: Entry
    event: Event | None = None
    hold: DecisionReason | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Replayed:
    """One record re-run: what was decided then, what this build decides (None: nothing), on
    which inputs; ``skipped`` says why it could not be re-run (then ``now`` is None)."""

    record: DecisionRecord
    now: Decision | None
    inputs: Inputs | None
    skipped: str = ""

    @property
    def then(self) -> Decision:
        return Decision(self.record.action, self.record.reason)

    @property
    def differs(self) -> bool:
        return not self.skipped and self.now != self.then


def _fields(obj: Any, refs: dict[bytes, str]) -> dict[str, Any]:
    """``obj``'s fields that differ from their defaults (the wire leaves the rest out), SHAs in
    hex or as a reference (``refs``); an entry's key aside (the record's own)."""
    defaults = _DEFAULTS.get(type(obj))
    if defaults is None:
        if isinstance(obj, msgspec.Struct):  # the entry
            named = [(f.name, f.default) for f in msgspec.structs.fields(obj)]
        else:  # the events
            named = [(f.name, f.default) for f in dataclasses.fields(obj)]
        defaults = tuple((name, default) for name, default in named if name != "key")
        _DEFAULTS[type(obj)] = defaults
    out = {}
    for name, default in defaults:
        v = getattr(obj, name)
        if v != default:
            out[name] = (refs.get(v) or v.hex()) if type(v) is bytes else v
    return out


def kept(inputs: Inputs | None, after: Entry) -> DecisionInputs | None:
    """The wire form of ``inputs`` for the record ``messages.record`` makes of ``after`` (the
    entry after the decision, whose SHAs the record carries and the inputs refer to); None for
    no inputs, or a fact that never decides."""
    if inputs is None:
        return None
    refs: dict[bytes, str] = {}
    for name, field in REFERABLE.items():
        value = getattr(after, field)
        if value is not None and value not in refs:
            refs[value] = f"@{name}"
    event = None
    if inputs.event is not None:
        kind = KEPT.get(type(inputs.event))
        if kind is None:
            return None
        event = kind(**_fields(inputs.event, refs))
    entry = KeptEntry(**_fields(inputs.entry, refs))
    return DecisionInputs(entry=entry, event=event, hold=inputs.hold)


def inputs_of(record: DecisionRecord) -> Inputs:
    """The rule's own records back from ``record``'s inputs; ValueError if they are not
    whole (a reference to a SHA the record lacks)."""
    wire = record.inputs
    if wire is None:
        raise ValueError(f"{record.key}: {NOT_KEPT}")

    def raw(name: str, value: Any) -> Any:
        if name not in SHA_FIELDS or not isinstance(value, str):
            return value
        if value.startswith("@"):
            value = getattr(record, value[1:], None)
            if not isinstance(value, str):
                raise ValueError(f"{record.key}: its inputs name {name}, the record has none")
        return bytes.fromhex(value)

    fields = msgspec.structs.asdict(wire.entry)
    entry = Entry(record.key, **{n: raw(n, v) for n, v in fields.items()})
    event: Event | None = None
    if wire.event is not None:
        fields = msgspec.structs.asdict(wire.event)
        event = _EVENT_OF[type(wire.event)](**{n: raw(n, v) for n, v in fields.items()})
    return Inputs(entry, event, wire.hold)


def rerun(inputs: Inputs) -> Decision | None:
    """What this build's rule decides on ``inputs``: the very functions the planner calls."""
    if inputs.event is None:
        return reevaluate(inputs.entry, hold=inputs.hold)[1]
    return step(inputs.entry, inputs.event, hold=inputs.hold)[1]


def replayed(record: DecisionRecord) -> Replayed:
    """``record``'s decision made again by this build (or why it cannot be)."""
    if record.inputs is None:
        hook = record.action is DecisionAction.DELETE and record.reason is DecisionReason.HOOK
        return Replayed(record, None, None, BY_HOOK_POLICY if hook else NOT_KEPT)
    try:
        inputs = inputs_of(record)
    except ValueError as exc:
        return Replayed(record, None, None, f"inputs not whole: {exc}")
    return Replayed(record, rerun(inputs), inputs)


def _short(sha: bytes | None) -> str:
    return sha.hex()[:8] if sha is not None else "none"


def _fact(event: Event | None) -> str:
    match event:
        case None:
            return "the planner's rebuild completed"
        case Desired():
            manifest = _short(event.manifest_sha)
            return f"published in {event.bundle}@{event.revision} (manifest {manifest})"
        case Removed():
            off = "" if event.prune else ", prune off"
            used = f", in use: {event.in_use}" if event.in_use else ""
            return f"left {event.bundle}@{event.revision}{off}{used}"
        case Observed():
            live = "deleted" if event.deleted else f"live {_short(event.server_sha)}"
            return f"watcher saw it {live} at rv {event.resource_version}"
        case Applied():
            if event.deleted:
                return f"applier deleted it at rv {event.resource_version}"
            return (
                f"applier applied {_short(event.manifest_sha)} -> {_short(event.apply_sha)} at "
                f"rv {event.resource_version}"
            )
        case Failed():
            return f"applier gave up on {_short(event.manifest_sha)}"
        case Declined():
            return f"applier declined the delete ({event.reason})"
        case Resend():
            return "no word on the intent in time"
        case Release():
            return "the bundle's hold ended"
    return type(event).__name__  # pragma: no cover


def _state(e: Entry) -> str:
    parts = [f"desired {_short(e.manifest_sha)}"]
    if e.apply_sha is not None:
        parts.append(f"applied {_short(e.applied_manifest_sha)} -> {_short(e.apply_sha)}")
    if e.server_rv:
        parts.append("live: deleted" if e.server_deleted else f"live {_short(e.server_sha)}")
    if e.inflight is not None:
        parts.append(f"in flight {_short(e.inflight)}")
    if e.failing:
        parts.append("failing")
    if not e.correct_drift:
        parts.append("drift: warn")
    return ", ".join(parts)


def explain(inputs: Inputs) -> str:
    """One line of what the rule decided from: the fact, the entry before it, the hold."""
    hold = f"; held: {inputs.hold}" if inputs.hold is not None else ""
    return f"{_fact(inputs.event)}; before: {_state(inputs.entry)}{hold}"
