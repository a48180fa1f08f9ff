"""A sync window's duration, however large, is refused with a message or answered: never an
exception out of the planner's loop (found in the review of issue 34: a duration whose datetime
arithmetic overflowed raised ``OverflowError``)."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from services.windows import document as windows_document
from services.windows import verdict as sync_windows

# --- sync windows: a duration that overflows --------------------------------------------------


def _windows_file(duration: str) -> bytes:
    return orjson.dumps(
        {
            "windows": [
                {
                    "kind": "deny",
                    "schedule": "0 22 * * 5",
                    "duration": duration,
                    "timeZone": "Europe/Berlin",
                    "bundles": ["*"],
                    "clusters": ["*"],
                }
            ]
        }
    )


# found in review, mended in a8d7070: core.windows.parse_duration accepts a duration whose
# datetime arithmetic overflows (OverflowError, not WindowsError): the planner's fold
# (ClusterState.window_block -> windows.block) or its _on_windows raises it out of the loop,
# which catches only WireError/ValueError
@pytest.mark.parametrize("duration", ["9999999999h", "99999999999999999h"])
def test_a_huge_duration_is_refused_or_answered_never_raised(duration: str) -> None:
    at = dt.datetime(2026, 11, 27, 12, 0, tzinfo=dt.UTC)
    try:
        spec = windows_document.load_windows(_windows_file(duration), "w.yaml")
        # what `driftbus windows apply` accepted, the planner reads back and asks about
        windows = windows_document.compiled(
            windows_document.decode_stored(windows_document.dump(spec))
        )
    except windows_document.WindowsError:
        return  # refused with a message naming the file: fine
    sync_windows.block(windows, "team-a/web", "prod-1", at)
    sync_windows.next_change(windows, "team-a/web", "prod-1", at)
    sync_windows.rows(spec, at)
