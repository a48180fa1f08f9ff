"""The planner's decisions on real install manifests (``../shared/corpus``) stay what they were.

A refactoring of the planner (issue 32: the rooms; issue 33: the bus contract) must not change a
decision. For every corpus set this takes the revision in (``checked_revision``), decides each
object from nothing (new), folds an applied fact for each (waiting for the watcher), a watcher
fact that agrees for half, differs for a quarter and is a tombstone for the rest (hits,
drift, deleted), then removes a third
(prune), and at each stage records every decision, the intent's message id, and the bundle's
status. The record is compared with ``golden/corpus_decisions.jsonl``.

When a change is meant to change decisions, write the record anew and read its diff:
``python -m tests.unit.test_corpus_decisions --write``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.messages import Bundle, BundleOptions
from services.core.scope import Scopes
from services.inputs.load import load_paths
from services.planner.memory.cluster import ClusterState
from services.planner.rule import decide, messages
from services.planner.rule.decide import Applied, Desired, Entry, Event, Observed
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView, checked_revision
from services.planner.status.ledger import Ledger
from services.planner.status.report import bundle_status

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
GOLDEN = Path(__file__).parent / "golden" / "corpus_decisions.jsonl"
SETS = sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else []


def record(directory: str) -> dict[str, Any]:
    """Every decision, intent id and bundle status of one corpus set, stage by stage."""
    loaded = load_paths([str(CORPUS / directory)])
    bundle = Bundle(
        cluster="c1",
        bundle=f"corpus-{directory}",
        revision="r1",
        options=BundleOptions(namespace="corpus"),
    )
    desired = checked_revision(bundle, [m.obj for m in loaded.manifests], Scopes())
    state = ClusterState(cluster="c1", live=True, watcher_synced=True)
    view = BundleView.of(bundle, 7)
    view.keys = {slot[1] for slot, _, _ in desired}
    state.bundles[("c1", view.name)] = view
    ledger = Ledger()
    out: dict[str, Any] = {"set": directory, "objects": len(desired), "stages": []}

    def stage(name: str, events: list[tuple[Slot, Event]]) -> None:
        rows = []
        for slot, event in events:
            entry, decision = decide.step(state.entries.get(slot) or Entry(key=slot[1]), event)
            state.entries[slot] = entry
            row: list[Any] = [str(slot[1]), type(event).__name__]
            row.append(None if decision is None else f"{decision.action}:{decision.reason}")
            if decision is not None and decision.writes:
                sent = messages.intent(
                    slot,
                    entry,
                    decision,
                    view,
                    "r1",
                    manifest=state.details.manifest(slot),
                    planner_id="p",
                    fencing_token=3,
                )
                row.append(None if sent is None else sent[1])
            rows.append(row)
        status = bundle_status(state, view, ledger)
        shown = {
            "phase": str(status.phase),
            "message": status.message,
            "counts": str(status.counts),
        }
        out["stages"].append({"stage": name, "rows": rows, "status": shown})

    for slot, encoded, _ in desired:
        state.details.set_manifest(slot, encoded)
    stage("desired", [(slot, Desired(view.name, "r1", sha)) for slot, _, sha in desired])
    applied = [hashlib.sha256(sha).digest() for _, _, sha in desired]
    stage(
        "applied",
        [
            (slot, Applied(sha, applied[i], 10 + i, at=5.0, bundle=view.name))
            for i, (slot, _, sha) in enumerate(desired)
        ],
    )
    stage(
        "observed",
        [
            (slot, observed(i, applied[i], owner_bundle=view.name, api_version="v1"))
            for i, (slot, _, _) in enumerate(desired)
        ],
    )
    stage("removed", [(slot, state.removed(slot, view)) for slot, _, _ in desired[::3]])
    return out


def observed(i: int, applied: bytes, **fields: Any) -> Observed:
    """The watcher's fact about object ``i``: as applied (odd), changed, or deleted (every 4th)."""
    if i % 2:
        return Observed(10 + i, applied, **fields)
    if i % 4:
        return Observed(20 + i, b"x" * 32, **fields)
    return Observed(20 + i, None, deleted=True, **fields)


def golden() -> dict[str, dict[str, Any]]:
    lines = GOLDEN.read_text().splitlines() if GOLDEN.exists() else []
    return {(r := json.loads(line))["set"]: r for line in lines}


@pytest.mark.skipif(not SETS, reason=f"no corpus at {CORPUS} (../shared/corpus)")
@pytest.mark.parametrize("directory", SETS)
def test_the_planner_decides_the_corpus_as_recorded(directory: str) -> None:
    recorded = golden().get(directory)
    assert recorded is not None, f"{directory}: not recorded in {GOLDEN.name} (--write)"
    now = json.loads(json.dumps(record(directory)))
    for was, is_ in zip(recorded["stages"], now["stages"], strict=True):
        assert is_ == was, f"{directory}: stage {was['stage']} decides otherwise than recorded"
    assert now == recorded


def test_every_corpus_set_is_recorded() -> None:
    if SETS:
        assert sorted(golden()) == SETS


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text("".join(json.dumps(record(d), sort_keys=True) + "\n" for d in SETS))
    print(f"wrote {GOLDEN} ({len(SETS)} sets)")
