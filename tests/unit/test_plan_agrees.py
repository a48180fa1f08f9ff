"""`driftbus plan` and the planner decide alike (issue 17): both read facts through
``planner.rule.facts``; a plan sees only the compacted streams (the last APPLIED, SERVER and
OUTCOMES message of an object), a planner saw every fact as it came. For scripted histories that end
settled (every intent answered), the plan of the next publish is what the planner then decides.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pytest

from schemas.messages import AppliedEvent, ObjectPhase, OutcomeEvent, ServerEvent
from schemas.subjects import ObjectKey
from services.cli.plan.explain import decide_republish
from services.core.sha import manifest_sha
from services.planner.rule import facts
from services.planner.rule.decide import Decision, Desired, Entry, Removed, step

KEY = ObjectKey("", "ConfigMap", "ns", "a")
BUNDLE = "b"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def manifest(version: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns", "labels": {"driftbus.dev/bundle": BUNDLE}},
        "data": {"v": str(version)},
    }


def sha(version: int) -> bytes:
    return manifest_sha(manifest(version))


def live(version: int) -> str:
    """The SHA of the live object after an apply of ``version`` (the server defaults fields)."""
    return hashlib.sha256(f"live-{version}".encode()).hexdigest()


def at(step_no: int) -> dt.datetime:
    return T0 + dt.timedelta(seconds=step_no)


def applied(version: int, rv: int, *, deleted: bool = False) -> AppliedEvent:
    return AppliedEvent(
        cluster="c", key=KEY, bundle=BUNDLE, revision=f"r{version}",
        manifest_sha=sha(version).hex(), apply_sha=None if deleted else live(version),
        resource_version=str(rv), deleted=deleted, applied_at=at(rv),
    )  # fmt: skip


def server(version: int | None, rv: int, *, changed: bool = False) -> ServerEvent:
    """The watcher's fact: the object as applied (``version``), changed out of band, or gone."""
    return ServerEvent(
        cluster="c", key=KEY, resource_version=str(rv), bundle=BUNDLE, watcher="w",
        server_sha=None if version is None else live(version + 1000 if changed else version),
        deleted=version is None,
    )  # fmt: skip


def outcome(version: int, phase: ObjectPhase, rv: int) -> OutcomeEvent:
    return OutcomeEvent(
        cluster="c", key=KEY, bundle=BUNDLE, revision=f"r{version}",
        manifest_sha=sha(version).hex(), phase=phase, message="refused", at=at(rv),
    )  # fmt: skip


def publish(version: int) -> Desired:
    return Desired(BUNDLE, f"r{version}", sha(version))


Step = Desired | Removed | AppliedEvent | ServerEvent | OutcomeEvent

HISTORIES: dict[str, list[Step]] = {
    "applied-and-seen": [publish(1), applied(1, 1), server(1, 1)],
    "seen-before-its-apply-fact": [publish(1), server(1, 1), applied(1, 1)],
    "a-newer-revision-failed": [
        publish(1), applied(1, 1), server(1, 1), publish(2), outcome(2, ObjectPhase.FAILED, 2),
    ],
    "a-conflict": [publish(1), outcome(1, ObjectPhase.CONFLICT, 1)],
    "failed-then-applied": [
        publish(1), applied(1, 1), server(1, 1), publish(2), outcome(2, ObjectPhase.FAILED, 2),
        publish(3), applied(3, 3), server(3, 3),
    ],
    "drift-corrected": [
        publish(1), applied(1, 1), server(1, 1), server(1, 2, changed=True), applied(1, 3),
        server(1, 3),
    ],
    "deleted-out-of-band-and-restored": [
        publish(1), applied(1, 1), server(1, 1), server(None, 2), applied(1, 3), server(1, 3),
    ],
    "pruned-then-wanted-again": [
        publish(1), applied(1, 1), server(1, 1), Removed(BUNDLE, "r2", prune=True),
        applied(1, 2, deleted=True), server(None, 2),
    ],
}  # fmt: skip


def planner_decides(history: list[Step], next_version: int) -> Decision | None:
    """A live planner: every fact folded with ``step`` as it came, then the publish."""
    entry = Entry(KEY)
    for item in history:
        match item:
            case Desired() | Removed():
                entry, _ = step(entry, item)
            case OutcomeEvent():
                if (event := facts.outcome(item, entry)) is not None:
                    entry, _ = step(entry, event)
            case ServerEvent():
                entry, _ = step(entry, facts.observed(item))
            case AppliedEvent():
                entry, _ = step(entry, facts.applied(item))
    _, decision = step(entry, publish(next_version))
    return decision


def plan_decides(history: list[Step], next_version: int) -> Decision | None:
    """`driftbus plan`: only the last message of each stream, in the order it reads them."""
    last: dict[type, facts.Fact] = {}
    for item in history:
        if not isinstance(item, Desired | Removed):
            last[type(item)] = item
    compacted = [last[t] for t in (AppliedEvent, ServerEvent, OutcomeEvent) if t in last]
    return decide_republish(facts.rebuilt(KEY, compacted), BUNDLE, manifest(next_version))


@pytest.mark.parametrize("history", HISTORIES.values(), ids=HISTORIES.keys())
@pytest.mark.parametrize("next_version", [1, 2, 3, 4], ids=lambda v: f"then-publish-v{v}")
def test_plan_predicts_the_planner(history: list[Step], next_version: int) -> None:
    assert summary(plan_decides(history, next_version)) == summary(
        planner_decides(history, next_version)
    )


def summary(d: Decision | None) -> tuple[str, str] | None:
    return (str(d.action), str(d.reason)) if d is not None else None
