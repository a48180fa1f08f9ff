"""The status page's fleet view (services/ui/fleet.py): phases → colours, fleet cells waiting
for the rollout, excluded and refused clusters with their reasons, rollout progress, tenant
filtering."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from schemas.fleet import (
    ClusterRecord,
    ClusterRollout,
    Placement,
    RolloutEvent,
    RolloutPhase,
    RolloutSpec,
    RolloutState,
)
from services.ui import fleet

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
REGISTRY = {
    "canary": ClusterRecord(name="canary", labels={"env": "canary"}),
    "prod-a": ClusterRecord(name="prod-a", labels={"env": "prod"}),
    "prod-b": ClusterRecord(name="prod-b", labels={"env": "prod"}),
}


def status(phase: str, revision: str = "r2", message: str = "") -> dict[str, Any]:
    return {"phase": phase, "revision": revision, "message": message}


def rollout(bundle: str = "web", **changes: Any) -> RolloutState:
    """``bundle`` in its first step (canary), placed in canary only, unless changed."""
    fields: dict[str, Any] = {
        "bundle": bundle,
        "target": Placement(revision="r2"),
        "previous": Placement(revision="r1"),
        "spec": RolloutSpec(steps=["env=canary"], bake=30),
        "clusters": {"canary": ClusterRollout(revision="r2", state="assigned", step=0, at=T0)},
    }
    return RolloutState(**(fields | changes))


@pytest.mark.parametrize(
    ("phase", "tone"),
    [
        ("Ready", "ok"),
        ("Reconciling", "warn"),
        ("OutOfSync", "warn"),
        ("Failed", "bad"),
        ("Degraded", "bad"),
        ("Conflict", "bad"),
        ("Deleted", "none"),
        (None, "none"),
    ],
    ids=lambda v: str(v),
)
def test_a_bundle_phase_is_coloured(phase: str | None, tone: str) -> None:
    c = fleet.cell("prod-a", status(phase) if phase else None)
    assert c["tone"] == tone
    assert c["label"] == (phase or "")
    if phase is None:
        assert c["title"] == "no status"


CELLS: list[tuple[str, str, dict[str, Any] | None, RolloutState, dict[str, Any]]] = [
    (
        "placed-and-ready-shows-the-status",
        "canary",
        status("Ready"),
        rollout(clusters={"canary": ClusterRollout(revision="r2", state="ready", at=T0)}),
        {"label": "Ready", "tone": "ok", "rollout": "ready"},
    ),
    (
        "placed-without-status-yet-is-grey-nostatus",
        "canary",
        None,
        rollout(),
        {"label": "NoStatus", "tone": "none", "rollout": "assigned"},
    ),
    (
        "member-of-a-later-step-is-waiting",
        "prod-a",
        None,
        rollout(),
        {"label": "Waiting", "tone": "waiting", "rollout": "waiting"},
    ),
    (
        "member-of-a-later-step-with-an-old-status-is-still-waiting",
        "prod-b",
        status("Ready", revision="r1"),
        rollout(),
        {"label": "Waiting", "tone": "waiting", "revision": "r1"},
    ),
    (
        "excluded-by-tenant-limits-shows-the-reason",
        "prod-b",
        None,
        rollout(excluded={"prod-b": "tenant team-a may not use cluster prod-b"}),
        {
            "label": "Excluded",
            "tone": "refused",
            "title": "excluded: tenant team-a may not use cluster prod-b",
        },
    ),
    (
        "refused-by-the-driver-shows-its-message",
        "prod-a",
        None,
        rollout(
            clusters={
                "prod-a": ClusterRollout(
                    revision="r2", state="refused", message="lacks label region"
                )
            }
        ),
        {"label": "Refused", "tone": "refused", "title": "refused: lacks label region"},
    ),
    (
        "failed-placement-is-red",
        "canary",
        status("Failed", message="ConfigMap/a/b apply failed"),
        rollout(clusters={"canary": ClusterRollout(revision="r2", state="failed", at=T0)}),
        {"label": "Failed", "tone": "bad", "rollout": "failed"},
    ),
    (
        "cluster-outside-the-selector-is-plain-grey",
        "prod-a",
        None,
        rollout(selector="env=canary"),
        {"label": "", "tone": "none", "rollout": "outside", "title": "not in the fleet"},
    ),
    (
        "removed-cluster-keeps-its-last-status",
        "prod-a",
        status("Deleted"),
        rollout(clusters={"prod-a": ClusterRollout(revision="r2", state="removed")}),
        {"label": "Deleted", "tone": "none", "rollout": "removed"},
    ),
]


@pytest.mark.parametrize(
    ("cluster", "seen", "state", "want"), [c[1:] for c in CELLS], ids=[c[0] for c in CELLS]
)
def test_a_fleet_cell_says_where_the_cluster_stands(
    cluster: str, seen: dict[str, Any] | None, state: RolloutState, want: dict[str, Any]
) -> None:
    statuses = {} if seen is None else {(cluster, state.bundle): seen}
    (row,) = fleet.view(statuses, REGISTRY, {state.bundle: state}, now=T0.timestamp())["rows"]
    (got,) = [c for c in row["cells"] if c["cluster"] == cluster]
    assert {k: got.get(k) for k in want} == want, got


def test_a_waiting_cell_names_the_step_that_reaches_it() -> None:
    state = rollout(spec=RolloutSpec(steps=["env=canary", "50%"]))
    got = {c["cluster"]: c for c in fleet.view({}, REGISTRY, {"web": state})["rows"][0]["cells"]}
    # 50 % of three clusters by name order: canary and prod-a (step 2); prod-b the whole fleet
    assert "step 2/3" in got["prod-a"]["title"]
    assert "step 3/3" in got["prod-b"]["title"]


def test_rollout_progress_counts_steps_ready_clusters_and_bake_left() -> None:
    state = rollout(
        step=0,
        ready_since=T0,
        clusters={"canary": ClusterRollout(revision="r2", state="ready", at=T0)},
        excluded={"prod-b": "tenant limit"},
        recent=[
            RolloutEvent(
                bundle="web",
                revision="r2",
                seq=0,
                event="started",
                phase=RolloutPhase.PROGRESSING,
                step=0,
                at=T0,
            ),
            RolloutEvent(
                bundle="web",
                revision="r2",
                seq=1,
                event="step",
                phase=RolloutPhase.PROGRESSING,
                step=0,
                clusters=["canary"],
                at=T0,
            ),
        ],
    )
    (p,) = fleet.view({}, REGISTRY, {"web": state}, now=T0.timestamp() + 12)["rollouts"]
    assert (p["phase"], p["step"], p["steps"]) == ("Progressing", 1, 2)
    assert [(s["selector"], s["state"], s["clusters"]) for s in p["selectors"]] == [
        ("env=canary", "current", ["canary"]),
        ("(the whole fleet)", "next", ["canary", "prod-a"]),  # not the excluded prod-b
    ]
    assert (p["ready"], p["placed"], p["total"]) == (1, 1, 2)  # prod-b excluded
    assert p["bake_remaining"] == 18.0
    assert [e["event"] for e in p["events"]] == ["step", "started"]  # newest first
    assert p["events"][0]["clusters"] == ["canary"]
    assert p["excluded"] == {"prod-b": "tenant limit"}


@pytest.mark.parametrize(
    ("phase", "ready_since", "left"),
    [
        (RolloutPhase.PROGRESSING, None, None),
        (RolloutPhase.PROGRESSING, T0 - dt.timedelta(seconds=100), 0.0),
        (RolloutPhase.HALTED, T0, None),
        (RolloutPhase.COMPLETE, T0, None),
    ],
    ids=["not-ready-yet", "baked-out", "halted", "complete"],
)
def test_bake_remaining_only_while_a_step_bakes(
    phase: RolloutPhase, ready_since: dt.datetime | None, left: float | None
) -> None:
    state = rollout(phase=phase, ready_since=ready_since)
    assert fleet.progress(state, REGISTRY, T0.timestamp())["bake_remaining"] == left


def test_a_rollback_under_way_shows_how_many_are_back() -> None:
    state = rollout(
        phase=RolloutPhase.ROLLING_BACK,
        rollback=["canary", "prod-a"],
        clusters={
            "canary": ClusterRollout(revision="r1", state="ready", step=-1, at=T0),
            "prod-a": ClusterRollout(revision="r1", state="assigned", step=-1, at=T0),
        },
    )
    p = fleet.progress(state, REGISTRY, T0.timestamp())
    assert (p["phase"], p["previous"], p["rollback"], p["rollback_ready"]) == (
        "RollingBack",
        "r1",
        ["canary", "prod-a"],
        1,
    )
    assert p["ready"] == 0  # on the target r2: none
    done = fleet.progress(rollout(phase=RolloutPhase.COMPLETE), REGISTRY, T0.timestamp())
    assert (done["rollback"], done["rollback_ready"]) == ([], 0)


def test_a_tenant_sees_only_its_own_rows_and_rollouts() -> None:
    statuses = {
        ("canary", "team-a/web"): status("Ready"),
        ("prod-a", "team-b/db"): status("Failed"),
        ("prod-a", "infra"): status("Ready"),
    }
    states = {"team-a/web": rollout("team-a/web"), "team-b/api": rollout("team-b/api")}
    for tenant, rows, rollouts in [
        (None, ["infra", "team-a/web", "team-b/api", "team-b/db"], ["team-a/web", "team-b/api"]),
        ("team-a", ["team-a/web"], ["team-a/web"]),
        ("team-b", ["team-b/api", "team-b/db"], ["team-b/api"]),
        ("", ["infra"], []),
        ("team-c", [], []),
    ]:
        v = fleet.view(statuses, REGISTRY, states, tenant=tenant)
        assert [r["bundle"] for r in v["rows"]] == rows, tenant
        assert [r["bundle"] for r in v["rollouts"]] == rollouts, tenant
        shown = {c["title"] for r in v["rows"] for c in r["cells"]}
        if tenant == "team-a":
            assert not any("Failed" in t for t in shown)  # team-b's db is nowhere


def test_columns_are_the_registry_and_every_cluster_a_shown_bundle_reports_from() -> None:
    statuses = {("edge-1", "infra"): status("Ready"), ("edge-2", "team-b/db"): status("Ready")}
    v = fleet.view(statuses, REGISTRY, {}, tenant="")
    assert [c["name"] for c in v["clusters"]] == ["canary", "edge-1", "prod-a", "prod-b"]
    assert [c["registered"] for c in v["clusters"]] == [True, False, True, True]
    (row,) = v["rows"]
    assert [c["tone"] for c in row["cells"]] == ["none", "ok", "none", "none"]
    assert row["fleet"] is False


def test_a_rollout_entry_subject_names_its_bundle() -> None:
    assert fleet.rollout_bundle(fleet.ROLLOUT_PREFIX + "team-a.web") == "team-a/web"
    assert fleet.rollout_bundle(fleet.ROLLOUT_PREFIX + "=.web") == "web"
    assert fleet.rollout_bundle("$KV.driftbus-rollouts.driver") is None
