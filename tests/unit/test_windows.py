"""Sync windows (issue 34): reading the windows file, and whether a bundle's writes are held now
and until when (``services/windows/verdict.py``), time zones and DST included."""

from __future__ import annotations

import datetime as dt

import pytest

from schemas.windows import SyncWindow, WindowsFile
from services.windows import document as wd
from services.windows import verdict as w
from services.windows.spec import Window

UTC = dt.UTC


def at(text: str) -> dt.datetime:
    """An instant from ISO text (``Z`` for UTC)."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def one(kind: str, schedule: str, duration: str, zone: str = "UTC", **kw: object) -> Window:
    spec = SyncWindow(kind=kind, schedule=schedule, duration=duration, time_zone=zone, **kw)  # type: ignore[arg-type]
    return wd.compiled(WindowsFile(windows=(spec,)))[0]


FREEZE_BERLIN = ("deny", "0 22 * * 5", "60h", "Europe/Berlin")
"""The issue's example: Friday 22:00 Berlin time, for 60 hours of elapsed time."""

# (id, window, instant, held?, until (the message's time) or None)
CASES = [
    # a plain week in winter: Fri 2026-11-27 22:00+01:00 = 21:00Z, + 60 h = Mon 09:00Z
    ("before-the-freeze", FREEZE_BERLIN, "2026-11-27T20:59Z", False, None),
    (
        "freeze-starts-on-the-tick",
        FREEZE_BERLIN,
        "2026-11-27T21:00Z",
        True,
        "2026-11-30T10:00+01:00",
    ),
    # started before now's own cron tick: the schedule last fired on Friday, now is Saturday
    (
        "freeze-started-yesterday",
        FREEZE_BERLIN,
        "2026-11-28T12:00Z",
        True,
        "2026-11-30T10:00+01:00",
    ),
    ("freeze-last-second", FREEZE_BERLIN, "2026-11-30T08:59:59Z", True, "2026-11-30T10:00+01:00"),
    ("freeze-ended", FREEZE_BERLIN, "2026-11-30T09:00Z", False, None),
    # the spring-forward week: Fri 2026-03-27 22:00+01:00 = 21:00Z; 60 h of elapsed time end at
    # Mon 09:00Z, which Berlin's clocks read as 11:00 (+02:00), not 10:00
    ("dst-spring-freeze-open", FREEZE_BERLIN, "2026-03-29T01:30Z", True, "2026-03-30T11:00+02:00"),
    ("dst-spring-freeze-end", FREEZE_BERLIN, "2026-03-30T08:59Z", True, "2026-03-30T11:00+02:00"),
    ("dst-spring-freeze-over", FREEZE_BERLIN, "2026-03-30T09:00Z", False, None),
    # the fall-back week: Fri 2026-10-23 22:00+02:00 = 20:00Z, + 60 h = Mon 08:00Z (09:00+01:00)
    ("dst-fall-freeze-open", FREEZE_BERLIN, "2026-10-25T01:30Z", True, "2026-10-26T09:00+01:00"),
    ("dst-fall-freeze-over", FREEZE_BERLIN, "2026-10-26T08:00Z", False, None),
    # a daily 09:00 Berlin window follows the wall clock: 08:00Z in winter, 07:00Z in summer
    (
        "daily-winter",
        ("deny", "0 9 * * *", "1h", "Europe/Berlin"),
        "2026-03-28T08:30Z",
        True,
        "2026-03-28T10:00+01:00",
    ),
    (
        "daily-winter-utc-7",
        ("deny", "0 9 * * *", "1h", "Europe/Berlin"),
        "2026-03-28T07:30Z",
        False,
        None,
    ),
    (
        "daily-summer",
        ("deny", "0 9 * * *", "1h", "Europe/Berlin"),
        "2026-03-30T07:30Z",
        True,
        "2026-03-30T10:00+02:00",
    ),
    (
        "daily-summer-utc-8",
        ("deny", "0 9 * * *", "1h", "Europe/Berlin"),
        "2026-03-30T08:30Z",
        False,
        None,
    ),
    # 02:30 does not exist on 2026-03-29 in Berlin: it fires at 03:00+02:00 (01:00Z)
    (
        "gap-fires-after-it",
        ("deny", "30 2 * * *", "30m", "Europe/Berlin"),
        "2026-03-29T01:10Z",
        True,
        "2026-03-29T03:30+02:00",
    ),
    (
        "gap-not-before",
        ("deny", "30 2 * * *", "30m", "Europe/Berlin"),
        "2026-03-29T00:50Z",
        False,
        None,
    ),
    # 02:30 happens twice on 2026-10-25 (00:30Z and 01:30Z): both open the window; the first
    # ends at 01:00Z, the instant the clocks go back (03:00+02:00 = 02:00+01:00)
    (
        "repeated-first",
        ("deny", "30 2 * * *", "30m", "Europe/Berlin"),
        "2026-10-25T00:40Z",
        True,
        "2026-10-25T02:00+01:00",
    ),
    (
        "repeated-between",
        ("deny", "30 2 * * *", "30m", "Europe/Berlin"),
        "2026-10-25T01:10Z",
        False,
        None,
    ),
    (
        "repeated-second",
        ("deny", "30 2 * * *", "30m", "Europe/Berlin"),
        "2026-10-25T01:40Z",
        True,
        "2026-10-25T03:00+01:00",
    ),
    # Go durations
    (
        "hour-and-a-half",
        ("deny", "0 12 * * *", "1h30m", "UTC"),
        "2026-06-01T13:29Z",
        True,
        "2026-06-01T13:30+00:00",
    ),
    (
        "seconds-shown",
        ("deny", "0 12 * * *", "45s", "UTC"),
        "2026-06-01T12:00:10Z",
        True,
        "2026-06-01T12:00:45+00:00",
    ),
    # openings that overlap are one period: every 10 minutes for 15 minutes never closes
    (
        "overlapping-forever",
        ("deny", "*/10 * * * *", "15m", "UTC"),
        "2026-06-01T12:07Z",
        True,
        "further notice",
    ),
    # a zone east of UTC: 00:00 in Tokyo is 15:00Z the day before
    (
        "tokyo-midnight",
        ("deny", "0 0 * * *", "2h", "Asia/Tokyo"),
        "2026-06-01T15:30Z",
        True,
        "2026-06-02T02:00+09:00",
    ),
]


@pytest.mark.parametrize(
    ("window", "instant", "held", "until"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_deny_windows_hold_writes_while_open(
    window: tuple[str, str, str, str], instant: str, held: bool, until: str | None
) -> None:
    win = one(*window)
    b = w.block([win], "web", "prod-1", at(instant))
    assert (b is not None) is held
    if b is not None:
        assert until is not None
        assert b.message.endswith(f"until {until}"), b.message
        assert b.message.startswith(f'deny window "{win.name}"')


def test_the_issue_example_message_and_changes() -> None:
    ws = wd.compiled(
        wd.load_windows(
            """\
windows:
- kind: deny
  name: freeze
  schedule: "0 22 * * 5"
  duration: 60h
  timeZone: Europe/Berlin
  bundles: ["*"]
  clusters: ["prod-*"]
""",
            "windows.yaml",
        )
    )
    now = at("2026-11-28T12:00Z")
    block = w.block(ws, "team-a/web", "prod-eu", now)
    assert block is not None
    assert block.message == 'deny window "freeze" until 2026-11-30T10:00+01:00'
    assert w.next_change(ws, "team-a/web", "prod-eu", now) == at("2026-11-30T09:00Z")
    # another cluster: never held; its next change is nothing
    assert w.block(ws, "team-a/web", "dev", now) is None
    assert w.next_change(ws, "team-a/web", "dev", now) is None
    # before it: the next change is the freeze's start
    assert w.next_change(ws, "web", "prod-eu", at("2026-11-26T12:00Z")) == at("2026-11-27T21:00Z")


ALLOW = ("allow", "0 9 * * 1-5", "8h", "Europe/Berlin")


@pytest.mark.parametrize(
    ("instant", "held"),
    [
        ("2026-11-26T07:59Z", True),  # Thursday 08:59 Berlin: not open yet
        ("2026-11-26T08:00Z", False),  # 09:00
        ("2026-11-26T15:59Z", False),  # 16:59
        ("2026-11-26T16:00Z", True),  # 17:00: closed
        ("2026-11-28T12:00Z", True),  # Saturday
    ],
    ids=["before-office-hours", "opens", "last-minute", "closes", "weekend"],
)
def test_outside_every_allow_window_writes_wait(instant: str, held: bool) -> None:
    b = w.block([one(*ALLOW, name="office")], "web", "prod", at(instant))
    assert (b is not None) is held
    if b is not None:
        assert b.message.startswith('outside allow window "office" until ')


def test_the_weekend_waits_for_monday_morning() -> None:
    b = w.block([one(*ALLOW, name="office")], "web", "prod", at("2026-11-28T12:00Z"))
    assert b is not None
    assert b.until == at("2026-11-30T08:00Z")
    assert b.message == 'outside allow window "office" until 2026-11-30T09:00+01:00'


def test_a_deny_window_wins_over_an_open_allow_window() -> None:
    ws = [
        one(*ALLOW, name="office"),
        one("deny", "0 12 * * *", "1h", "Europe/Berlin", name="lunch"),
    ]
    noon = at("2026-11-26T11:30Z")  # 12:30 Berlin, a Thursday
    b = w.block(ws, "web", "prod", noon)
    assert b is not None
    assert b.window.name == "lunch"
    assert w.next_change(ws, "web", "prod", noon) == at("2026-11-26T12:00Z")
    assert w.block(ws, "web", "prod", at("2026-11-26T12:00Z")) is None


def test_writes_resume_only_when_back_to_back_windows_are_all_over() -> None:
    ws = [
        one("deny", "0 10 * * *", "1h", name="first"),
        one("deny", "0 11 * * *", "1h", name="second"),
    ]
    b = w.block(ws, "web", "prod", at("2026-06-01T10:30Z"))
    assert b is not None
    assert b.window.name == "first"
    assert b.until == at("2026-06-01T12:00Z")  # when writes may go again
    # what blocks changes at 11:00 (first → second)
    assert w.next_change(ws, "web", "prod", at("2026-06-01T10:30Z")) == at("2026-06-01T11:00Z")


@pytest.mark.parametrize(
    ("bundles", "clusters", "bundle", "cluster", "named"),
    [
        (("*",), ("*",), "web", "prod", True),
        (("team-a/*",), ("*",), "team-a/web", "prod", True),
        (("team-a/*",), ("*",), "web", "prod", False),  # a platform bundle is just NAME
        (("web",), ("*",), "team-a/web", "prod", False),
        (("*",), ("prod-*",), "web", "prod-eu", True),
        (("*",), ("prod-*",), "web", "staging", False),
        (("db", "cache-?"), ("*",), "cache-1", "x", True),
    ],
)
def test_globs_name_bundles_and_clusters(
    bundles: tuple[str, ...], clusters: tuple[str, ...], bundle: str, cluster: str, named: bool
) -> None:
    win = one("deny", "* * * * *", "1h", bundles=bundles, clusters=clusters)
    assert win.names(bundle, cluster, {}) is named
    assert (w.block([win], bundle, cluster, at("2026-06-01T12:00Z")) is not None) is named


PROD = {"env": "prod", "region": "eu"}


@pytest.mark.parametrize(
    ("clusters", "selector", "cluster", "labels", "named"),
    [
        pytest.param(("*",), "env=prod", "c1", PROD, True, id="selector-names"),
        pytest.param(("*",), "env=prod", "c1", {"env": "dev"}, False, id="selector-does-not"),
        pytest.param(("*",), "env=prod", "c1", {}, False, id="known-no-labels"),
        pytest.param(("*",), "env!=prod", "c1", {}, True, id="inequality-missing-key"),
        pytest.param(("eu-*",), "env=prod", "us-1", PROD, False, id="globs-and-selector-both"),
        pytest.param(("*",), "", "c1", {"env": "dev"}, True, id="no-selector"),
        # unknown labels: a window restricts, it grants nothing — a selector names the cluster
        pytest.param(("*",), "env=prod", "c1", None, True, id="unknown-labels-held"),
        pytest.param(("*",), "env!=prod", "c1", None, True, id="unknown-labels-inequality"),
        pytest.param(("eu-*",), "env=prod", "us-1", None, False, id="unknown-labels-globs"),
    ],
)
def test_a_cluster_selector_names_clusters_by_their_registry_labels(
    clusters: tuple[str, ...],
    selector: str,
    cluster: str,
    labels: dict[str, str] | None,
    named: bool,
) -> None:
    """Issue 41: ``clusterSelector`` besides the name globs; both must name a cluster."""
    win = one("deny", "* * * * *", "1h", clusters=clusters, cluster_selector=selector)
    assert win.names("web", cluster, labels) is named
    now = at("2026-06-01T12:00Z")
    assert (w.block([win], "web", cluster, now, labels=labels) is not None) is named
    allow = one("allow", "0 3 * * *", "1h", clusters=clusters, cluster_selector=selector)
    assert (w.block([allow], "web", cluster, now, labels=labels) is not None) is named


def test_a_cluster_selector_is_read_from_the_file_and_shown() -> None:
    spec = wd.load_windows(
        "windows:\n- {kind: deny, schedule: '@daily', duration: 1h, "
        "clusterSelector: 'tier in (b, a),env=prod'}\n",
        "f",
    )
    assert spec.windows[0].cluster_selector == "tier in (b, a),env=prod"
    [row] = w.rows(spec, at("2026-06-01T12:00Z"))
    assert row.cluster_selector == "env=prod,tier in (a,b)"
    assert wd.decode_stored(wd.dump(spec)) == spec


def test_names_default_to_kind_and_index() -> None:
    spec = wd.load_windows(
        "windows:\n- {kind: allow, schedule: '@daily', duration: 1h}\n"
        "- {kind: deny, schedule: '0 1 * * *', duration: 1h}\n",
        "f",
    )
    assert [x.name for x in wd.compiled(spec)] == ["allow-0", "deny-1"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "windows:\n- {kind: deny, schedule: 'x y', duration: 1h}\n",
            "f:2: windows[0] (deny-0): schedule 'x y' must be a cron",
        ),
        (
            "windows:\n- {kind: deny, schedule: '61 * * * *', duration: 1h}\n",
            "not a valid cron expression",
        ),
        ("windows:\n- {kind: deny, schedule: '0 * * * * *', duration: 1h}\n", "5 fields"),
        ("windows:\n- {kind: deny, schedule: '0 0 30 2 *', duration: 1h}\n", "never fires"),
        ("windows:\n- {kind: deny, schedule: '@daily', duration: 1d}\n", "not a Go duration"),
        ("windows:\n- {kind: deny, schedule: '@daily', duration: 0h}\n", "longer than zero"),
        (
            "windows:\n- {kind: deny, schedule: '@daily', duration: 1h, timeZone: Mars/Base}\n",
            "not a known IANA time zone",
        ),
        ("windows:\n- {kind: maybe, schedule: '@daily', duration: 1h}\n", "f:"),
        ("windows:\n- {kind: deny, schedule: '@daily', duration: 1h, manual: true}\n", "manual"),
        (
            "windows:\n- {kind: deny, schedule: '@daily', duration: 1h, name: a}\n"
            "- {kind: deny, schedule: '@daily', duration: 1h, name: a}\n",
            "f:3: windows[1]: name 'a' is used twice",
        ),
        ("windows:\n- {kind: deny, schedule: '@daily', duration: 1h, name: 'a b'}\n", "name 'a b'"),
        (
            "windows:\n- {kind: deny, schedule: '@daily', duration: 1h, bundles: []}\n",
            "bundles is empty",
        ),
        ("- a\n", "must be a map"),
        ("windows: [\n", "invalid YAML"),
        (
            "windows:\n- {kind: deny, schedule: '@daily', duration: 1h,\n"
            "   clusterSelector: 'a in (b'}\n",
            'f:2: windows[0] (deny-0): clusterSelector: selector "a in (b": missing ")"',
        ),
    ],
    ids=[
        "cron-words",
        "cron-range",
        "cron-seconds",
        "cron-never",
        "duration-days",
        "duration-zero",
        "zone",
        "kind",
        "unknown-key",
        "duplicate-name",
        "name-space",
        "no-bundles",
        "not-a-map",
        "bad-yaml",
        "cluster-selector",
    ],
)
def test_an_unusable_file_is_refused_naming_what(text: str, problem: str) -> None:
    with pytest.raises(wd.WindowsError) as err:
        wd.load_windows(text, "f")
    assert problem in str(err.value)


def test_stored_windows_round_trip_and_bad_ones_are_refused() -> None:
    spec = wd.load_windows("windows:\n- {kind: deny, schedule: '@daily', duration: 90m}\n", "f")
    assert wd.decode_stored(wd.dump(spec)) == spec
    assert wd.decode_stored(b"") == WindowsFile()
    with pytest.raises(wd.WindowsError, match="stored windows"):
        wd.decode_stored(b"{not json")
    with pytest.raises(wd.WindowsError, match="not a Go duration"):
        wd.decode_stored(b'{"windows":[{"kind":"deny","schedule":"@daily","duration":"1d"}]}')


def test_an_empty_file_means_no_windows() -> None:
    assert wd.load_windows("", "f") == WindowsFile()
    assert wd.load_windows("windows: []\n", "f") == WindowsFile()
    assert w.block([], "web", "prod", at("2026-06-01T12:00Z")) is None
    assert w.next_change([], "web", "prod", at("2026-06-01T12:00Z")) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60h", 216000), ("90m", 5400), ("1h30m", 5400), ("1.5h", 5400), ("45s", 45), ("500ms", 0.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert wd.parse_duration(text).total_seconds() == seconds
