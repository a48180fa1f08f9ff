"""How ``driftbus status`` shows what ``gather`` read: a table, or ``-o json`` / ``-o yaml``
(``schemas/json/cli-bundles.schema.json``; ``cli-status-bundle`` with ``--bundle``). Reads
nothing: every line comes from the value it is given.
"""

from __future__ import annotations

import msgspec

from schemas.cli import StatusDocument
from schemas.subjects import split_bundle
from services.cli import output, table, windows
from services.cli.lifecycle import bundle_row
from services.cli.status.gather import BundleReport, ClusterReport

BUNDLE_COLUMNS = ["bundle", "revision", "phase", "applied", "ready", "failed", "message"]
OBJECT_COLUMNS = ["kind", "namespace", "name", "phase", "health", "message", "last_change"]


def cluster(report: ClusterReport, fmt: str) -> None:
    """The cluster's bundles: one row each, then (the table only) the windows naming it."""
    if fmt != "table":
        output.dump([bundle_row(b, report.now) for b in report.statuses], fmt)
        return
    rows = [
        {
            "tenant": split_bundle(b.bundle)[0],
            "bundle": b.bundle,
            "revision": b.revision,
            "phase": str(b.phase),
            "applied": f"{b.counts.applied}/{b.counts.total}",
            "ready": f"{b.counts.ready}/{b.counts.total}",
            "failed": b.counts.failed,
            "message": b.message,
        }
        for b in report.statuses
    ]
    columns = list(BUNDLE_COLUMNS)
    if report.tenant is not None or any(r["tenant"] for r in rows):
        columns.insert(0, "tenant")
    table.emit(rows, columns, "table")
    held = report.windows
    if held is not None:
        lines = windows.cluster_lines(
            held.spec, report.cluster, report.now, held.unusable, held.labels
        )
        for line in lines:
            print(line)


def bundle(report: BundleReport, fmt: str) -> None:
    """One bundle: its summary, what keeps it from Ready, its source and windows, its objects."""
    # how the windows stand for it: the planner's answer, published in its status
    standing = report.statuses[-1].windows if report.statuses else None
    if fmt != "table":
        statuses, followed = report.statuses, report.source
        output.dump(
            StatusDocument(
                bundle=bundle_row(statuses[-1], report.now) if statuses else None,
                objects=report.objects,
                git_source=msgspec.to_builtins(followed) if followed else None,
                windows=standing,
                windows_unusable=report.windows_unusable,
            ),
            fmt,
        )
        return
    for b in report.statuses:
        c = b.counts
        rolled = f" (rollback of {b.rollback_of})" if b.rollback_of else ""
        print(
            f"{b.bundle}@{b.revision}{rolled}: {table.colour(str(b.phase))} — "
            f"{b.message} (applied {c.applied}/{c.total}, ready "
            f"{c.ready}/{c.total})"
        )
        if b.source:
            print(f"  from {b.source}")
        for line in b.failed_objects:  # what keeps it from Ready, or it reports
            print(f"  {line}")
    followed = report.source
    if followed is not None:
        print(
            f"  {'oci' if followed.url.startswith('oci://') else 'git'} source "
            f"{followed.url} {followed.ref}: "
            f"{table.colour(str(followed.phase))} — {followed.message}"
        )
    for line in windows.bundle_lines(standing, report.windows_unusable, report.now):
        print(line)
    shown = [
        r | {"last_change": (r["last_change"] or "")[:19].replace("T", " ")}
        for r in output.rows(report.objects)
    ]
    table.emit(shown, OBJECT_COLUMNS, "table")
