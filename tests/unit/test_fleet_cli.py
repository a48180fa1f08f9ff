"""The fleet commands' views, pure: ``rollout status`` / ``status --bundle`` rows and summary,
``rollout history`` rows, what ``rollout undo`` puts back, ``clusters`` and ``bundles`` rows,
and the parser accepting each command."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import msgspec
import pytest

from schemas.bundle import ObjectStoreRef
from schemas.cli import FleetSummary
from schemas.fleet import (
    ClusterList,
    ClusterRecord,
    ClusterRollout,
    FleetBundle,
    FleetStatus,
    Placement,
    RolloutEvent,
    RolloutHistory,
    RolloutPhase,
    RolloutSpec,
    RolloutState,
)
from schemas.messages import BundleCounts, BundlePhase, BundleStatus, MemberHeartbeat
from services.cli import lifecycle
from services.cli.fleet import clusters, rollout
from services.cli.fleet import publish as fleet
from services.cli.fleet.rollout import RolloutError
from services.cli.main import build_parser
from services.fleet.rollout import view

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
FLEET = {"canary": {"env": "canary"}, "prod-a": {"env": "prod"}, "prod-b": {"env": "prod"}}
REF = ObjectStoreRef(bucket="b", name="n", sha="0" * 64, size=1, count=1)


def state(**kw: object) -> RolloutState:
    base = RolloutState(
        bundle="app",
        target=Placement(revision="r2"),
        previous=Placement(revision="r1"),
        spec=RolloutSpec(steps=["env=canary"], bake=60),
        first_seq=3,
        step=1,
        clusters={
            "canary": ClusterRollout(revision="r2", state="ready", step=0, seq=3),
            "prod-a": ClusterRollout(revision="r2", state="assigned", step=1, seq=4),
            "prod-b": ClusterRollout(revision="r1", state="ready", step=0, seq=1),
        },
    )
    return msgspec.structs.replace(base, **kw)


def status(cluster: str, revision: str, phase: BundlePhase, message: str = "") -> BundleStatus:
    return BundleStatus(
        cluster=cluster,
        bundle="app",
        revision=revision,
        phase=phase,
        counts=BundleCounts(total=1),
        message=message,
    )


def test_each_cluster_shows_its_rollout_place_and_its_last_bundle_phase() -> None:
    seen = {
        "canary": status("canary", "r2", BundlePhase.READY),
        "prod-a": status("prod-a", "r2", BundlePhase.RECONCILING, "applying"),
    }
    fs = view.fleet_status(state(), FLEET, seen)
    rows = {r.cluster: (r.phase, r.revision, r.rollout, r.step, r.message) for r in fs.clusters}
    assert rows == {
        "canary": ("Ready", "r2", "ready", 0, ""),
        "prod-a": ("Reconciling", "r2", "assigned", 1, "applying"),
        # still on r1 from an earlier rollout: it waits for its step
        "prod-b": ("NoStatus", "r1", "waiting", 1, ""),
    }
    assert (fs.ready, fs.total, fs.step, fs.steps, fs.previous) == (1, 3, 1, 2, "r1")
    assert rollout.summary_line(fs) == "app@r2: Progressing, step 2/2, 1/3 clusters Ready"


def test_a_member_not_placed_yet_waits_for_the_step_that_holds_it() -> None:
    s = state(step=0, clusters={"canary": ClusterRollout(revision="r2", step=0, seq=3)})
    fs = view.fleet_status(s, FLEET, {})
    assert [(r.cluster, r.rollout, r.step, r.revision) for r in fs.clusters] == [
        ("canary", "assigned", 0, "r2"),
        ("prod-a", "waiting", 1, ""),
        ("prod-b", "waiting", 1, ""),
    ]
    assert rollout.status_rows(fs)[1]["revision"] == "-"


def test_a_rolled_back_cluster_is_not_shown_as_waiting() -> None:
    s = state(
        phase=RolloutPhase.ROLLED_BACK,
        message="canary: failed",
        clusters={"canary": ClusterRollout(revision="r1", state="ready", step=0, seq=5)},
    )
    fs = view.fleet_status(s, {"canary": FLEET["canary"]}, {})
    assert [(r.rollout, r.revision) for r in fs.clusters] == [("ready", "r1")]
    assert fs.ready == 0
    assert rollout.summary_line(fs).endswith("0/1 clusters Ready: canary: failed")


def rolling_back(phase: RolloutPhase = RolloutPhase.ROLLING_BACK) -> RolloutState:
    """r2 halted on the canary and prod-a: both placed back on r1, the canary Ready on it."""
    return state(
        phase=phase,
        message="canary: failed",
        rollback=["canary", "prod-a"],
        clusters={
            "canary": ClusterRollout(revision="r1", state="ready", step=-1, seq=5),
            "prod-a": ClusterRollout(revision="r1", state="assigned", step=-1, seq=6),
            "prod-b": ClusterRollout(revision="r1", state="ready", step=0, seq=1),
        },
    )


def test_a_rollback_under_way_says_how_many_are_back() -> None:
    fs = view.fleet_status(rolling_back(), FLEET, {})
    assert (fs.rollback, fs.rollback_ready) == (["canary", "prod-a"], 1)
    assert rollout.summary_line(fs) == (
        "app@r2: RollingBack, step 2/2, 0/3 clusters Ready, 1/2 back Ready on r1: canary: failed"
    )
    assert fleet.progress_line(rolling_back()) == (
        "app@r2: RollingBack, step 2/2, 0/3 clusters Ready on it, 1/2 back Ready on r1: "
        "canary: failed"
    )


@pytest.mark.parametrize(
    ("phases", "code"),
    [
        pytest.param(["RollingBack", "RollingBack", "RolledBack"], 1, id="rolled-back"),
        pytest.param(["RollingBack", "RollbackFailed"], 1, id="rollback-failed"),
        pytest.param(["Progressing", "Complete"], 0, id="complete"),
        pytest.param(["RollingBack"] * 20, 2, id="a-rollback-under-way-is-no-end"),
    ],
)
async def test_wait_follows_a_rollback_to_its_end(
    phases: list[str], code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = iter(phases)
    read: list[str] = []

    async def read_state(_js: object, _bundle: str) -> tuple[int, RolloutState]:
        phase = next(seen, phases[-1])
        read.append(phase)
        return 1, rolling_back(RolloutPhase(phase))

    monkeypatch.setattr(fleet, "read_state", read_state)
    assert await fleet.wait(None, "app", None, within=1.2 if code == 2 else 30) == code
    if code != 2:
        assert read == phases  # not one read more, not one less


def test_refused_and_excluded_clusters_are_named() -> None:
    s = state(
        clusters={"canary": ClusterRollout(revision="r2", state="refused", message="no label")},
        excluded={"prod-b": "tenant limit"},
    )
    fs = view.fleet_status(s, FLEET, {})
    assert [r.cluster for r in fs.clusters] == ["canary", "prod-a"]
    assert (fs.clusters[0].phase, fs.clusters[0].message) == ("Refused", "no label")
    assert fs.excluded == {"prod-b": "tenant limit"}


def test_pause_and_promote_asked_show_in_the_summary() -> None:
    fs = view.fleet_status(state(paused=True, promote=True), FLEET, {})
    assert "(pause asked) (promote asked)" in rollout.summary_line(fs)
    paused = view.fleet_status(state(paused=True, phase=RolloutPhase.PAUSED), FLEET, {})
    assert "pause asked" not in rollout.summary_line(paused)


def test_the_fleet_status_json_is_typed() -> None:
    fs = view.fleet_status(state(), FLEET, {})
    back = msgspec.json.decode(msgspec.json.encode(fs), type=FleetStatus)
    assert back == fs
    assert msgspec.to_builtins(fs)["clusters"][0]["cluster"] == "canary"


def fb(revision: str, *, delete: bool = False) -> FleetBundle:
    return FleetBundle(
        bundle="app", revision=revision, manifests_ref=None if delete else REF, delete=delete
    )


UNDO = [
    ("previous-revision", ["r1", "r2"], "r2", None, "r1"),
    ("skips-repeats-of-the-one-in-force", ["r1", "r2", "r2"], "r2", None, "r1"),
    ("undo-of-an-undo-goes-forward-again", ["r1", "r2", "r1"], "r1", None, "r2"),
    ("to-a-named-revision", ["r1", "r2", "r3"], "r3", "r1", "r1"),
]


@pytest.mark.parametrize(
    ("history", "in_force", "to", "want"),
    [u[1:] for u in UNDO],
    ids=[u[0] for u in UNDO],
)
def test_undo_puts_back(history: list[str], in_force: str, to: str | None, want: str) -> None:
    assert rollout.undo_target([fb(r) for r in history], in_force, to).revision == want


REFUSED = [
    ("nothing-before", ["r1"], "r1", None, "no revision before r1"),
    ("only-a-deletion-before", ["r0", "r1"], "r1", None, "no revision before r1"),
    ("unknown-revision", ["r1", "r2"], "r2", "r9", "revision r9 is not among"),
    ("the-one-in-force", ["r1", "r2"], "r2", "r2", "is the one in force already"),
]


@pytest.mark.parametrize(
    ("history", "in_force", "to", "why"),
    [u[1:] for u in REFUSED],
    ids=[u[0] for u in REFUSED],
)
def test_undo_refuses(history: list[str], in_force: str, to: str | None, why: str) -> None:
    revisions = [fb(r, delete=r == "r0") for r in history]
    with pytest.raises(RolloutError, match=why):
        rollout.undo_target(revisions, in_force, to)


def event(
    seq: int, name: str, revision: str = "r2", clusters: tuple[str, ...] = ()
) -> RolloutEvent:
    return RolloutEvent(
        bundle="app",
        revision=revision,
        seq=seq,
        event=name,
        phase=RolloutPhase.PROGRESSING,
        step=0,
        clusters=list(clusters),
        at=NOW,
    )


def test_history_keeps_the_order_and_drops_a_republished_transition() -> None:
    events = [event(0, "started"), event(1, "step", clusters=("a", "b")), event(1, "step")]
    got = rollout.in_order(events)
    assert [e.seq for e in got] == [0, 1]
    rows = rollout.history_rows(got)
    assert rows[1] | {"at": ""} == {
        "at": "",
        "revision": "r2",
        "event": "step",
        "phase": "Progressing",
        "step": 1,
        "clusters": "a,b",
        "message": "",
    }
    assert rows[0]["at"] == "2026-11-26T12:00:00+00:00"
    doc = RolloutHistory(bundle="app", events=got)
    assert msgspec.json.decode(msgspec.json.encode(doc), type=RolloutHistory) == doc


def beat(cluster: str, role: Literal["watcher", "applier"], age: float) -> MemberHeartbeat:
    return MemberHeartbeat(
        cluster=cluster, role=role, id=f"{role}-1", at=NOW - dt.timedelta(seconds=age)
    )


def test_clusters_are_served_only_with_a_live_watcher_and_applier() -> None:
    records = {
        n: ClusterRecord(name=n, labels=labels, kube_version="v1.31.0")
        for n, labels in FLEET.items()
    }
    beats: dict[str, dict[str, MemberHeartbeat | None]] = {
        "canary": {
            "watcher": beat("canary", "watcher", 2),
            "applier": beat("canary", "applier", 4),
        },
        "prod-a": {
            "watcher": beat("prod-a", "watcher", 2),
            "applier": beat("prod-a", "applier", 90),
        },
        "prod-b": {"watcher": None, "applier": None},
    }
    cl = clusters.cluster_list(records, beats, NOW)
    got = {c.name: (c.watchers, c.appliers, c.served, c.last_seen) for c in cl.clusters}
    assert got == {
        "canary": (["watcher-1"], ["applier-1"], True, NOW - dt.timedelta(seconds=2)),
        "prod-a": (["watcher-1"], [], False, NOW - dt.timedelta(seconds=2)),
        "prod-b": ([], [], False, None),
    }
    rows = clusters.table_rows(cl, NOW)
    assert rows[0] == {
        "name": "canary",
        "labels": "env=canary",
        "version": "v1.31.0",
        "watcher": "watcher-1",
        "applier": "applier-1",
        "last_seen": "2s ago",
        "served": "yes",
    }
    assert (rows[2]["last_seen"], rows[2]["served"], rows[2]["watcher"]) == ("never", "no", "-")
    assert msgspec.json.decode(msgspec.json.encode(cl), type=ClusterList) == cl


def test_bundles_lists_a_fleet_bundle_with_its_clusters_ready() -> None:
    summary = lifecycle.fleet_summary(state())
    assert summary == FleetSummary(
        phase="Progressing", revision="r2", step=2, steps=2, ready=1, total=3
    )
    assert lifecycle.fleet_table_row("app", summary) == {
        "bundle": "app",
        "phase": "Progressing",
        "revision": "r2",
        "step": "2/2",
        "clusters": "1/3 Ready",
    }
    # -o json: each cluster's row of a fleet bundle carries its rollout
    st = BundleStatus(
        cluster="c1",
        bundle="app",
        revision="r2",
        phase=BundlePhase.READY,
        counts=BundleCounts(total=1, applied=1, ready=1),
    )
    row = lifecycle.bundle_row(st, dt.datetime.now(dt.UTC), summary)
    assert msgspec.json.decode(msgspec.json.encode(row))["fleet"]["ready"] == 1


PARSED = [
    ("clusters-list", ["clusters", "-o", "json"], {"clusters_command": None, "output": "json"}),
    (
        "clusters-label",
        ["clusters", "label", "c1", "env=prod", "tier-"],
        {"clusters_command": "label", "name": "c1", "changes": ["env=prod", "tier-"]},
    ),
    ("clusters-remove", ["clusters", "remove", "c1"], {"clusters_command": "remove"}),
    ("rollout-pause", ["rollout", "pause", "app"], {"action": "pause", "bundle": "app"}),
    (
        "rollout-undo-to",
        ["rollout", "undo", "t/app", "--to", "r1", "--wait"],
        {"action": "undo", "bundle": "t/app", "to": "r1", "wait": True},
    ),
    ("rollout-history-json", ["rollout", "history", "app", "-o", "json"], {"output": "json"}),
]


@pytest.mark.parametrize(("argv", "want"), [p[1:] for p in PARSED], ids=[p[0] for p in PARSED])
def test_the_parser_takes_the_fleet_commands(argv: list[str], want: dict[str, object]) -> None:
    args = build_parser().parse_args(argv)
    assert {k: getattr(args, k) for k in want} == want
