"""A finished Job that its TTL controller deletes is not re-created in a loop (issue 15).

The rule: a Job that completed and sets ``ttlSecondsAfterFinished`` is retiring; its tombstone
says ``retired``; the planner takes that deletion as the Job's end, not drift — no apply, the
object counts as Ready — until the manifest changes (a new Job to run). A Job deleted by anyone
before it completed, or one without a TTL, is re-created as any deleted object is.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.subjects import ObjectKey
from services.core.health import retiring
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import HIT, Applied, Decision, Desired, Entry, Observed, step

KEY = ObjectKey("batch", "Job", "ns", "migrate")


def _sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _job(ttl: Any = 0, **conditions: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {}}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": spec,
        "status": {"conditions": [{"type": t, "status": v} for t, v in conditions.items()]},
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (_job(0, Complete="True"), True),
        (_job(3600, Complete="True"), True),
        (_job(None, Complete="True"), False),  # no TTL: nobody removes it by design
        (_job(0), False),  # still running
        (_job(0, Failed="True"), False),  # failed: its deletion is re-created and seen failing
        (_job(0, Complete="False"), False),
        (_job(-1, Complete="True"), False),
        (_job(True, Complete="True"), False),
        ({**_job(0, Complete="True"), "kind": "Pod"}, False),
        ({**_job(0, Complete="True"), "apiVersion": "example.com/v1"}, False),
    ],
    ids=[
        "ttl-0",
        "ttl-1h",
        "no-ttl",
        "running",
        "failed",
        "not-complete",
        "negative",
        "bool",
        "other-kind",
        "other-group",
    ],
)
def test_retiring(obj: dict[str, Any], expected: bool) -> None:
    assert retiring(obj) is expected


M1, M2, S1 = _sha("m1"), _sha("m2"), _sha("s1")
APPLIED = [Desired("b", "r1", M1), Applied(M1, S1, 10), Observed(10, S1, owner_bundle="b")]


def _run(events: list[Any]) -> tuple[Entry, list[Decision | None]]:
    e, out = Entry(KEY), []
    for ev in events:
        e, d = step(e, ev)
        out.append(d)
    return e, out


def test_a_retired_deletion_is_not_drift_until_the_manifest_changes() -> None:
    e, out = _run([*APPLIED, Observed(12, None, deleted=True, retired=True)])
    assert out[-1] is None  # no apply
    assert not e.drifted
    e, d = step(e, Desired("b", "r1", M1))  # a republish of the same revision
    assert d == HIT
    e, d = step(e, Desired("b", "r2", M2))  # a new Job to run
    assert d == Decision(A.APPLY, R.MANIFEST)


def test_any_other_deletion_of_a_job_is_re_created() -> None:
    _, out = _run([*APPLIED, Observed(12, None, deleted=True)])
    assert out[-1] == Decision(A.APPLY, R.DELETED)


def test_the_store_keeps_it_and_counts_it_ready() -> None:
    e, _ = _run([*APPLIED, Observed(12, None, deleted=True, retired=True)])
    store = EntryStore()
    store["c", KEY] = e
    assert store["c", KEY] == e
    p = store.progress(("c", KEY))
    assert p is not None
    assert (p.retired, p.drifted, p.applied, p.observed) == (True, False, True, True)


def test_the_watcher_reports_a_job_its_controller_is_removing_as_retired() -> None:
    from services.watcher.facts import change

    done = _job(0, Complete="True")
    done["metadata"] |= {"namespace": "ns", "resourceVersion": "20"}
    terminating = {**done, "metadata": {**done["metadata"], "deletionTimestamp": "now"}}
    _, fact = change(terminating, None, "c", "w")
    assert fact is not None
    seen, ev = fact
    assert (ev.deleted, ev.retired, seen.sha) == (True, True, None)
    assert change(terminating, seen, "c", "w")[1] is None  # said once
    _, live = change(done, None, "c", "w")
    assert live is not None
    assert live[0].retiring  # a relist noticing it gone later still knows
    assert not live[1].deleted
