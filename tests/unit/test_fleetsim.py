"""fleet-sim's counters (bench/fleetsim_members.py, bench/fleetsim.py): an object counts as applied
only when the simulated API server holds the expected manifest and the applier published a fact
with that manifest's SHA; a run whose count falls short says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import fleetsim_plot
from bench.fleetsim import calm, shortfall
from bench.fleetsim_members import configmaps, objects_applied
from schemas.subjects import ObjectKey
from services.core.sha import manifest_sha

EXPECTED = {(m["metadata"]["namespace"], m["metadata"]["name"]): m for m in configmaps(3)}


def live_and_shas(
    manifests: list[dict[str, Any]],
) -> tuple[dict[ObjectKey, Any], dict[ObjectKey, str]]:
    live = {
        ObjectKey.of(m): {**m, "metadata": {**m["metadata"], "resourceVersion": "7"}}
        for m in manifests
    }
    return live, {ObjectKey.of(m): manifest_sha(m).hex() for m in manifests}


def test_every_object_at_its_manifest_with_its_fact_counts() -> None:
    live, applied = live_and_shas(configmaps(3))
    assert objects_applied(live, applied, dict(applied), EXPECTED) == 3


def test_an_object_without_its_fact_or_with_another_manifest_does_not_count() -> None:
    live, applied = live_and_shas(configmaps(3))
    keys = sorted(live, key=str)
    reported = dict(applied)
    del reported[keys[0]]  # applied, but no fact published
    reported[keys[1]] = "00" * 32  # a fact about another manifest
    assert objects_applied(live, applied, reported, EXPECTED) == 1


def test_an_object_holding_other_data_does_not_count() -> None:
    changed = configmaps(3)
    changed[2] = {**changed[2], "data": {"index": "2", "payload": "stale"}}
    live, applied = live_and_shas(changed)
    assert objects_applied(live, applied, dict(applied), EXPECTED) == 2


def test_a_run_fails_unless_clusters_times_objects_were_applied() -> None:
    assert shortfall({"objects_applied": 3000}, 30, 100) == ""
    why = shortfall({"objects_applied": 2990, "applied": 3000}, 30, 100)
    assert "2990 of 3000" in why
    assert "'applied': 3000" in why
    assert shortfall({}, 1, 1) != ""


async def test_a_repetition_waits_for_a_calm_machine_no_longer_than_it_may() -> None:
    load = await calm(0.0)
    assert len(load) == 3


def test_the_rollouts_are_drawn(tmp_path: Path) -> None:
    out = tmp_path / "fleet-sim.png"
    curves = [[(0.0, 0, 0), (1.5, 10, 0), (3.0, 100, 10), (9.0, 1000, 1000)], []]
    fleetsim_plot.plot(1000, 100, curves, 60.0, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
