"""How ``driftbus status`` shows what it read (services/cli/status/show.py): from a value, with
no bus — the tenant column, a bundle's lines, and the windows shown only where they were read."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from schemas.cli import ObjectRow
from schemas.messages import BundleCounts, BundlePhase, BundleStatus, SourcePhase, SourceStatus
from schemas.windows import BundleWindow, SyncWindow, WindowsFile
from services.cli.status import show
from services.cli.status.gather import BundleReport, ClusterReport, Windows

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
FREEZE = SyncWindow(kind="deny", name="freeze", schedule="0 12 * * *", duration="1h")
NO_WINDOWS = Windows(WindowsFile(), "", {})
FROZEN = Windows(WindowsFile(windows=(FREEZE,)), "", {})


def status(bundle: str, **kw: object) -> BundleStatus:
    counts = BundleCounts(total=2, applied=2, ready=1)
    return BundleStatus(
        cluster="prod", bundle=bundle, revision="r1", phase=BundlePhase.RECONCILING,
        counts=counts, message="1 not ready", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("bundles", "tenant", "first_word"),
    [
        pytest.param(["web"], None, "BUNDLE", id="platform-bundles-only-no-tenant-column"),
        pytest.param(["web", "team-a/api"], None, "TENANT", id="a-tenants-bundle-adds-the-column"),
        pytest.param(["web"], "", "TENANT", id="asked-for-a-tenant-shows-the-column"),
        pytest.param([], None, "(nothing)", id="no-bundles-say-so"),
    ],
)
def test_the_tenant_column_is_shown_when_tenants_are(
    bundles: list[str], tenant: str | None, first_word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = ClusterReport("prod", tenant, NOW, [status(b) for b in bundles], NO_WINDOWS)
    show.cluster(report, "table")
    assert capsys.readouterr().out.split()[0] == first_word


@pytest.mark.parametrize(
    ("windows", "shown"),
    [
        pytest.param(None, [], id="not-read-not-shown"),
        pytest.param(NO_WINDOWS, [], id="none-in-force-none-shown"),
        pytest.param(
            FROZEN,
            ['sync window deny "freeze" (bundles *): open, closes 2026-06-01T13:00+00:00'],
            id="each-window-naming-the-cluster",
        ),
    ],
)
def test_a_clusters_table_ends_with_its_windows(
    windows: Windows | None, shown: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    show.cluster(ClusterReport("prod", None, NOW, [status("web")], windows), "table")
    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == shown  # after the header and the one row


def test_a_clusters_json_is_its_bundle_rows(capsys: pytest.CaptureFixture[str]) -> None:
    show.cluster(ClusterReport("prod", None, NOW, [status("web"), status("db")], None), "json")
    rows = json.loads(capsys.readouterr().out)
    assert [(r["bundle"], r["objects"], r["ready"]) for r in rows] == [("web", 2, 1), ("db", 2, 1)]


def test_a_bundle_says_its_phase_source_window_and_objects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    row = ObjectRow(
        api_version="v1", group="", kind="ConfigMap", namespace="ns", name="a", phase="Applied",
        health="Ready", message="", revision="r1", last_change=NOW,
    )  # fmt: skip
    source = SourceStatus(
        cluster="prod", bundle="web", url="oci://reg/app", ref="v1", phase=SourcePhase.PUBLISHED
    )
    standing = BundleWindow(  # as its planner published it
        held=True, message='deny window "freeze" until 2026-06-01T13:00+00:00', window="freeze",
        until="2026-06-01T13:00+00:00", next_change="2026-06-01T13:00+00:00",
        then="writes allowed",
    )  # fmt: skip
    held = status(
        "web", rollback_of="r2", failed_objects=["ConfigMap/ns/b: InProgress"], windows=standing
    )
    report = BundleReport("prod", "web", NOW, [held], [row], source, "")
    show.bundle(report, "table")
    assert capsys.readouterr().out.splitlines() == [
        "web@r1 (rollback of r2): Reconciling — 1 not ready (applied 2/2, ready 1/2)",
        "  ConfigMap/ns/b: InProgress",
        "  oci source oci://reg/app v1: Published — ",
        'sync window: deny window "freeze" until 2026-06-01T13:00+00:00 (writes held)',
        "  next change 2026-06-01T13:00+00:00: writes allowed",
        "KIND       NAMESPACE  NAME  PHASE    HEALTH  MESSAGE  LAST_CHANGE",
        "ConfigMap  ns         a     Applied  Ready            2026-06-01 12:00:00",
    ]


def test_a_bundle_never_published_has_no_summary(capsys: pytest.CaptureFixture[str]) -> None:
    show.bundle(BundleReport("prod", "web", NOW, [], [], None, ""), "json")
    document = json.loads(capsys.readouterr().out)
    assert (document["bundle"], document["objects"], document["windows"]) == (None, [], None)
