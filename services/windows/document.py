"""The windows file (docs/windows.md) as a ``Document``: read and checked — every window's
schedule, duration, time zone, globs and ``clusterSelector`` — with ``FILE:LINE`` errors, and the
windows stored on the bus read back and checked again (pure). What the windows decide is
``verdict``'s; where they are kept, ``store``'s.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from schemas.windows import SyncWindow, WindowsFile
from services.clusters.selector import SelectorError, parse_selector
from services.stored.document import Document, Problem
from services.windows.spec import HORIZON, Window

_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s)")
_UNITS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class WindowsError(Problem):
    """A windows file or stored windows are unusable: one line, ``FILE:LINE: `` first if known."""


def parse_duration(text: str) -> dt.timedelta:
    """A Go duration (``60h``, ``90m``, ``1h30m``, ``1.5h``, ``45s``) as a timedelta; ValueError
    for anything else, or one that is not positive."""
    if not text or _DURATION.sub("", text) or not _DURATION.match(text):
        raise ValueError(
            f"duration {text!r} is not a Go duration (e.g. 60h, 90m, 1h30m; units h, m, s, ms; "
            "a day is 24h)"
        )
    seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text))
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be longer than zero")
    if seconds > HORIZON.total_seconds():  # longer is a freeze (suspend); and it overflowed
        raise ValueError(f"duration {text!r} is longer than a year (366 days, 8784h)")
    return dt.timedelta(seconds=seconds)


def compiled(spec: WindowsFile) -> tuple[Window, ...]:
    """The windows of a windows file, checked; WindowsError naming ``windows[i]`` and the key."""
    out: list[Window] = []
    seen: set[str] = set()
    for i, w in enumerate(spec.windows):
        name = w.name or f"{w.kind}-{i}"
        try:
            window = _window(w, name)
        except ValueError as exc:
            raise WindowsError(f"windows[{i}] ({name}): {exc}", ("windows", i)) from None
        if name in seen:
            raise WindowsError(f"windows[{i}]: name {name!r} is used twice", ("windows", i))
        seen.add(name)
        out.append(window)
    return tuple(out)


def _window(w: SyncWindow, name: str) -> Window:
    if not _NAME.match(name):
        raise ValueError(
            f"name {name!r} must be at most 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit"
        )
    fields = w.schedule.split()
    if not (len(fields) == 5 or (len(fields) == 1 and fields[0].startswith("@"))):
        raise ValueError(
            f"schedule {w.schedule!r} must be a cron expression of 5 fields (minute hour "
            "day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly"
        )
    if not croniter.is_valid(w.schedule):
        raise ValueError(f"schedule {w.schedule!r} is not a valid cron expression")
    try:
        zone = ZoneInfo(w.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"timeZone {w.time_zone!r} is not a known IANA time zone (e.g. UTC, Europe/Berlin)"
        ) from None
    for key, globs in (("bundles", w.bundles), ("clusters", w.clusters)):
        if not globs:
            raise ValueError(f'{key} is empty: name at least one glob ("*" for all)')
        if bad := [g for g in globs if any(c.isspace() for c in g)]:
            raise ValueError(f"{key}: {bad[0]!r} contains white space")
    try:
        selector = parse_selector(w.cluster_selector)
    except SelectorError as exc:
        raise ValueError(f"clusterSelector: {exc}") from None
    window = Window(
        name,
        w.kind,
        w.schedule,
        parse_duration(w.duration),
        zone,
        w.bundles,
        w.clusters,
        w,
        selector,
    )
    if (
        window.next_start(dt.datetime.now(dt.UTC)) is None
        and window.last_start(dt.datetime.now(dt.UTC)) is None
    ):
        raise ValueError(f"schedule {w.schedule!r} never fires (not within a year)")
    return window


def _checked(spec: WindowsFile) -> None:
    compiled(spec)


WINDOWS: Final = Document(
    kind=WindowsFile,
    error=WindowsError,
    name="the windows file",
    keys="windows",
    stored="stored windows",
    check=_checked,
)
"""The sync windows as a setting."""


def load_windows(text: str | bytes, where: str) -> WindowsFile:
    """The windows file (YAML or JSON) named ``where``, checked; WindowsError if unusable."""
    return WINDOWS.load(text, where)


def dump(spec: WindowsFile) -> bytes:
    """The windows as JSON, as they are stored on the bus."""
    return WINDOWS.dump(spec)


def decode_stored(data: bytes) -> WindowsFile:
    """The windows of stored bytes (``dump``'s; empty: none); WindowsError if not usable."""
    return WINDOWS.decode(data)


def last_good(stored: Sequence[bytes]) -> tuple[WindowsFile, str]:
    """What planners hold after reading the stored versions ``stored`` (oldest first; a
    removal is empty): the last usable windows, and why the latest is unusable ("" if it is
    usable) — as the planner does, a deny window is never dropped for an unusable newer one."""
    good = WINDOWS.last_good(stored)
    return good.value, good.problem
