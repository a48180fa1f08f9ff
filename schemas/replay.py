"""What ``driftbus replay -o json`` prints (``schemas/json/cli-replay.schema.json``): the recorded
decisions of a period re-run through this build's decision rule, and every one it would decide
otherwise (docs/replay.md)."""

from __future__ import annotations

import datetime as dt

import msgspec

from schemas.decision import DecisionInputs


class ReplayDifference(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One recorded decision this build would make otherwise."""

    at: dt.datetime | None
    """When it was decided."""
    cluster: str
    api_group: str
    kind: str
    namespace: str
    name: str
    bundle: str
    revision: str
    then_action: str
    """What was decided then: hit, apply, delete, keep or hold."""
    then_reason: str
    now_action: str | None
    """What this build decides on the same inputs; null: nothing (it would wait)."""
    now_reason: str | None
    fact: str
    """What the decision followed: desired (a publish), removed, observed (a watcher's fact),
    applied, failed, declined, resend, release, or rebuilt (the planner's start)."""
    why: str
    """The inputs in one line: the fact, the planner's view of the object before it, the hold."""
    planner: str
    """The planner replica that decided then."""
    inputs: DecisionInputs
    """The recorded inputs themselves, as the decision record carries them."""


class NotReplayed(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Records that could not be re-run, counted by why."""

    why: str
    """``recorded before inputs were kept`` (a planner older than replay), ``a hook's delete
    policy decided it, not the decision rule``, or ``unreadable: …``."""
    count: int


class ReplayDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus replay -o json``: exit 2 when ``differences`` is not empty, else 0."""

    since: dt.datetime
    until: dt.datetime
    """When the read of the DECISIONS stream caught up."""
    cluster: str | None
    """The cluster replayed; null: every cluster."""
    records: int
    """Decision records read."""
    replayed: int
    """Records re-run through this build's rule (``records`` minus the not replayed)."""
    agreed: dict[str, int]
    """Replayed decisions this build makes alike, by ``action:reason``."""
    differences: list[ReplayDifference]
    not_replayed: list[NotReplayed]
