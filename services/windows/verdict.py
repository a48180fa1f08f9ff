"""Sync windows (docs/windows.md): whether a bundle's writes to a cluster may happen now, and when
that changes (pure). One window — what it names, when it is open — is ``services.windows.spec``'s;
the windows file, read and checked, ``services.windows.document``'s.

For a bundle on a cluster, the windows that name both (globs, and the cluster's registry labels
for a ``clusterSelector``) decide:

* a **deny** window open now holds its writes;
* else, if **allow** windows name it, writes happen only while one of them is open;
* else nothing holds them.

``blocking`` names the window that holds writes now; ``resumes`` says when writes may go again;
``next_change`` when what blocks (or that nothing does) next changes; ``standing`` all of it for
one bundle, as its status says it. Instants are aware
datetimes; messages show them in the window's time zone, to the minute.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Final

from schemas.windows import BundleWindow, WindowRow, WindowsFile
from services.windows.document import compiled
from services.windows.spec import HORIZON, Labels, Window

MAX_STEPS: Final = 200
"""Window boundaries walked at most in one question."""


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


def standing(
    windows: Sequence[Window], bundle: str, cluster: str, at: dt.datetime, *, labels: Labels = None
) -> BundleWindow | None:
    """The windows as they stand for ``bundle`` on ``cluster`` at ``at`` — held or not, until
    when, the next change and what holds then — or None when no window names it: what the
    planner publishes in the bundle's status (``BundleStatus.windows``)."""
    mine = [w for w in windows if w.names(bundle, cluster, labels)]
    if not mine:
        return None
    held = block(mine, bundle, cluster, at, labels=labels)
    return shown(mine, bundle, cluster, held, next_change(mine, bundle, cluster, at, labels=labels))


def shown(
    mine: Sequence[Window],
    bundle: str,
    cluster: str,
    held: Block | None,
    change: dt.datetime | None,
    *,
    labels: Labels = None,
) -> BundleWindow:
    """``standing``'s answer from the windows naming the bundle, the block now and the next
    change (already asked: the planner keeps them until that change)."""
    after = block(mine, bundle, cluster, change, labels=labels) if change is not None else None
    return BundleWindow(
        held=held is not None,
        message=held.message if held is not None else "writes allowed",
        window=held.window.name if held is not None else None,
        until=held.window.shown(held.until) if held is not None and held.until else None,
        next_change=mine[0].shown(change) if change is not None else None,
        then=(after.message if after is not None else "writes allowed") if change else None,
    )


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


# --- the windows in force, in rows -----------------------------------------------------------


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
