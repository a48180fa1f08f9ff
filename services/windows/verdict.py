"""Sync windows (docs/windows.md): whether a bundle's writes to a cluster may happen now, and when
that changes (pure); and the windows file, read and checked. One window — what it names, when
it is open — is ``services.windows.spec``'s.

For a bundle on a cluster, the windows that name both (globs, and the cluster's registry labels
for a ``clusterSelector``) decide:

* a **deny** window open now holds its writes;
* else, if **allow** windows name it, writes happen only while one of them is open;
* else nothing holds them.

``blocking`` names the window that holds writes now; ``resumes`` says when writes may go again;
``next_change`` when what blocks (or that nothing does) next changes. Instants are aware
datetimes; messages show them in the window's time zone, to the minute.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
import yaml
from croniter import croniter

from schemas.windows import SyncWindow, WindowRow, WindowsFile
from services.clusters.selector import SelectorError, parse_selector
from services.core import kyaml
from services.windows.spec import HORIZON, Labels, Window

MAX_STEPS: Final = 200
"""Window boundaries walked at most in one question."""
_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s)")
_UNITS: Final = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_NAME: Final = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class WindowsError(ValueError):
    """A windows file or stored windows are unusable: one line, ``FILE:LINE: `` first if known."""


@dataclasses.dataclass(frozen=True)
class Block:
    """Writes are held: by ``window`` (a deny window open, or the allow window that opens
    next), until ``until`` (None: not within a year)."""

    window: Window
    until: dt.datetime | None

    @property
    def message(self) -> str:
        """``deny window "freeze" until 2026-11-30T08:00+01:00`` (or ``outside allow window
        "office-hours" until …``): what a held bundle's status says first."""
        w = self.window
        what = f'deny window "{w.name}"' if w.kind == "deny" else f'outside allow window "{w.name}"'
        return f"{what} until {w.shown(self.until) if self.until else 'further notice'}"


# --- asking -----------------------------------------------------------------------------------


def blocking(
    windows: Sequence[Window], bundle: str, cluster: str, at: dt.datetime, *, labels: Labels = None
) -> Window | None:
    """The window that holds ``bundle``'s writes to ``cluster`` (its registry ``labels``; None:
    unknown) at ``at``, or None: the first deny window open (file order), else — when allow
    windows name it and none is open — the allow window that opens next."""
    mine = [w for w in windows if w.names(bundle, cluster, labels)]
    for w in mine:
        if w.kind == "deny" and w.open_until(at) is not None:
            return w
    allows = [w for w in mine if w.kind == "allow"]
    if not allows or any(w.open_until(at) is not None for w in allows):
        return None
    far = at + HORIZON * 2
    return min(allows, key=lambda w: w.next_start(at) or far)


def next_change(
    windows: Sequence[Window], bundle: str, cluster: str, at: dt.datetime, *, labels: Labels = None
) -> dt.datetime | None:
    """When the window that holds ``bundle``'s writes to ``cluster`` (or that none does) next
    changes after ``at``; None: not within a year."""
    now = blocking(windows, bundle, cluster, at, labels=labels)
    return _walk(windows, bundle, cluster, labels, at, lambda w: _name(w) != _name(now))


def resumes(
    windows: Sequence[Window], bundle: str, cluster: str, at: dt.datetime, *, labels: Labels = None
) -> dt.datetime | None:
    """When writes held at ``at`` may go again (``at`` itself when they are not held); None:
    not within a year."""
    if blocking(windows, bundle, cluster, at, labels=labels) is None:
        return at
    return _walk(windows, bundle, cluster, labels, at, lambda w: w is None)


def block(
    windows: Sequence[Window], bundle: str, cluster: str, at: dt.datetime, *, labels: Labels = None
) -> Block | None:
    """Why ``bundle``'s writes to ``cluster`` are held at ``at`` and until when, or None."""
    w = blocking(windows, bundle, cluster, at, labels=labels)
    if w is None:
        return None
    return Block(w, resumes(windows, bundle, cluster, at, labels=labels))


def _walk(
    windows: Sequence[Window],
    bundle: str,
    cluster: str,
    labels: Labels,
    at: dt.datetime,
    changed: Callable[[Window | None], bool],
) -> dt.datetime | None:
    """The first window boundary after ``at`` at which ``changed(blocking(...))`` is true."""
    mine = [w for w in windows if w.names(bundle, cluster, labels)]
    t = at
    for _ in range(MAX_STEPS):
        bounds = [b for w in mine if (b := w.next_change(t)) is not None]
        if not bounds:
            return None
        t = min(bounds)
        if t - at > HORIZON:
            return None
        if changed(blocking(mine, bundle, cluster, t, labels=labels)):
            return t
    return None


def _name(w: Window | None) -> str:
    return "" if w is None else w.name


# --- reading ----------------------------------------------------------------------------------


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
            raise WindowsError(f"windows[{i}] ({name}): {exc}") from None
        if name in seen:
            raise WindowsError(f"windows[{i}]: name {name!r} is used twice")
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


def load_windows(text: str | bytes, where: str) -> WindowsFile:
    """The windows file (YAML or JSON) named ``where``, checked; WindowsError if unusable."""
    try:
        text, docs = kyaml.file_documents(text, where)
    except kyaml.FileTextError as exc:
        raise WindowsError(str(exc)) from None
    if not docs:
        return WindowsFile()
    if len(docs) > 1:
        raise WindowsError(f"{where}: a second document: the windows file is one map")
    raw = docs[0][1]
    if not isinstance(raw, dict):
        raise WindowsError(f"{where}: the windows file must be a map with a windows list")
    try:
        spec = msgspec.convert(raw, WindowsFile)
    except msgspec.ValidationError as exc:
        raise WindowsError(f"{_at(where, _line(text, str(exc)))}{exc}") from None
    try:
        compiled(spec)
    except WindowsError as exc:
        raise WindowsError(f"{_at(where, _line(text, str(exc)))}{exc}") from None
    return spec


def dump(spec: WindowsFile) -> bytes:
    """The windows as JSON, as they are stored on the bus."""
    return msgspec.json.encode(spec)


def decode_stored(data: bytes) -> WindowsFile:
    """The windows of stored bytes (``dump``'s; empty: none); WindowsError if not usable."""
    if not data:
        return WindowsFile()
    try:
        spec = msgspec.json.decode(data, type=WindowsFile)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise WindowsError(f"stored windows: {exc}") from None
    try:
        compiled(spec)
    except WindowsError as exc:
        raise WindowsError(f"stored windows: {exc}") from None
    return spec


def last_good(stored: Sequence[bytes]) -> tuple[WindowsFile, str]:
    """What planners hold after reading the stored versions ``stored`` (oldest first; a
    removal is empty): the last usable windows, and why the latest is unusable ("" if it is
    usable) — as the planner does, a deny window is never dropped for an unusable newer one."""
    good, problem = WindowsFile(), ""
    for data in stored:
        try:
            good, problem = decode_stored(data), ""
        except WindowsError as exc:
            problem = str(exc)
    return good, problem


def rows(spec: WindowsFile, now: dt.datetime) -> list[WindowRow]:
    """One row per window of ``spec`` (usable: ``decode_stored``'s or ``load_windows``'s): its
    keys, whether it is open at ``now``, and its next change (``driftbus windows``, the page)."""
    out = []
    for w in compiled(spec):
        change = w.next_change(now)
        out.append(
            WindowRow(
                name=w.name,
                kind=w.spec.kind,
                schedule=w.schedule,
                duration=w.spec.duration,
                time_zone=w.spec.time_zone,
                bundles=w.bundles,
                clusters=w.clusters,
                cluster_selector=str(w.selector),
                active=w.open_until(now) is not None,
                next_change=w.shown(change) if change is not None else None,
            )
        )
    return out


def _at(where: str, line: int | None) -> str:
    return f"{where}:{line}: " if line else f"{where}: "


def _line(text: str, message: str) -> int | None:
    """The line of the ``windows[i]`` a message names (best effort)."""
    found = re.search(r"windows\[(\d+)\]", message)
    if found is None:
        return None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if getattr(key, "value", None) == "windows" and isinstance(value, yaml.SequenceNode):
            i = int(found[1])
            if i < len(value.value):
                return int(value.value[i].start_mark.line) + 1
    return None
