"""``driftbus clusters`` (list), ``clusters label NAME KEY=VALUE… KEY-`` and ``clusters remove
NAME``: the cluster registry (``driftbus-clusters``) and who serves each cluster.

Labels and membership come from the registry; who serves a cluster and when it was last seen
come from the MEMBERS heartbeats (a quiet cluster stays registered). Relabelling and removing
change fleet membership at once: the rollout driver follows the registry. Only the admin NATS
identity may write the registry (nats-server refuses anyone else); such a refusal is one line.
``cluster_list`` is pure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Mapping
from typing import Any

from schemas.fleet import ClusterList, ClusterRecord, ClusterView
from schemas.messages import MemberHeartbeat
from services.cli import output
from services.common import settings
from services.common.bus import NatsSettings

COLUMNS = ("name", "labels", "version", "watcher", "applier", "last_seen", "served")


def cluster_list(
    records: Mapping[str, ClusterRecord],
    heartbeats: Mapping[str, Mapping[str, MemberHeartbeat | None]],
    now: dt.datetime,
) -> ClusterList:
    """The registry as ``clusters -o json`` prints it: live watchers and appliers (a heartbeat
    within ``STALE_AFTER``), the last heartbeat of either, served when both are live."""
    from services.clusters.members import STALE_AFTER

    views = []
    for name in sorted(records):
        beats = heartbeats.get(name, {})

        def live(role: str, beats: Mapping[str, MemberHeartbeat | None] = beats) -> list[str]:
            hb = beats.get(role)
            fresh = hb is not None and (now - hb.at).total_seconds() <= STALE_AFTER
            return [hb.id] if hb is not None and fresh else []

        seen = [hb.at for hb in beats.values() if hb is not None]
        watchers, appliers = live("watcher"), live("applier")
        views.append(
            ClusterView(
                name=name,
                labels=dict(records[name].labels),
                kube_version=records[name].kube_version,
                watchers=watchers,
                appliers=appliers,
                last_seen=max(seen) if seen else None,
                served=bool(watchers and appliers),
            )
        )
    return ClusterList(clusters=views)


def table_rows(cl: ClusterList, now: dt.datetime) -> list[dict[str, Any]]:
    from services.cli.table import age

    return [
        {
            "name": c.name,
            "labels": ",".join(f"{k}={v}" for k, v in sorted(c.labels.items())) or "-",
            "version": c.kube_version or "-",
            "watcher": ",".join(c.watchers) or "-",
            "applier": ",".join(c.appliers) or "-",
            "last_seen": f"{age(c.last_seen, now)} ago" if c.last_seen else "never",
            "served": "yes" if c.served else "no",
        }
        for c in cl.clusters
    ]


async def _list(js: Any) -> ClusterList:
    from services.clusters import registry
    from services.clusters.members import heartbeats

    records = await registry.records(js)
    beats = {name: await heartbeats(js, name) for name in sorted(records)}
    return cluster_list(records, beats, dt.datetime.now(dt.UTC))


async def _change(js: Any, args: argparse.Namespace) -> str:
    """Relabel or remove a cluster; what was done, as a line."""
    from services.clusters import registry
    from services.clusters.selector import parse_label_changes

    if args.clusters_command == "remove":
        await registry.deregister(js, args.name)
        return f"removed cluster {args.name} from the registry: it leaves every fleet"
    try:
        sets, removals = parse_label_changes(args.changes)
    except ValueError as exc:
        raise registry.RegistryError(f"cluster {args.name}: {exc}") from None
    record = await registry.relabel(js, args.name, set_=sets, remove=removals)
    labels = ",".join(f"{k}={v}" for k, v in sorted(record.labels.items())) or "(none)"
    return f"cluster {args.name} labelled: {labels}"


def cmd_clusters(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.cli import table

    async def run() -> int:
        async with user.connected(args) as nc:
            js = nc.jetstream()
            if args.clusters_command is not None:
                print(await _change(js, args))
                return 0
            got = await _list(js)
        if args.output != "table":
            output.dump(got, args.output)
        else:
            table.emit(table_rows(got, dt.datetime.now(dt.UTC)), COLUMNS, "table")
        return 0

    what = f"clusters {args.clusters_command}" if args.clusters_command else "clusters"
    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - one line: not registered, refused, bus away
        print(f"driftbus {what}: {_reason(exc)}", file=sys.stderr)
        return 1


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    if "permission" in text.lower() or "authorization" in text.lower():
        return f"not permitted to write the cluster registry (the admin identity may): {text}"
    return text


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "clusters",
        help="the cluster registry: labels, Kubernetes version, who serves each cluster",
        description="List the registered clusters (labels, Kubernetes version, the watcher and "
        "applier serving each, last heartbeat), or relabel or remove one (the admin identity "
        "only). Relabelling or removing a cluster changes fleet membership at once.",
    )
    output.add_output_arg(p, "cli-clusters")
    settings.add_arguments(p, NatsSettings)
    p.set_defaults(func=cmd_clusters, clusters_command=None)
    verbs = p.add_subparsers(
        dest="clusters_command",
        metavar="{label,remove}",
        help="change the registry (none: list it)",
    )
    la = verbs.add_parser(
        "label",
        help="set (KEY=VALUE) or remove (KEY-) labels of a registered cluster",
    )
    la.add_argument("name", metavar="NAME", help="the cluster")
    la.add_argument("changes", nargs="+", metavar="KEY=VALUE|KEY-", help="label changes")
    rm = verbs.add_parser(
        "remove", help="remove a cluster from the registry: it leaves every fleet"
    )
    rm.add_argument("name", metavar="NAME", help="the cluster")
