"""Which revision of a bundle the status page explains an object from (issue 41, item 5): the
newest on the bus that the planner's or appliers' own records name for the object and the
bundle — never one the planner refused, which no record names."""

from __future__ import annotations

import pytest

from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.messages import AppliedEvent, Bundle, ObjectPhase, OutcomeEvent
from schemas.subjects import ObjectKey
from services.ui.accepted import NO_MANIFEST, Evidence, evidence, in_force

WEB, OTHER = "team-a/web", "team-b/app"
KEY = ObjectKey("", "ConfigMap", "b", "settings")
SHA = "ab" * 32


def decided(action: DecisionAction, revision: str, bundle: str = WEB) -> DecisionRecord:
    reason = DecisionReason.HIT if action is DecisionAction.HIT else DecisionReason.NEW
    return DecisionRecord(
        cluster="c", key=KEY, bundle=bundle, revision=revision, action=action, reason=reason
    )


def applied(revision: str, bundle: str = WEB, *, deleted: bool = False) -> AppliedEvent:
    return AppliedEvent(
        cluster="c",
        key=KEY,
        bundle=bundle,
        revision=revision,
        manifest_sha=SHA,
        apply_sha=None if deleted else SHA,
        resource_version="1",
        deleted=deleted,
    )


def failed(revision: str, bundle: str = WEB, sha: str = SHA) -> OutcomeEvent:
    return OutcomeEvent(
        cluster="c",
        key=KEY,
        bundle=bundle,
        revision=revision,
        manifest_sha=sha,
        phase=ObjectPhase.FAILED,
    )


APPLY, HIT, HOLD = DecisionAction.APPLY, DecisionAction.HIT, DecisionAction.HOLD
DELETE, KEEP = DecisionAction.DELETE, DecisionAction.KEEP
NONE = "accepted"  # what the reason says when nothing names the object

# (id, revisions on the bus oldest first, decisions, applied, outcome, explained from / why not)
CASES: list[tuple[str, list[str], list[DecisionRecord], AppliedEvent | None,
                  OutcomeEvent | None, str]] = [
    ("no-record-nothing-is-read", ["r1"], [], None, None, NONE),
    ("a-refused-newest-revision-is-passed-over", ["r1", "r2"], [decided(APPLY, "r1")], None,
     None, "r1"),
    ("a-refused-only-revision-is-never-explained", ["r2"], [], None, None, NONE),
    ("another-bundles-records-say-nothing-of-this-one", ["r1"],
     [decided(APPLY, "r1", OTHER), decided(HIT, "r1", OTHER)], applied("r1", OTHER),
     failed("r1", OTHER), NONE),
    ("the-applied-fact-names-the-revision", ["r1", "r2"], [], applied("r1"), None, "r1"),
    ("a-failure-names-the-revision", ["r1"], [], None, failed("r1"), "r1"),
    ("a-hit-names-the-revision", ["r1", "r2"], [decided(APPLY, "r1"), decided(HIT, "r2")],
     None, None, "r2"),
    ("a-held-write-names-the-revision", ["r1"], [decided(HOLD, "r1")], None, None, "r1"),
    ("the-newest-named-revision-wins", ["r1", "r2", "r3"],
     [decided(APPLY, "r2"), decided(APPLY, "r1")], applied("r1"), None, "r2"),
    ("pruned-by-the-revision-in-force", ["r1", "r2"],
     [decided(APPLY, "r1"), decided(DELETE, "r2")], None, None, "not in revision r2"),
    ("kept-but-left-out-by-the-revision-in-force", ["r1", "r2"],
     [decided(APPLY, "r1"), decided(KEEP, "r2")], None, None, "not in revision r2"),
    ("a-deletion-fact-says-left-out", ["r1", "r2"], [], applied("r2", deleted=True), None,
     "not in revision r2"),
    ("a-failed-delete-says-left-out", ["r1", "r2"], [decided(APPLY, "r1")], None,
     failed("r2", sha=NO_MANIFEST), "not in revision r2"),
    ("named-revisions-no-longer-on-the-bus", ["r5", "r6"], [decided(APPLY, "r1")], None, None,
     NONE),
]  # fmt: skip


@pytest.mark.parametrize(
    ("on_bus", "decisions", "fact", "outcome", "want"),
    [pytest.param(*c[1:], id=c[0]) for c in CASES],
)
def test_the_revision_explained(
    on_bus: list[str],
    decisions: list[DecisionRecord],
    fact: AppliedEvent | None,
    outcome: OutcomeEvent | None,
    want: str,
) -> None:
    revisions = [Bundle(cluster="c", bundle=WEB, revision=r) for r in on_bus]
    got = in_force(revisions, evidence(WEB, decisions, fact, outcome), str(KEY))
    if got.revision is not None:
        assert got.revision.revision == want
        assert not got.why_not
    else:
        assert want in got.why_not, got
        assert str(KEY) in got.why_not


def test_a_republished_revision_is_read_from_its_newest_message() -> None:
    """The same revision published twice (a periodic reconcile): the newest copy is read."""
    first, again = (
        Bundle(cluster="c", bundle=WEB, revision="r1", source=s) for s in ("old", "new")
    )
    got = in_force([first, again], Evidence(frozenset({"r1"}), frozenset({"r1"})), "x")
    assert got.revision is again
