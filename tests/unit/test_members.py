"""Whether a cluster is served (a live watcher and applier) and its watcher has listed it all."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import pytest

from schemas.messages import MemberHeartbeat
from services.clusters.members import STALE_AFTER, serving, watcher_synced

NOW = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.UTC)


def beat(
    role: Literal["watcher", "applier"], age: float, *, synced: bool = True
) -> MemberHeartbeat:
    """The heartbeat of a ``role`` member last seen ``age`` seconds before ``NOW``."""
    return MemberHeartbeat(
        cluster="c",
        role=role,
        id=f"{role}-0",
        at=NOW - dt.timedelta(seconds=age),
        synced=synced,
    )


NEVER_WATCHER = "no watcher for cluster c has ever announced itself"
NEVER_APPLIER = "no applier for cluster c has ever announced itself"

SERVING: list[tuple[str, dict[str, MemberHeartbeat | None], list[str]]] = [
    (
        "fresh-watcher-and-applier-serve",
        {"watcher": beat("watcher", 3), "applier": beat("applier", 0)},
        [],
    ),
    (
        "a-heartbeat-exactly-stale-after-old-still-counts",
        {"watcher": beat("watcher", STALE_AFTER), "applier": beat("applier", STALE_AFTER)},
        [],
    ),
    (
        "a-heartbeat-from-a-clock-ahead-counts",
        {"watcher": beat("watcher", -20), "applier": beat("applier", 1)},
        [],
    ),
    (
        "an-unsynced-watcher-still-serves",  # prune waits for it; applies do not
        {"watcher": beat("watcher", 1, synced=False), "applier": beat("applier", 1)},
        [],
    ),
    (
        "stale-watcher-is-named-with-its-age",
        {"watcher": beat("watcher", 75), "applier": beat("applier", 2)},
        ["no watcher for cluster c (last seen 75s ago)"],
    ),
    (
        "stale-applier-is-named-with-its-age",
        {"watcher": beat("watcher", 2), "applier": beat("applier", STALE_AFTER + 1)},
        [f"no applier for cluster c (last seen {STALE_AFTER + 1:.0f}s ago)"],
    ),
    ("missing-applier-never-announced", {"watcher": beat("watcher", 1)}, [NEVER_APPLIER]),
    (
        "none-is-never-announced",
        {"watcher": None, "applier": beat("applier", 1)},
        [NEVER_WATCHER],
    ),
    ("nothing-at-all-names-both-watcher-first", {}, [NEVER_WATCHER, NEVER_APPLIER]),
    (
        "stale-and-missing-are-both-named",
        {"watcher": beat("watcher", 3600)},
        ["no watcher for cluster c (last seen 3600s ago)", NEVER_APPLIER],
    ),
]


@pytest.mark.parametrize(("case", "beats", "problems"), SERVING, ids=[c[0] for c in SERVING])
def test_serving(case: str, beats: dict[str, MemberHeartbeat | None], problems: list[str]) -> None:
    assert serving("c", beats, NOW) == problems


SYNCED: list[tuple[str, MemberHeartbeat | None, bool]] = [
    ("fresh-and-synced", beat("watcher", 3), True),
    ("synced-exactly-stale-after-old", beat("watcher", STALE_AFTER), True),
    ("fresh-but-still-listing", beat("watcher", 3, synced=False), False),
    ("synced-but-stale", beat("watcher", STALE_AFTER + 0.5), False),
    ("stale-and-not-synced", beat("watcher", 600, synced=False), False),
    ("never-announced", None, False),
]


@pytest.mark.parametrize(("case", "hb", "synced"), SYNCED, ids=[c[0] for c in SYNCED])
def test_watcher_synced(case: str, hb: MemberHeartbeat | None, synced: bool) -> None:
    assert watcher_synced(hb, NOW) is synced
