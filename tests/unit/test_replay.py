"""``driftbus replay``'s core: a decision record keeps enough to make its decision again.

Each row runs the real rule (``decide.step``, or ``reevaluate`` after a rebuild) up to one
decision, builds that decision's record as the planner does (``messages.record`` with the
inputs), sends it through the wire codec, and re-runs it (``rule.replay.replayed``): the same
action and reason, for every decision the rule can make. A changed rule is seen; records that
cannot be re-run are said so, never reported as differences.
"""

from __future__ import annotations

import dataclasses
import hashlib

import msgspec
import pytest

from schemas.codec import decode, encode
from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.decision import DecisionRecord, KeptEntry
from schemas.subjects import ObjectKey
from services.planner.rule import decide, messages, replay
from services.planner.rule.decide import (
    DELETE_INFLIGHT,
    HIT,
    Applied,
    Decision,
    Declined,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Release,
    Removed,
    Resend,
    Working,
    reevaluate,
    restore,
    step,
)

KEY = ObjectKey("", "ConfigMap", "ns", "cm")
SLOT = ("c1", KEY)


def sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


M1, M2, S1, S2, FOREIGN = (sha(t) for t in ("m1", "m2", "s1", "s2", "foreign"))
# applied and seen live: the settled state of most rows
SETTLED: list[Event] = [
    Desired("b", "r1", M1),
    Applied(M1, S1, 10, bundle="b"),
    Observed(10, S1, owner_bundle="b"),
]
INFLIGHT_DELETE: list[Event] = [*SETTLED, Removed("b", "r2")]


@dataclasses.dataclass(frozen=True)
class Row:
    before: list[Event]
    """Folded with ``step`` (no hold) up to the decision."""
    last: Event | None
    """The fact of the decision; None: decided once the rebuild completed (``before`` is then
    folded with ``restore``, as the planner's rebuild does)."""
    want: Decision
    hold: R | None = None
    held_before: R | None = None
    """The hold ``before`` is folded under."""


ROWS = {
    "new-object": Row([], Desired("b", "r1", M1), Decision(A.APPLY, R.NEW)),
    "republish-is-a-hit": Row(SETTLED, Desired("b", "r1", M1), HIT),
    "manifest-changed": Row(SETTLED, Desired("b", "r2", M2), Decision(A.APPLY, R.MANIFEST)),
    "newer-manifest-supersedes-the-one-in-flight": Row(
        [Desired("b", "r1", M1)], Desired("b", "r2", M2), Decision(A.APPLY, R.MANIFEST)
    ),
    "stale-result-reissues-the-newer-manifest": Row(
        [*SETTLED, Desired("b", "r2", M2), Failed(M2, at=5), Desired("b", "r3", M1)],
        Applied(M2, S2, 12, bundle="b", at=6),
        Decision(A.APPLY, R.MANIFEST),
    ),
    "drift": Row(SETTLED, Observed(12, FOREIGN, owner_bundle="b"), Decision(A.APPLY, R.DRIFT)),
    "deleted-out-of-band": Row(
        SETTLED, Observed(12, None, deleted=True), Decision(A.APPLY, R.DELETED)
    ),
    "republish-after-failure-retries": Row(
        [Desired("b", "r1", M1), Failed(M1, at=5)],
        Desired("b", "r1", M1),
        Decision(A.APPLY, R.RETRY),
    ),
    "lost-apply-is-resent": Row([Desired("b", "r1", M1)], Resend(), Decision(A.APPLY, R.RESEND)),
    "lost-delete-is-resent": Row(INFLIGHT_DELETE, Resend(), Decision(A.DELETE, R.RESEND)),
    "prune": Row(SETTLED, Removed("b", "r2"), Decision(A.DELETE, R.PRUNE)),
    "prune-cancels-an-apply-on-its-way": Row(
        [Desired("b", "r1", M1)], Removed("b", "r2"), Decision(A.DELETE, R.PRUNE)
    ),
    "keep-not-owned": Row(
        [Desired("b", "r1", M1), Applied(M1, S1, 10, bundle="b")],
        Removed("b", "r2"),
        Decision(A.KEEP, R.NOT_OWNED),
    ),
    "keep-not-declared": Row(
        [
            Desired("b", "r1", M1),
            Applied(M1, S1, 10, bundle="other"),
            Observed(10, S1, owner_bundle="b"),
        ],
        Removed("b", "r2"),
        Decision(A.KEEP, R.NOT_DECLARED),
    ),
    "keep-prune-disabled": Row(
        SETTLED, Removed("b", "r2", prune=False), Decision(A.KEEP, R.PRUNE_DISABLED)
    ),
    "keep-annotation": Row(
        [*SETTLED, Observed(11, S1, owner_bundle="b", keep=True)],
        Removed("b", "r2"),
        Decision(A.KEEP, R.ANNOTATION),
    ),
    "keep-in-use": Row(
        SETTLED, Removed("b", "r2", in_use="holds objects of x"), Decision(A.KEEP, R.IN_USE)
    ),
    "delete-declined-by-the-applier": Row(
        INFLIGHT_DELETE, Declined(R.ANNOTATION), Decision(A.KEEP, R.ANNOTATION)
    ),
    "hold-suspended": Row(
        [], Desired("b", "r1", M1), Decision(A.HOLD, R.SUSPENDED), hold=R.SUSPENDED
    ),
    "hold-dependencies": Row(
        SETTLED,
        Desired("b", "r2", M2),
        Decision(A.HOLD, R.DEPENDENCIES),
        hold=R.DEPENDENCIES,
    ),
    "hold-window-on-drift": Row(
        SETTLED, Observed(12, FOREIGN, owner_bundle="b"), Decision(A.HOLD, R.WINDOW), hold=R.WINDOW
    ),
    "hold-wave-on-prune": Row(SETTLED, Removed("b", "r2"), Decision(A.HOLD, R.WAVE), hold=R.WAVE),
    "hold-lost-delete": Row(INFLIGHT_DELETE, Resend(), Decision(A.HOLD, R.WINDOW), hold=R.WINDOW),
    "hit-while-held": Row(SETTLED, Desired("b", "r1", M1), HIT, hold=R.SUSPENDED),
    "released-hold-applies": Row(
        [*SETTLED, Observed(12, FOREIGN, owner_bundle="b")],
        Release(),
        Decision(A.APPLY, R.DRIFT),
        held_before=R.WINDOW,
    ),
    "rebuilt-new-object": Row([Desired("b", "r1", M1)], None, Decision(A.APPLY, R.NEW)),
    "rebuilt-hit": Row(SETTLED, None, HIT),
    "rebuilt-drift-held": Row(
        [*SETTLED, Observed(12, FOREIGN, owner_bundle="b")],
        None,
        Decision(A.HOLD, R.WINDOW),
        hold=R.WINDOW,
    ),
}

# Every (action, reason) the rule makes: the hook delete is a policy's, not the rule's.
RULE_MAKES = {(a, r) for a in (A.APPLY,) for r in (R.NEW, R.MANIFEST, R.DRIFT, R.DELETED)} | {
    (A.APPLY, R.RETRY),
    (A.APPLY, R.RESEND),
    (A.DELETE, R.RESEND),
    (A.DELETE, R.PRUNE),
    (A.HIT, R.HIT),
    *((A.KEEP, r) for r in (R.NOT_OWNED, R.NOT_DECLARED, R.PRUNE_DISABLED, R.ANNOTATION)),
    (A.KEEP, R.IN_USE),
    *((A.HOLD, r) for r in (R.SUSPENDED, R.DEPENDENCIES, R.WINDOW, R.WAVE)),
}


def decided(row: Row) -> tuple[DecisionRecord, Decision | None]:
    """The record the planner writes for ``row``'s decision (through the codec), and the
    decision the rule made."""
    e = Entry(KEY)
    for ev in row.before:
        e = restore(e, ev) if row.last is None else step(e, ev, now=1.0, hold=row.held_before)[0]
    inputs = replay.Inputs(e, row.last, row.hold)
    if row.last is None:
        after, d = reevaluate(e, now=2.0, hold=row.hold)
    else:
        after, d = step(e, row.last, now=2.0, hold=row.hold)
    assert d is not None
    record = messages.record(SLOT, after, d, "r", "planner-0", inputs=inputs)
    return decode(encode(record), DecisionRecord), d


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_a_record_makes_its_decision_again(row: Row) -> None:
    record, d = decided(row)
    assert d == row.want, "the table row is not what the rule decides"
    again = replay.replayed(record)
    assert not again.skipped
    assert again.now == row.want
    assert not again.differs


def test_the_table_covers_every_decision_the_rule_makes() -> None:
    assert {(r.want.action, r.want.reason) for r in ROWS.values()} == RULE_MAKES


def test_a_changed_rule_is_a_difference(monkeypatch: pytest.MonkeyPatch) -> None:
    record, _ = decided(ROWS["drift"])
    monkeypatch.setattr(decide, "evaluate", lambda e, *, republished=False: HIT)
    again = replay.replayed(record)
    assert again.differs
    assert again.then == Decision(A.APPLY, R.DRIFT)
    assert again.now is None  # a hit on a server fact is not recorded: the rule decides nothing
    assert replay.explain(again.inputs or replay.Inputs(Entry(KEY))).startswith(
        "watcher saw it live"
    )


def test_old_records_and_hook_deletes_are_not_replayable_never_differences() -> None:
    record, _ = decided(ROWS["drift"])
    old = msgspec.structs.replace(record, inputs=None)
    hook = msgspec.structs.replace(old, action=A.DELETE, reason=R.HOOK)
    assert replay.replayed(old).skipped == replay.NOT_KEPT
    assert replay.replayed(hook).skipped == replay.BY_HOOK_POLICY
    assert not replay.replayed(old).differs
    # a record written by an older planner (no inputs field at all) still decodes
    legacy = msgspec.json.encode({**msgspec.to_builtins(old), "inputs": None})
    assert decode(legacy.replace(b',"inputs":null', b""), DecisionRecord).inputs is None


def test_the_inputs_keep_every_field_the_rule_reads() -> None:
    """A field added to ``Entry`` or to a fact must be kept too, or replay would guess it."""
    entry = set(Entry.__struct_fields__) - {"key"}
    assert entry == set(KeptEntry.__struct_fields__)
    for event, kept in replay.KEPT.items():
        assert {f.name for f in dataclasses.fields(event)} == set(kept.__struct_fields__), event
    facts = set(Event.__args__) - {Working}  # Working never decides
    assert facts == set(replay.KEPT)


def test_inputs_survive_the_wire_exactly() -> None:
    e = Entry(
        KEY,
        bundle="b",
        manifest_sha=M1,
        applied_manifest_sha=M1,
        apply_sha=S1,
        applied_rv=10,
        server_sha=FOREIGN,
        server_rv=11,
        inflight=DELETE_INFLIGHT,
        failed=M2,
        failed_at=3.5,
        keep=True,
    )
    ev = Applied(M1, None, 12, deleted=True, at=4.25, bundle="b")
    inputs = replay.Inputs(e, ev, R.WAVE)
    after = msgspec.structs.replace(e, server_sha=S2)
    record = messages.record(SLOT, after, HIT, "r", "p", inputs=inputs)
    assert record.inputs is not None
    # SHAs the record carries itself are named, not repeated; the others are written out
    assert record.inputs.entry.manifest_sha == "@manifest_sha"
    assert record.inputs.entry.apply_sha == "@apply_sha"
    assert record.inputs.entry.server_sha == FOREIGN.hex()  # the record's is the one after
    back = decode(encode(record), DecisionRecord)
    assert replay.inputs_of(back) == inputs


def test_inputs_naming_a_sha_the_record_lacks_are_not_replayable() -> None:
    record, _ = decided(ROWS["drift"])
    assert record.inputs is not None
    broken = msgspec.structs.replace(
        record,
        server_sha=None,
        inputs=msgspec.structs.replace(
            record.inputs,
            entry=msgspec.structs.replace(record.inputs.entry, server_sha="@server_sha"),
        ),
    )
    again = replay.replayed(decode(encode(broken), DecisionRecord))
    assert again.skipped.startswith("inputs not whole: ConfigMap/ns/cm: its inputs name")
    assert not again.differs


def test_a_record_with_inputs_stays_compact() -> None:
    record, _ = decided(ROWS["republish-is-a-hit"])
    size = len(encode(record))
    without = len(encode(msgspec.structs.replace(record, inputs=None)))
    # SHAs named by reference, and the few fields not at their defaults
    assert size - without < 400, encode(record)


SAID = {
    type(None): "the planner's rebuild completed; before: desired ",
    Desired: "published in b@",
    Removed: "left b@r2",
    Observed: "watcher saw it ",
    Applied: "applier applied ",
    Failed: "applier gave up on ",
    Declined: "applier declined the delete (annotation)",
    Resend: "no word on the intent in time; before: ",
    Release: "the bundle's hold ended; before: ",
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_inputs_read_as_one_line(row: Row) -> None:
    record, _ = decided(row)
    inputs = replay.replayed(record).inputs
    assert inputs is not None
    line = replay.explain(inputs)
    assert line.startswith(SAID[type(row.last)]), line
    assert "\n" not in line
    assert (f"; held: {row.hold}" in line) == (row.hold is not None), line
