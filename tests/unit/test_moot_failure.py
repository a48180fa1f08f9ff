"""A failure made moot by a later revision (emit.moot_failure): the object's row must not keep
saying Failed once what is desired is what was applied again (a rollback)."""

from __future__ import annotations

import pytest

from schemas.messages import ObjectPhase, OutcomeEvent
from schemas.subjects import ObjectKey
from services.planner.rule.decide import Entry
from services.planner.rule.messages import moot_failure

KEY = ObjectKey("apps", "Deployment", "web", "web")
V1, V2 = b"\x01" * 32, b"\x02" * 32


def failed(sha: bytes) -> OutcomeEvent:
    return OutcomeEvent(
        cluster="c",
        key=KEY,
        bundle="web",
        revision="v2",
        manifest_sha=sha.hex(),
        phase=ObjectPhase.FAILED,
        message="422",
    )


@pytest.mark.parametrize(
    ("outcome", "desired", "applied", "moot"),
    [
        (failed(V2), V1, V1, True),  # rolled back to what was applied: the v2 failure is moot
        (failed(V1), V1, V1, False),  # a failure of what is desired still stands
        (failed(V2), V2, V1, False),  # v2 is still desired: its failure stands
        (failed(V2), V1, None, False),  # v1 was never applied: nothing says it is fine
        (None, V1, V1, False),  # no failure at all
    ],
)
def test_a_failure_is_moot_only_when_the_desired_manifest_is_the_applied_one(
    outcome: OutcomeEvent | None, desired: bytes, applied: bytes | None, moot: bool
) -> None:
    e = Entry(KEY, manifest_sha=desired, applied_manifest_sha=applied)
    assert moot_failure(outcome, e) is moot
