"""``driftbus windows`` (the sync windows in force: each one open or not now, and its next
change) and ``driftbus windows apply FILE`` (check a windows file and make it the windows every
planner follows): the windows are state on the bus (KV bucket ``driftbus-windows``), followed
live (docs/windows.md). An invalid file is refused with FILE:LINE and changes nothing.

``cluster_lines`` is what ``driftbus status`` prints of them for a cluster (each window naming
it, open or not); for a bundle, ``bundle_lines`` shows how they stand as its planner published
them (``BundleStatus.windows``, the one answer to "is this bundle held by a window").
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Mapping
from pathlib import Path

from schemas.cli import BundleWindow
from schemas.windows import WindowsFile
from services.cli import exits
from services.common import bus, settings
from services.common.bus import NatsSettings
from services.windows import verdict as sync_windows
from services.windows.document import WINDOWS, WindowsError, compiled
from services.windows.store import put_windows
from services.windows.store import read_windows as read_windows  # driftbus status reads it

COLUMNS = [
    "name",
    "kind",
    "schedule",
    "duration",
    "time zone",
    "bundles",
    "clusters",
    "now",
    "next",
]


def read_file(path: str) -> WindowsFile:
    """The windows of a windows file (``-``: standard input); WindowsError or OSError."""
    text = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    return WINDOWS.load(text, "<stdin>" if path == "-" else path)


async def cluster_labels(
    js: bus.JetStream, spec: WindowsFile, cluster: str
) -> Mapping[str, str] | None:
    """``cluster``'s registry labels when a window of ``spec`` has a ``clusterSelector`` (else
    {}: no window asks); None when they are unknown or cannot be read — every selector window
    then names the cluster, as its planner reads it."""
    if not any(w.cluster_selector for w in spec.windows):
        return {}
    from services.clusters import registry

    try:
        return await registry.labels_of(js, cluster)
    except Exception:  # noqa: BLE001 - no registry, or not ours to read: unknown
        return None


def bundle_lines(
    bw: BundleWindow | None, problem: str = "", now: dt.datetime | None = None
) -> list[str]:
    """What ``driftbus status`` says of how the windows stand for a bundle (``BundleWindow``,
    as its status publishes it): whether one holds its writes (until when) and the next
    change; nothing when no window names it. ``problem``: why the latest windows on the bus
    are unusable ("" when they are usable). ``now``: past the next change it names, the
    answer is stale (its planner republishes it then: it is not running, or not yet)."""
    lines = [f"sync windows: the latest on the bus are unusable ({problem})"] if problem else []
    if bw is None:
        return lines
    held = f"sync window: {bw.message} (writes held)"
    lines.append(held if bw.held else "sync windows: writes allowed now")
    if bw.next_change is not None:
        lines.append(f"  next change {bw.next_change}: {bw.then}")
        if now is not None and _passed(bw.next_change, now):
            lines.append(
                "  (stale: the cluster's planner has not published the bundle's status since "
                "that change; is it running?)"
            )
    return lines


def _passed(when: str, now: dt.datetime) -> bool:
    try:
        at = dt.datetime.fromisoformat(when)
    except ValueError:
        return False
    return at.tzinfo is not None and at <= now


def cluster_lines(
    spec: WindowsFile,
    cluster: str,
    now: dt.datetime,
    problem: str = "",
    labels: Mapping[str, str] | None = None,
) -> list[str]:
    """What ``driftbus status`` says of the sync windows of a cluster: each window naming it,
    open or not, and when that changes; nothing when none names it. ``labels``: the cluster's
    registry labels, for a window's ``clusterSelector`` (None: unknown, named by every
    selector, as the planner reads it)."""
    lines = bundle_lines(None, problem)
    ws = compiled(spec)
    for w, row in zip(ws, sync_windows.rows(spec, now), strict=True):
        if not w.names_cluster(cluster, labels):
            continue
        state = "open" if row.active else "closed"
        verb = "closes" if row.active else "opens"
        nxt = f", {verb} {row.next_change}" if row.next_change else ""
        lines.append(
            f'sync window {w.kind} "{w.name}" (bundles {",".join(w.bundles)}): {state}{nxt}'
        )
    return lines


def show(spec: WindowsFile, problem: str, output: str, now: dt.datetime) -> None:
    from services.cli import output as out
    from services.cli import table

    if problem:
        print(
            f"driftbus windows: the latest windows on the bus are unusable ({problem}); the "
            "planners keep the last good ones, shown here",
            file=sys.stderr,
        )
    listed = sync_windows.rows(spec, now)
    if output in ("json", "yaml"):
        out.dump(listed, output)  # schemas/json/cli-windows.schema.json
        return
    if not listed:
        print("no sync windows: writes are never held for a window")
        return
    table.emit(
        [
            {
                "name": r.name,
                "kind": r.kind,
                "schedule": r.schedule,
                "duration": r.duration,
                "time zone": r.time_zone,
                "bundles": ",".join(r.bundles),
                "clusters": ",".join(r.clusters)
                + (f" with {r.cluster_selector}" if r.cluster_selector else ""),
                "now": "open" if r.active else "closed",
                "next": (("closes " if r.active else "opens ") + r.next_change)
                if r.next_change
                else "-",
            }
            for r in listed
        ],
        COLUMNS,
        "table",
    )


def cmd_windows(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.cli import table

    new: WindowsFile | None = None
    if args.action == "apply":
        if not args.file:
            return table.fail("windows apply", ValueError("name the windows file (or -)"))
        try:
            new = read_file(args.file)
        except (WindowsError, OSError) as exc:
            return table.fail("windows apply", exc)
    elif args.file:
        return table.fail(
            "windows show",
            ValueError("shows the windows in force and takes no file (apply one: windows apply)"),
        )

    async def run() -> int:
        nc = await user.connect(args)
        try:
            js = nc.jetstream()
            if new is None:
                spec, problem = await read_windows(js)
                show(spec, problem, args.output, dt.datetime.now(dt.UTC))
                return 0
            revision = await put_windows(js, new)
            print(f"sync windows revision {revision} in force: {len(new.windows)} windows")
            return 0
        finally:
            await nc.close()

    return exits.run_or_fail(f"windows {args.action}", run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser(
        "windows",
        help="show the sync windows in force, or apply a windows file (docs/windows.md)",
        description="Without arguments: the sync windows in force, each open or closed now and "
        "its next change. `windows apply FILE` checks FILE (YAML or JSON; - reads standard "
        "input) and makes it the windows every planner follows, at once: inside a deny window "
        "(or outside every allow window naming a bundle) nothing of the bundle is written until "
        "it ends, unless its revision was published with --override-window. Only the admin "
        "NATS identity may apply.",
    )
    t.add_argument(
        "action", nargs="?", choices=["show", "apply"], default="show", help="default: show"
    )
    t.add_argument("file", nargs="?", help="the windows file (apply)")
    t.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml"],
        default="table",
        help="table (default), or json or yaml: one row per window "
        "(schemas/json/cli-windows.schema.json)",
    )
    settings.add_arguments(t, NatsSettings)
    t.set_defaults(func=cmd_windows)
