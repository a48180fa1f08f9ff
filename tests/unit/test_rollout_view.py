"""The one rollout view (services/fleet/rollout/view.py), what ``driftbus rollout status`` and the
status page both render: each cluster's place in the rollout, the step that reaches a waiting
member, and the counts, one table row per case."""

from __future__ import annotations

import datetime as dt
from typing import Any

import msgspec
import pytest

from schemas.fleet import (
    ClusterRecord,
    ClusterRollout,
    Placement,
    RolloutPhase,
    RolloutSpec,
    RolloutState,
)
from schemas.messages import BundlePhase
from services.fleet.rollout.view import Seen, fleet_status, step_clusters
from services.ui import fleet as page
from tests.unit.test_fleet_cli import FLEET, status

T0 = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)


def state(**changes: Any) -> RolloutState:
    """r1 → r2 in its first step (the canary), placed in the canary only, unless changed."""
    base = RolloutState(
        bundle="web",
        target=Placement(revision="r2"),
        previous=Placement(revision="r1"),
        spec=RolloutSpec(steps=["env=canary"]),
        first_seq=3,
        clusters={"canary": ClusterRollout(revision="r2", state="assigned", step=0, seq=3)},
    )
    return msgspec.structs.replace(base, **changes)


def entry(revision: str, how: str = "ready", *, step: int = 0, seq: int = 3) -> ClusterRollout:
    return ClusterRollout(revision=revision, state=how, step=step, seq=seq)  # type: ignore[arg-type]


ROWS: list[tuple[str, RolloutState, str, tuple[str, str, int]]] = [
    ("a-placed-cluster-shows-its-placement", state(), "canary", ("assigned", "r2", 0)),
    ("a-member-not-placed-waits-for-its-step", state(), "prod-a", ("waiting", "", 1)),
    (
        "a-member-on-an-earlier-revision-waits-while-the-rollout-moves",
        state(clusters={"prod-a": entry("r1", seq=1)}),
        "prod-a",
        ("waiting", "r1", 1),
    ),
    (
        "an-earlier-placement-of-the-same-revision-name-is-not-on-the-target",
        state(clusters={"prod-a": entry("r2", seq=1)}),
        "prod-a",
        ("waiting", "r2", 1),
    ),
    (
        "a-stopped-rollout-shows-what-is-there",
        state(phase=RolloutPhase.HALTED, clusters={"prod-a": entry("r1", seq=1)}),
        "prod-a",
        ("ready", "r1", 0),
    ),
    (
        "a-refused-cluster-never-waits",
        state(clusters={"prod-a": entry("r2", "refused", step=1)}),
        "prod-a",
        ("refused", "r2", 1),
    ),
    (
        "a-removed-cluster-never-waits",
        state(clusters={"prod-a": entry("r1", "removed", seq=1)}),
        "prod-a",
        ("removed", "r1", 0),
    ),
    (
        "a-step-that-is-no-selector-holds-none-so-members-wait-for-the-whole-fleet",
        state(spec=RolloutSpec(steps=["env in (canary"])),
        "prod-a",
        ("waiting", "", 1),
    ),
    (
        "percentages-count-the-members-the-tenant-may-use",
        # 50 % of canary and prod-b (prod-a excluded) is one cluster: the canary
        state(spec=RolloutSpec(steps=["50%"]), excluded={"prod-a": "tenant limit"}),
        "prod-b",
        ("waiting", "", 1),
    ),
]


@pytest.mark.parametrize(("s", "cluster", "want"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_each_cluster_stands_where_the_view_says(
    s: RolloutState, cluster: str, want: tuple[str, str, int]
) -> None:
    rows = {r.cluster: r for r in fleet_status(s, FLEET, {}).clusters}
    assert (rows[cluster].rollout, rows[cluster].revision, rows[cluster].step) == want


def test_excluded_members_are_no_rows_and_no_step_holds_them() -> None:
    s = state(excluded={"prod-b": "tenant limit"})
    fs = fleet_status(s, FLEET, {})
    assert [r.cluster for r in fs.clusters] == ["canary", "prod-a"]
    assert (fs.ready, fs.total, fs.excluded) == (0, 2, {"prod-b": "tenant limit"})
    assert step_clusters(s, FLEET) == [{"canary"}, {"canary", "prod-a"}]


def test_a_status_names_the_phase_and_its_message_only_for_the_revision_placed() -> None:
    statuses = {
        "canary": status("canary", "r2", BundlePhase.RECONCILING, "applying"),
        "prod-a": status("prod-a", "r1", BundlePhase.READY, "all Ready"),
    }
    rows = {r.cluster: r for r in fleet_status(state(), FLEET, statuses).clusters}
    assert (rows["canary"].phase, rows["canary"].message) == ("Reconciling", "applying")
    assert (rows["prod-a"].phase, rows["prod-a"].message) == ("Ready", "")
    assert (rows["prod-a"].reported_revision, rows["prod-b"].phase) == ("r1", "NoStatus")


def test_the_command_line_and_the_page_read_one_view() -> None:
    """What ``rollout status`` prints and the page draws come from the same rows: a member
    still on the revision before is waiting in both, named by the step that reaches it."""
    s = state(clusters={**state().clusters, "prod-a": entry("r1", seq=1)})
    statuses = {("prod-a", "web"): {"phase": "Ready", "revision": "r1", "message": ""}}
    registry = {c: ClusterRecord(name=c, labels=labels) for c, labels in FLEET.items()}
    doc = page.view(statuses, registry, {"web": s}, now=T0.timestamp())
    cells = {c["cluster"]: c for c in doc["rows"][0]["cells"]}
    fs = fleet_status(s, FLEET, {"prod-a": Seen.of(statuses[("prod-a", "web")])})
    for row in fs.clusters:
        assert cells[row.cluster]["rollout"] == row.rollout, row.cluster
    assert (cells["prod-a"]["label"], cells["prod-a"]["title"]) == (
        "Waiting",
        "waiting for step 2/2 of r2",
    )
    (progress,) = doc["rollouts"]
    assert (progress["ready"], progress["total"]) == (fs.ready, fs.total)
