"""The wire → event adapter the planner and `driftbus plan` share (planner/rule/facts.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from schemas.decision import DecisionReason
from schemas.messages import AppliedEvent, ObjectPhase, OutcomeEvent, ServerEvent
from schemas.subjects import ObjectKey
from services.core.manifest import rv_int
from services.planner.rule import facts
from services.planner.rule.decide import (
    Applied,
    Declined,
    Entry,
    Event,
    Failed,
    Observed,
    Working,
)

KEY = ObjectKey("", "ConfigMap", "ns", "a")
SHA, OTHER = b"\x01" * 32, b"\x02" * 32
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
LATER = T0 + dt.timedelta(seconds=10)


def outcome(phase: ObjectPhase, at: dt.datetime = LATER, sha: bytes = SHA) -> OutcomeEvent:
    return OutcomeEvent(
        cluster="c", key=KEY, bundle="b", revision="r", manifest_sha=sha.hex(), phase=phase, at=at
    )


def entry(**kw: object) -> Entry:
    return Entry(KEY, manifest_sha=SHA, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("oc", "known", "expected"),
    [
        pytest.param(
            outcome(ObjectPhase.FAILED),
            None,
            Failed(SHA, LATER.timestamp()),
            id="failed-first-word",
        ),
        pytest.param(
            outcome(ObjectPhase.CONFLICT),
            entry(applied_at=T0.timestamp()),
            Failed(SHA, LATER.timestamp()),
            id="conflict-after-an-older-apply",
        ),
        pytest.param(
            outcome(ObjectPhase.FAILED, at=T0),
            entry(applied_at=LATER.timestamp()),
            None,
            id="failure-older-than-the-last-apply-says-nothing",
        ),
        pytest.param(
            outcome(ObjectPhase.FAILED, at=T0),
            entry(failed_at=LATER.timestamp()),
            None,
            id="failure-older-than-the-last-failure-says-nothing",
        ),
        pytest.param(
            outcome(ObjectPhase.WAITING),
            entry(inflight=SHA),
            Working(SHA, LATER.timestamp()),
            id="waiting-on-the-intent-in-flight",
        ),
        pytest.param(
            outcome(ObjectPhase.RETRYING),
            entry(inflight=OTHER),
            None,
            id="retrying-an-intent-no-longer-in-flight",
        ),
        pytest.param(outcome(ObjectPhase.WAITING), None, None, id="waiting-unknown-object"),
        pytest.param(
            outcome(ObjectPhase.KEPT),
            entry(),
            Declined(DecisionReason.NOT_OWNED),
            id="prune-declined",
        ),
        pytest.param(outcome(ObjectPhase.APPLIED), entry(), None, id="not-an-outcome-phase"),
    ],
)
def test_outcome(oc: OutcomeEvent, known: Entry | None, expected: Event | None) -> None:
    assert facts.outcome(oc, known) == expected


def test_observed_and_applied_carry_every_field() -> None:
    ev = ServerEvent(
        cluster="c", key=KEY, resource_version="42", server_sha=SHA.hex(), bundle="b",
        api_version="v1", keep=True, watcher="w",
    )  # fmt: skip
    assert facts.observed(ev) == Observed(42, SHA, False, "b", api_version="v1", keep=True)
    gone = ServerEvent(
        cluster="c", key=KEY, resource_version="43", server_sha=None, deleted=True, watcher="w"
    )
    assert facts.observed(gone) == Observed(43, None, True, "", api_version="", keep=False)
    ap = AppliedEvent(
        cluster="c", key=KEY, bundle="b", revision="r", manifest_sha=SHA.hex(),
        apply_sha=OTHER.hex(), resource_version="7", applied_at=LATER,
    )  # fmt: skip
    assert facts.applied(ap) == Applied(SHA, OTHER, 7, False, LATER.timestamp(), "b", "r")


@pytest.mark.parametrize(
    ("rv", "expected"),
    [
        ("42", 42),
        ("9223372036854775807", 2**63 - 1),  # etcd's largest revision
        ("9223372036854775808", 0),  # over int64: no store packs it, nothing real says it
        ("9" * 5000, 0),  # int() refuses it (4300 digits): it crashed the watcher's supersedes
        ("", 0),
        ("12a", 0),
        ("٣", 0),  # a digit to str.isdigit, not to etcd
    ],
)
def test_a_resource_version_is_a_64_bit_number_or_zero(rv: str, expected: int) -> None:
    assert rv_int(rv) == expected
