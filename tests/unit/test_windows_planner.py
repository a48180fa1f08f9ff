"""Sync windows in the planner (issue 34): the hold a window puts on a bundle's writes, the
override, what decision records say, the bundle's phase and message, the page's and the CLI's
view of the windows, and the page's hit ratio before anything could hit."""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from pathlib import Path

import pytest

from schemas.cli import BundleWindow
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.messages import Bundle, BundleCounts, BundlePhase, BundleStatus
from schemas.subjects import ObjectKey
from schemas.windows import SyncWindow, WindowsFile
from services.cli import windows as cli_windows
from services.planner.memory.cluster import ClusterState
from services.planner.memory.gates import Gates
from services.planner.rule.decide import Decision, Entry
from services.planner.rule.revision import BundleView
from services.planner.status.ledger import Ledger
from services.planner.status.report import bundle_status
from services.ui.live import LiveState
from services.windows import document as wd

KEY = ObjectKey("", "ConfigMap", "ns", "a")
M = hashlib.sha256(b"m").digest()
A = hashlib.sha256(b"a").digest()
NOON = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
FREEZE = SyncWindow(kind="deny", name="freeze", schedule="0 12 * * *", duration="1h")
HELD = Decision(DecisionAction.HOLD, DecisionReason.WINDOW)
APPLY = Decision(DecisionAction.APPLY, DecisionReason.MANIFEST)


def state(*windows: SyncWindow, at: dt.datetime = NOON) -> ClusterState:
    st = ClusterState("prod", gates=Gates(clock=lambda: at.timestamp()))
    st.gates.set_windows(wd.compiled(WindowsFile(windows=windows)))
    return st


def test_an_open_deny_window_holds_and_names_itself() -> None:
    st = state(FREEZE, at=NOON + dt.timedelta(minutes=10))
    hold = st.hold("web")
    assert hold is not None
    assert hold.reason is DecisionReason.WINDOW
    assert hold.window == "freeze"
    assert hold.message == 'deny window "freeze" until 2026-06-01T13:00+00:00'
    assert st.window_note("web", HELD) == "freeze"
    assert st.window_note("web", APPLY) == ""  # no override: nothing went through it


def test_no_window_no_hold() -> None:
    assert state(FREEZE, at=NOON - dt.timedelta(minutes=1)).hold("web") is None
    assert ClusterState("prod").hold("web") is None
    other = SyncWindow(kind="deny", schedule="* * * * *", duration="1h", clusters=("dev-*",))
    assert state(other).hold("web") is None


@pytest.mark.parametrize(
    ("labels", "held"),
    [
        pytest.param({"env": "prod"}, True, id="prod-labelled"),
        pytest.param({"env": "dev"}, False, id="dev-labelled"),
        pytest.param({}, False, id="no-labels"),
        pytest.param(None, True, id="labels-unknown-held"),
    ],
)
def test_a_window_by_cluster_label_holds_what_the_clusters_labels_say(
    labels: dict[str, str] | None, held: bool
) -> None:
    """The planner asks a window's ``clusterSelector`` of its cluster's registry labels (as
    it follows them); unknown labels: held, a freeze is never skipped for want of them."""
    prod_freeze = SyncWindow(
        kind="deny", name="prod", schedule="0 12 * * *", duration="1h", cluster_selector="env=prod"
    )
    st = state(prod_freeze, at=NOON + dt.timedelta(minutes=10))
    st.cluster_labels = labels
    assert (st.hold("web") is not None) is held


def test_an_override_writes_through_and_is_noted() -> None:
    st = state(FREEZE, at=NOON + dt.timedelta(minutes=10))
    st.gates.overrides.add("web")
    assert st.hold("web") is None
    assert st.window_note("web", APPLY) == "override: freeze"
    assert st.window_note("web", Decision(DecisionAction.HIT, DecisionReason.HIT)) == ""
    # outside the window an override has nothing to override
    assert state(FREEZE, at=NOON - dt.timedelta(hours=2)).window_note("web", APPLY) == ""


def test_suspension_comes_before_a_window() -> None:
    st = state(FREEZE, at=NOON)
    st.gates.suspended["web"] = "incident"
    hold = st.hold("web")
    assert hold is not None
    assert hold.reason is DecisionReason.SUSPENDED


def test_answers_are_cached_until_the_next_change_then_asked_again() -> None:
    now = [NOON + dt.timedelta(minutes=59)]
    st = ClusterState("prod", gates=Gates(clock=lambda: now[0].timestamp()))
    st.gates.set_windows(wd.compiled(WindowsFile(windows=(FREEZE,))))
    st.bundles[("prod", "web")] = BundleView.of(
        Bundle(cluster="prod", bundle="web", revision="r"), 1
    )
    assert st.hold("web") is not None
    assert st.next_window_change() == (NOON + dt.timedelta(hours=1)).timestamp()
    now[0] = NOON + dt.timedelta(hours=1)  # the window closes
    assert st.hold("web") is None
    assert st.next_window_change() == (NOON + dt.timedelta(days=1)).timestamp()
    st.gates.set_windows(())
    assert st.next_window_change() is None


def entry(**kw: object) -> Entry:
    base: dict[str, object] = {
        "bundle": "web", "revision": "r1", "manifest_sha": M, "applied_manifest_sha": M,
        "apply_sha": A, "applied_rv": 5, "server_sha": A, "server_rv": 5, "owner_bundle": "web",
    }  # fmt: skip
    return Entry(KEY, **(base | kw))  # type: ignore[arg-type]


def status_of(st: ClusterState, e: Entry) -> BundleStatus:
    st.watcher_synced = True
    v = BundleView.of(Bundle(cluster="prod", bundle="web", revision="r2"), 1)
    v.keys.add(KEY)
    st.bundles[("prod", "web")] = v
    st.entries[("prod", KEY)] = e
    return bundle_status(st, v, Ledger())


def test_a_held_revision_is_out_of_sync_naming_the_window() -> None:
    st = state(FREEZE, at=NOON + dt.timedelta(minutes=5))
    new = hashlib.sha256(b"new").digest()
    status = status_of(st, entry(revision="r2", manifest_sha=new))  # not applied yet
    assert status.phase is BundlePhase.OUT_OF_SYNC
    assert status.message.startswith('deny window "freeze" until 2026-06-01T13:00+00:00: ')
    assert not status.suspended
    assert status.window == "freeze"  # what a fleet rollout reads: its step's time stops


def test_a_held_drift_is_out_of_sync_naming_the_window() -> None:
    st = state(FREEZE, at=NOON + dt.timedelta(minutes=5))
    status = status_of(st, entry(server_sha=M, server_rv=6))  # changed out of band
    assert status.phase is BundlePhase.OUT_OF_SYNC
    assert status.message.startswith('deny window "freeze" until ')


def test_the_cli_says_what_holds_a_bundle_and_the_next_change() -> None:
    inside = NOON + dt.timedelta(minutes=5)
    held = status_of(state(FREEZE, at=inside), entry()).windows
    assert cli_windows.bundle_lines(held) == [
        'sync window: deny window "freeze" until 2026-06-01T13:00+00:00 (writes held)',
        "  next change 2026-06-01T13:00+00:00: writes allowed",
    ]
    before = status_of(state(FREEZE, at=NOON - dt.timedelta(hours=1)), entry()).windows
    assert cli_windows.bundle_lines(before) == [
        "sync windows: writes allowed now",
        '  next change 2026-06-01T12:00+00:00: deny window "freeze" until 2026-06-01T13:00+00:00',
    ]
    spec = WindowsFile(windows=(FREEZE,))
    assert cli_windows.cluster_lines(spec, "prod", inside) == [
        'sync window deny "freeze" (bundles *): open, closes 2026-06-01T13:00+00:00'
    ]
    assert cli_windows.bundle_lines(status_of(state(at=inside), entry()).windows) == []
    # read after the change it names, the published answer is stale, and says so
    after = NOON + dt.timedelta(hours=2)
    assert cli_windows.bundle_lines(held, now=inside) == cli_windows.bundle_lines(held)
    assert "stale" in cli_windows.bundle_lines(held, now=after)[-1]
    assert cli_windows.cluster_lines(spec, "prod", inside, "bad")[0] == (
        "sync windows: the latest on the bus are unusable (bad)"
    )


def test_an_unusable_latest_version_keeps_the_last_good_one() -> None:
    good = wd.dump(WindowsFile(windows=(FREEZE,)))
    spec, problem = wd.last_good([good, b"{oops"])
    assert spec == WindowsFile(windows=(FREEZE,))
    assert problem.startswith("stored windows: JSON is malformed")
    assert wd.last_good([good, b"{oops", b""]) == (WindowsFile(), "")  # removed: none
    assert wd.last_good([]) == (WindowsFile(), "")


def test_the_page_shows_each_window_and_what_holds_each_bundle() -> None:
    """The page shows what each bundle's planner published (``BundleStatus.windows``), not an
    answer of its own."""
    inside = NOON + dt.timedelta(minutes=5)
    live = LiveState()
    live.set_windows(WindowsFile(windows=(FREEZE,)), "")
    for bundle in ("web", "team-a/api"):
        st = state(FREEZE, at=inside)
        v = BundleView.of(Bundle(cluster="prod", bundle=bundle, revision="r1"), 1)
        st.bundles[("prod", bundle)] = v
        live.on_bundle(bundle_status(st, v, Ledger()))
    live.on_bundle(BundleStatus(cluster="prod", bundle="api", revision="r1",
                                phase=BundlePhase.READY, counts=BundleCounts()))  # fmt: skip
    view = live.windows_view(inside)
    assert [(r["name"], r["active"], r["nextChange"]) for r in view["windows"]] == [
        ("freeze", True, "2026-06-01T13:00+00:00")
    ]
    assert view["bundles"]["prod/web"] == {
        "held": 'deny window "freeze" until 2026-06-01T13:00+00:00',
        "next_change": "2026-06-01T13:00+00:00",
    }
    assert "prod/api" not in view["bundles"]  # its planner says no window names it
    # a tenant's page sees only its own bundles
    assert set(live.windows_view(NOON, "team-a")["bundles"]) == {"prod/team-a/api"}


@pytest.mark.parametrize(
    ("at", "windows", "standing"),
    [
        pytest.param(
            NOON + dt.timedelta(minutes=5),
            (FREEZE,),
            BundleWindow(
                held=True,
                message='deny window "freeze" until 2026-06-01T13:00+00:00',
                window="freeze",
                until="2026-06-01T13:00+00:00",
                next_change="2026-06-01T13:00+00:00",
                then="writes allowed",
            ),
            id="inside-a-freeze-held-whatever-the-phase",
        ),
        pytest.param(
            NOON - dt.timedelta(hours=1),
            (FREEZE,),
            BundleWindow(
                held=False,
                message="writes allowed",
                window=None,
                until=None,
                next_change="2026-06-01T12:00+00:00",
                then='deny window "freeze" until 2026-06-01T13:00+00:00',
            ),
            id="before-a-freeze-allowed-and-the-next-change",
        ),
        pytest.param(NOON, (), None, id="no-window-none"),
    ],
)
def test_the_planner_publishes_how_the_windows_stand_and_status_json_says_the_same(
    at: dt.datetime, windows: tuple[SyncWindow, ...], standing: BundleWindow | None
) -> None:
    """The one answer to "is this bundle held by a window": in its status, Ready or not; the
    CLI (``status``, ``status -o json``) and the page show what the status says."""
    st = state(*windows, at=at)
    status = status_of(st, entry())  # applied and unchanged: Ready, nothing to hold
    assert status.windows == standing


def record(action: str, reason: str) -> DecisionRecord:
    return DecisionRecord(
        cluster="prod", key=KEY, bundle="web", revision="r1",
        action=DecisionAction(action), reason=DecisionReason(reason),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("decided", "ratio"),
    [
        pytest.param([], None, id="nothing-decided"),
        pytest.param([("apply", "new")] * 5, None, id="a-fresh-stack-only-first-applies"),
        pytest.param([("apply", "new"), ("hold", "window"), ("keep", "not-owned")], None,
                     id="holds-and-keeps-are-no-cache-questions"),
        pytest.param([("apply", "new"), ("hit", "hit")], 1.0, id="a-hit"),
        pytest.param([("hit", "hit"), ("apply", "drift"), ("apply", "new")], 0.5,
                     id="a-drift-could-have-hit"),
    ],
)  # fmt: skip
def test_the_page_has_no_hit_ratio_until_a_decision_could_hit(
    decided: list[tuple[str, str]], ratio: float | None
) -> None:
    live = LiveState()
    for action, reason in decided:
        live.on_decision(record(action, reason))
    stats = live.stats()
    assert stats["hit_ratio"] == ratio
    assert stats["decisions"] == len(decided)


def test_windows_apply_refuses_a_bad_file_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "windows.yaml"
    bad.write_text("windows:\n- kind: deny\n  schedule: '0 22 * * 5'\n  duration: 2d\n")
    parser = argparse.ArgumentParser(prog="driftbus")
    cli_windows.add_parser(parser.add_subparsers())
    args = parser.parse_args(["windows", "apply", str(bad)])
    assert args.func(args) == 1  # refused before any connection: nothing changes on the bus
    err = capsys.readouterr().err
    assert err.startswith(f"driftbus windows apply: {bad}:2: windows[0] (deny-0): duration '2d'")
