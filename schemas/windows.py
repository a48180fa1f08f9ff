"""The sync windows file (docs/windows.md): when automated writes may happen, per bundle and
cluster, in Argo CD's SyncWindow terms.

The wire keys are the user-facing file format (``timeZone``), so the Structs rename to camelCase.
The same Structs are what ``driftbus windows apply`` stores on the bus (KV bucket
``driftbus-windows``, key ``windows``) and what every planner follows; the checks a Struct cannot
express (a cron that parses, a Go duration, a known time zone, unique names) are
``services/windows/document.py``'s.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

WindowKind = Literal["allow", "deny"]
Glob = Annotated[str, Meta(min_length=1, max_length=253, description="fnmatch pattern")]


class SyncWindow(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="camel"
):
    """One window: from each time ``schedule`` fires, for ``duration``, writes to the bundles
    and clusters it names are denied (``deny``) or allowed (``allow``: outside every allow
    window that names a bundle, nothing of it is written; a deny window wins over an allow)."""

    kind: WindowKind
    schedule: Annotated[str, Meta(min_length=1, max_length=200)]
    """A cron expression (5 fields; ``@daily`` and the like too), read in ``timeZone``."""
    duration: Annotated[str, Meta(min_length=2, max_length=40)]
    """How long each window lasts, Go style: ``60h``, ``90m``, ``1h30m`` (elapsed time)."""
    time_zone: Annotated[str, Meta(min_length=1, max_length=64)] = "UTC"
    """An IANA time zone (``Europe/Berlin``) the schedule is read in."""
    bundles: tuple[Glob, ...] = ("*",)
    """Globs over full bundle names (``TENANT/NAME``; a platform bundle is ``NAME``)."""
    clusters: tuple[Glob, ...] = ("*",)
    """Globs over cluster names."""
    cluster_selector: Annotated[str, Meta(max_length=4096)] = ""
    """A label selector over the cluster registry (kubectl syntax: ``env=prod``), besides
    ``clusters``: both must name a cluster ("" names every cluster the globs do). A cluster
    whose labels are unknown is named by any selector: a window restricts, it grants nothing."""
    name: Annotated[str, Meta(max_length=63)] = ""
    """What status, the page and the decision log call it; "" means ``KIND-INDEX``
    (``deny-0``: the first window of the file)."""


class WindowsFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """The windows file: every sync window in force (an empty list: writes are never held)."""

    windows: tuple[SyncWindow, ...] = ()


class WindowRow(msgspec.Struct, frozen=True, rename="camel"):
    """One window as ``driftbus windows -o json`` prints it: the file's keys (its name filled
    in), whether it is open now and when that next changes."""

    name: str
    kind: WindowKind
    schedule: str
    duration: str
    time_zone: str
    bundles: tuple[str, ...]
    clusters: tuple[str, ...]
    cluster_selector: str
    """The window's ``clusterSelector``, canonical ("": none)."""
    active: bool
    """It is open now (a deny window: writes to what it names are held)."""
    next_change: str | None
    """When it next opens (not active) or closes (active), RFC 3339 in its time zone; null:
    not within a year."""


class BundleWindow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The sync windows (docs/windows.md) as they stand for one bundle in one cluster: the
    planner's answer, published in the bundle's status (``BundleStatus.windows``) and shown as
    it is by ``driftbus status`` and the status page."""

    held: bool
    """A window holds the bundle's automated writes now (a revision published with
    ``--override-window`` goes through all the same)."""
    message: str
    """``deny window "freeze" until 2026-11-30T08:00+01:00`` when held, else
    ``writes allowed``."""
    window: str | None
    """The name of the window holding the writes (null: not held)."""
    until: str | None
    """When the writes held may go again, RFC 3339 in the window's time zone (null: not held,
    or not within a year)."""
    next_change: str | None
    """When that next changes (a window opens or closes), RFC 3339; null: not within a year."""
    then: str | None
    """What holds from ``next_change`` on, as ``message`` says it (null: no change)."""
