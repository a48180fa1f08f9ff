"""``driftbus status`` (``-f``), ``why`` and ``shards``: what the streams say about bundles, one
object's decisions and the planner replicas, as tables or JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from services.cli import context, exits, output
from services.cli.status import follow
from services.common import settings
from services.common.bus import NatsSettings


def cmd_status(args: argparse.Namespace) -> int:
    """What ``gather`` reads of the cluster's bundles (or one bundle's), as ``show`` shows it;
    with ``-f``, then every change as it comes (``follow``)."""
    from services.cli.status import gather, show

    link = follow.BusLink(args.reconnect_for)

    async def run() -> int:
        if args.cluster is None:  # only with --bundle (main): a fleet bundle, or the context's
            if await _fleet_status(args):
                return 0
            args.cluster = context.cluster(None)
            if args.cluster is None:
                print(
                    f"driftbus status: --cluster is required ({args.bundle} has no rollout, "
                    "and no driftbus up is running)",
                    file=sys.stderr,
                )
                return 2
        nc = await follow.connect(args, link)
        js = nc.jetstream()
        try:
            # with -f, subscribe before reading the current state: a change published while
            # it is read is then shown after it instead of falling in between
            live = await follow.subscribe_status(nc, args) if args.follow else None
            seen: dict[str, bytes] = {}
            if args.bundle:
                one = await gather.bundle_report(js, args.cluster, args.bundle, seen=seen)
                show.bundle(one, args.output)
            else:
                # the cluster's windows: only the table shows them (-o json is a list of rows)
                every = await gather.cluster_report(
                    js, args.cluster, args.tenant, with_windows=args.output == "table", seen=seen
                )
                show.cluster(every, args.output)
            sys.stdout.flush()
            if live is None:
                return 0
            # a round trip: whatever the server sent this connection before (every live copy of
            # a message the current state included) is in the queue now; a bus lost meanwhile
            # is the follow's to report (reconnecting, giving up), not an error here
            with contextlib.suppress(Exception):
                await nc.flush()
            return await follow.follow(live, seen, args, link)
        finally:
            link.closing = True
            if link.lost_at is None and not link.ended.is_set():
                await nc.drain()
            else:  # the bus is away: nothing to drain, and nothing to wait for
                await nc.close()

    return exits.run_or_fail("status", run())


async def _fleet_status(args: argparse.Namespace) -> bool:
    """Print the fleet view of ``args.bundle`` if it is a fleet bundle (it has a rollout)."""
    from services.cli import reads as user
    from services.cli.fleet import rollout

    async with user.connected(args) as nc:
        fs = await rollout.load_fleet_status(nc.jetstream(), args.bundle)
    if fs is not None:
        rollout.print_status(fs, args.output)
    return fs is not None


def cmd_why(args: argparse.Namespace) -> int:
    from schemas.cli import WhyRow
    from services.cli import objectref, output, table
    from services.cli import reads as user

    if args.object.lower().startswith("rollout/"):
        return _why_rollout(args, args.object.partition("/")[2])
    try:
        ref = objectref.parse(args.object)
    except ValueError as exc:
        return table.fail("why", exc)

    async def run() -> int:
        async with user.connected(args) as nc:
            js = nc.jetstream()
            decided = await user.decided(js, args.cluster, ref)
            found = objectref.match(ref, list(decided))
            if len(found) != 1:
                print(
                    f"driftbus why: {objectref.explain(ref, found, args.cluster)}", file=sys.stderr
                )
                return 1
            (key,) = found
            records = decided[key]
            api_version = await user.api_version(js, args.cluster, key)
        rows = [
            WhyRow(
                at=r.at,
                api_version=api_version,
                api_group=r.key.group,
                kind=r.key.kind,
                namespace=r.key.namespace,
                name=r.key.name,
                bundle=r.bundle,
                revision=r.revision,
                action=str(r.action),
                reason=str(r.reason),
                # whom a write was made as: a tenant's ServiceAccount, or driftbus itself;
                # hits, keeps and holds write nothing
                made_as=(r.identity or "driftbus") if r.action in ("apply", "delete") else None,
                manifest_sha=r.manifest_sha,
                last_applied_manifest_sha=r.last_applied_manifest_sha,
                apply_sha=r.apply_sha,
                server_sha=r.server_sha,
                planner=r.planner,
                window=r.window,
            )
            for r in records
        ]
        if args.output != "table":
            output.dump(rows, args.output)
            return 0 if records else 1
        print(f"decisions for {key} in cluster {args.cluster}:")
        table.emit(
            [
                {
                    "at": r.at.isoformat(timespec="milliseconds") if r.at else "",
                    "bundle": r.bundle,
                    "revision": r.revision,
                    "action": r.action,
                    # the sync window that held it, or that --override-window overrode
                    "reason": f"{r.reason} ({rec.window})" if rec.window else r.reason,
                    "as": r.made_as or "",
                    "manifest": (r.manifest_sha or "")[:12],
                    "applied": (r.apply_sha or "")[:12],
                    "live": (r.server_sha or "")[:12],
                }
                for r, rec in zip(rows, records, strict=True)
            ],
            ["at", "bundle", "revision", "action", "reason", "as", "manifest", "applied", "live"],
            "table",
        )
        return 0 if records else 1

    return exits.run_or_fail("why", run())


def _why_rollout(args: argparse.Namespace, bundle: str) -> int:
    """``why rollout/BUNDLE``: a fleet bundle's rollout transitions, each a decision record
    (as ``rollout history``; ``-o json`` is cli-rollout-history)."""
    from services.cli import output, table
    from services.cli import reads as user
    from services.cli.fleet import rollout

    async def run() -> int:
        async with user.connected(args) as nc:
            got = await rollout.history(nc.jetstream(), bundle)
        if not got.events:
            print(f"driftbus why: no rollout of {bundle} on the bus", file=sys.stderr)
            return 1
        if args.output != "table":
            output.dump(got, args.output)
        else:
            table.emit(rollout.history_rows(got.events), rollout.HISTORY_COLUMNS, "table")
        return 0

    return exits.run_or_fail("why", run())


def cmd_shards(args: argparse.Namespace) -> int:
    from services.cli import output, table
    from services.cli import reads as user
    from services.cli.status import shards

    async def run() -> int:
        async with user.connected(args) as nc:
            got = await shards.shards(nc.jetstream())
        if args.output != "table":
            output.dump(got, args.output)
            return 0
        print("planner replicas:")
        table.emit(
            [
                {
                    "planner": p.planner,
                    "clusters": ",".join(p.clusters) or "-",
                    "heartbeat": f"{p.heartbeat_age_seconds:.1f}s ago",
                }
                for p in got.planners
            ],
            ["planner", "clusters", "heartbeat"],
            "table",
        )
        print("\nclusters:")
        table.emit(
            [
                {
                    "cluster": c.cluster,
                    "planner": c.planner or "(released)",
                    "fencing_token": c.fencing_token,
                    "since": f"{c.since_seconds:.1f}s ago",
                }
                for c in got.clusters
            ],
            ["cluster", "planner", "fencing_token", "since"],
            "table",
        )
        return 0

    return asyncio.run(run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = sub.add_parser("status", help="current state of bundles (and objects with --bundle)")
    context.add_cluster_arg(
        st, "the cluster whose bundles to show; none with --bundle of a fleet bundle: every cluster"
    )
    st.add_argument("--bundle", help="one bundle (TENANT/NAME for a tenant's), with its objects")
    st.add_argument(
        "--tenant", help="only this tenant's bundles ('' for the platform team's, no tenant)"
    )
    output.add_output_arg(
        st, "cli-bundles (cli-status-bundle with --bundle, cli-rollout-status for a fleet bundle)"
    )
    st.add_argument(
        "--reconnect-for",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with -f: how long to keep reconnecting to a bus that went away before giving up "
        "with exit 1 (default %(default)s)",
    )
    st.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print every change as it comes (bundle summaries; with --bundle, its "
        "objects too) until Ctrl-C",
    )
    settings.add_arguments(st, NatsSettings)
    st.set_defaults(func=cmd_status)

    why = sub.add_parser(
        "why",
        help="decision history of one object",
        description="Every decision about one object, oldest first. KIND is matched without "
        "regard to case (configmap, ConfigMap); its API group is found from the decisions on "
        "the bus when not given (ClusterRole/x, Deployment.apps/ns/web).",
    )
    why.add_argument(
        "object",
        metavar="KIND[.GROUP]/NAMESPACE/NAME",
        help="the object; KIND[.GROUP]/NAME for a cluster-scoped one; rollout/BUNDLE for the "
        "transitions of a fleet bundle's rollouts (no --cluster; -o json: cli-rollout-history)",
    )
    context.add_cluster_arg(why, "the cluster the object is in")
    output.add_output_arg(why, "cli-why")
    settings.add_arguments(why, NatsSettings)
    why.set_defaults(func=cmd_why)

    sh = sub.add_parser(
        "shards", help="planner replicas, their heartbeats, and which one plans which cluster"
    )
    output.add_output_arg(sh, "cli-shards")
    settings.add_arguments(sh, NatsSettings)
    sh.set_defaults(func=cmd_shards)
