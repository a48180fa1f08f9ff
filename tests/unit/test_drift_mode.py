"""``drift: warn`` (issue 15): drift is reported, never written."""

from __future__ import annotations

import hashlib

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.messages import BundlePhase
from schemas.subjects import ObjectKey
from services.planner.rule.decide import HIT, Applied, Decision, Desired, Entry, Observed, step
from services.planner.status.phase import Tally, bundle_phase

KEY = ObjectKey("", "ConfigMap", "ns", "cm")


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


M1, M2, S1, OTHER = _sha("m1"), _sha("m2"), _sha("s1"), _sha("someone else")


def _run(correct: bool, *events: object) -> list[Decision | None]:
    e, out = Entry(KEY), []
    for ev in (Desired("b", "r1", M1, correct_drift=correct), Applied(M1, S1, 10), *events):
        e, d = step(e, ev)  # type: ignore[arg-type]
        out.append(d)
    return out


def test_warn_writes_nothing_on_drift_or_deletion_and_correct_corrects() -> None:
    drift = Observed(11, OTHER)
    deleted = Observed(11, None, deleted=True)
    assert _run(True, drift)[-1] == Decision(A.APPLY, R.DRIFT)
    assert _run(False, drift)[-1] is None
    assert _run(True, deleted)[-1] == Decision(A.APPLY, R.DELETED)
    assert _run(False, deleted)[-1] is None


def test_warn_still_applies_what_the_manifest_changes() -> None:
    out = _run(False, Observed(11, OTHER), Desired("b", "r2", M2, correct_drift=False))
    assert out[-1] == Decision(A.APPLY, R.MANIFEST)
    # and a republish of an in-sync object is a hit as ever
    assert _run(False, Observed(10, S1), Desired("b", "r1", M1, correct_drift=False))[-1] == HIT


def test_a_drifted_bundle_is_out_of_sync_not_ready() -> None:
    t = Tally("r1", total=2, applied=2, ready=1, drifted=1)
    assert bundle_phase(t)[0] is BundlePhase.OUT_OF_SYNC
