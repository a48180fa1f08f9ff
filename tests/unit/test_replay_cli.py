"""``driftbus replay``'s command line: ``--since`` as people write it, progress on a terminal and
in a log."""

from __future__ import annotations

import datetime as dt
import io

import pytest

from services.cli.replay import Shown, since_of

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("text", "back"),
    [
        ("7d", dt.timedelta(days=7)),
        ("1d12h", dt.timedelta(days=1, hours=12)),
        ("36h", dt.timedelta(hours=36)),
        ("90m", dt.timedelta(minutes=90)),
    ],
    ids=["days", "days-and-hours", "hours", "minutes"],
)
def test_since_reads_days_and_go_durations(text: str, back: dt.timedelta) -> None:
    assert since_of(text, NOW) == NOW - back


@pytest.mark.parametrize("text", ["a week", "7", "0d", "-1h", "7w"])
def test_a_bad_since_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match=r"^--since: "):
        since_of(text, NOW)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_a_line_now_and_then() -> None:
    out = io.StringIO()
    shown = Shown(out, every=0.0)
    for i in range(1, 4):
        shown.update(i, 3)
    shown.close()
    assert out.getvalue().splitlines() == [f"replay: {i}/3 decision records" for i in (1, 2, 3)]
    quiet = io.StringIO()
    shown = Shown(quiet, every=3600.0)
    shown.update(1, 3)
    assert quiet.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar_that_goes_away() -> None:
    out = Terminal()
    shown = Shown(out)
    shown.update(1, 2)
    shown.update(2, 2)
    shown.close()
    assert "replaying decisions" in out.getvalue()
