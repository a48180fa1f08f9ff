"""What ``driftbus status`` reads on the bus, as one typed value per view: a cluster's bundles,
or one bundle with its objects, its source and the sync windows as they stand for it.

Everything is read before anything is shown (``show`` prints these values, and reads nothing):
a stack stopped once the state is on the screen is then the follow's to report (``status
-f``), not a failed read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping

from schemas.cli import ObjectRow
from schemas.messages import BundleStatus, SourceStatus
from schemas.windows import WindowsFile
from services.cli import reads as user
from services.cli import windows
from services.common import bus


@dataclasses.dataclass(frozen=True)
class Windows:
    """The sync windows as the cluster's planners hold them (``cli.windows.read_windows``)."""

    spec: WindowsFile
    unusable: str
    """Why the latest stored windows cannot be used ("" when they can)."""
    labels: Mapping[str, str] | None
    """The cluster's registry labels, for a window's ``clusterSelector`` (None: unknown)."""


@dataclasses.dataclass(frozen=True)
class ClusterReport:
    """``driftbus status --cluster C``: the last status of each of its bundles."""

    cluster: str
    tenant: str | None
    """Only this tenant's bundles ("" the platform team's; None: every bundle)."""
    now: dt.datetime
    statuses: list[BundleStatus]
    windows: Windows | None
    """Read for the table only (``-o json`` is a list of bundle rows): None otherwise."""


@dataclasses.dataclass(frozen=True)
class BundleReport:
    """``driftbus status --cluster C --bundle B``: the bundle, its objects, what follows it."""

    cluster: str
    bundle: str
    now: dt.datetime
    statuses: list[BundleStatus]
    """The bundle's last status (none: never published)."""
    objects: list[ObjectRow]
    source: SourceStatus | None
    """What ``driftbus source`` last reported for it (None: no source follows it)."""
    windows_unusable: str
    """Why the latest stored windows cannot be used ("" when they can); how the windows stand
    for the bundle is its planner's answer, in its status (``BundleStatus.windows``)."""


async def cluster_report(
    js: bus.JetStream,
    cluster: str,
    tenant: str | None,
    *,
    with_windows: bool,
    seen: dict[str, bytes],
) -> ClusterReport:
    """The bundles of ``cluster`` (``tenant``'s only, when given), and the windows when
    ``with_windows``; ``seen`` collects the raw status read per subject (``status -f``)."""
    now = dt.datetime.now(dt.UTC)
    statuses = await user.bundle_statuses(js, cluster, tenant=tenant, seen=seen)
    held = await _windows(js, cluster) if with_windows else None
    return ClusterReport(cluster, tenant, now, statuses, held)


async def bundle_report(
    js: bus.JetStream, cluster: str, bundle: str, *, seen: dict[str, bytes]
) -> BundleReport:
    """``bundle`` of ``cluster``: its status, objects, source and windows; ``seen`` as for
    ``cluster_report``."""
    now = dt.datetime.now(dt.UTC)
    objects = await user.object_rows(js, cluster, bundle, seen=seen)
    statuses = await user.bundle_statuses(js, cluster, bundle, seen=seen)
    source = await user.source_status(js, cluster, bundle)
    _, unusable = await windows.read_windows(js)
    return BundleReport(cluster, bundle, now, statuses, objects, source, unusable)


async def _windows(js: bus.JetStream, cluster: str) -> Windows:
    spec, unusable = await windows.read_windows(js)
    return Windows(spec, unusable, await windows.cluster_labels(js, spec, cluster))
