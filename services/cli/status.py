"""``driftbus status`` (``-f``), ``why`` and ``shards``: what the streams say about bundles, one
object's decisions and the planner replicas, as tables or JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import Any

from services.common import settings
from services.common.bus import NatsSettings


def cmd_status(args: argparse.Namespace) -> int:
    from schemas.subjects import split_bundle
    from services.cli import table, user

    async def run() -> int:
        nc = await user.connect(args)
        js = nc.jetstream()
        try:
            # with -f, subscribe before reading the current state: a change published while
            # it is read is then shown after it instead of falling in between
            live = await _subscribe_status(nc, args) if args.follow else None
            seen: dict[str, bytes] = {}
            if args.bundle:
                rows = await user.object_rows(js, args.cluster, args.bundle, seen=seen)
                bundles = await user.bundle_statuses(js, args.cluster, args.bundle, seen=seen)
                followed = await user.source_status(js, args.cluster, args.bundle)
                if args.output == "json":
                    doc = {"bundle": [msgspec_to_builtins(b) for b in bundles], "objects": rows}
                    if followed is not None:
                        doc["git_source"] = msgspec_to_builtins(followed)
                    table.emit([doc], [], "json")
                else:
                    for b in bundles:
                        c = b.counts
                        print(
                            f"{b.bundle}@{b.revision}: {table.colour(str(b.phase))} — "
                            f"{b.message} (applied {c.applied}/{c.total}, ready "
                            f"{c.ready}/{c.total})"
                        )
                        if b.source:
                            print(f"  from {b.source}")
                    if followed is not None:
                        print(
                            f"  git source {followed.url} {followed.ref}: "
                            f"{table.colour(str(followed.phase))} — {followed.message}"
                        )
                    table.emit(
                        rows,
                        ["kind", "namespace", "name", "phase", "health", "message", "last_change"],
                        "table",
                    )
            else:
                statuses = await user.bundle_statuses(
                    js, args.cluster, tenant=args.tenant, seen=seen
                )
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
                    for b in statuses
                ]
                columns = ["bundle", "revision", "phase", "applied", "ready", "failed", "message"]
                if args.tenant is not None or any(r["tenant"] for r in rows):
                    columns.insert(0, "tenant")
                table.emit(rows, columns, args.output)
            sys.stdout.flush()
            if live is None:
                return 0
            # a round trip: whatever the server sent this connection before (every live copy of
            # a message the current state included) is in the queue now
            await nc.flush()
            return await _follow(live, seen, args)
        finally:
            await nc.drain()

    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the bus refused or is away: one line, no trace
        return table.fail("status", exc)


async def _subscribe_status(nc: Any, args: argparse.Namespace) -> asyncio.Queue[Any]:
    """Queue every status message of the followed bundle (its summary and its objects), or the
    summaries of all bundles of the cluster (of one tenant's with ``--tenant``). One
    subscription, so nothing arrives twice."""
    from schemas.subjects import bundle_status_filter, bundle_statuses_filter

    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        queue.put_nowait(msg)

    subject = (
        bundle_status_filter(args.cluster, args.bundle)
        if args.bundle
        else bundle_statuses_filter(args.cluster, args.tenant)
    )
    # a slow terminal must not make the server drop messages: no limit on what waits here
    await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    return queue


def status_line(subject: str, data: bytes, output: str) -> str | None:
    """How ``status -f`` shows one status message (None: not a status it can read)."""
    from schemas.codec import encode
    from schemas.messages import BundleStatus, ObjectStatus
    from services.cli.table import colour
    from services.common.statuswatch import decode_status

    event = decode_status(subject, data)
    if event is None:
        return None
    if isinstance(event, BundleStatus):
        line = f"{event.bundle}@{event.revision}: {colour(str(event.phase))} {event.message}"
    elif isinstance(event, ObjectStatus):
        line = f"{event.key}: {colour(str(event.phase))} {event.message}"
    else:
        line = f"{event.bundle} git source {event.ref}: {colour(str(event.phase))} {event.message}"
    if output == "json":
        # re-encoded from the contract: only its fields, whatever else a publisher added
        return encode(event).decode()
    return f"{time.strftime('%H:%M:%S')} {line}"


async def _follow(
    queue: asyncio.Queue[Any], seen: dict[str, bytes], args: argparse.Namespace
) -> int:
    """After the current state, print each status message as it comes until Ctrl-C.

    The subscription started before the current state was read (``seen``: subject → message),
    so what it queued meanwhile may be older than that state, the same, or newer. Per subject,
    everything up to the message the state showed is skipped (older or shown already); on a
    subject whose shown message never arrived live, all of it is newer."""
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)

    def show(msg: Any) -> None:
        if (line := status_line(msg.subject, msg.data, args.output)) is not None:
            print(line, flush=True)

    backlog = [queue.get_nowait() for _ in range(queue.qsize())]
    shown_at = {m.subject: i for i, m in enumerate(backlog) if seen.get(m.subject) == m.data}
    for i, msg in enumerate(backlog):
        if i > shown_at.get(msg.subject, -1):
            show(msg)
    stop = asyncio.create_task(done.wait())
    try:
        while not done.is_set():
            get = asyncio.create_task(queue.get())
            await asyncio.wait({get, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                break
            show(get.result())
    finally:
        stop.cancel()
    return 0


def msgspec_to_builtins(value: object) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def cmd_why(args: argparse.Namespace) -> int:
    from schemas.subjects import ObjectKey
    from services.cli import table, user

    parts = args.object.split("/")
    if len(parts) not in (2, 3):
        return table.fail(
            "why", ValueError("give KIND[.GROUP]/NAMESPACE/NAME or KIND[.GROUP]/NAME")
        )
    kind, _, group = parts[0].partition(".")
    key = ObjectKey(
        group=group, kind=kind, namespace=parts[1] if len(parts) == 3 else "", name=parts[-1]
    )

    async def run() -> int:
        nc = await user.connect(args)
        try:
            records = await user.decisions(nc.jetstream(), args.cluster, key)
        finally:
            await nc.drain()
        rows = [
            {
                "at": r.at.isoformat(timespec="milliseconds") if r.at else "",
                "bundle": r.bundle,
                "revision": r.revision,
                "action": str(r.action),
                "reason": str(r.reason),
                "manifest": (r.manifest_sha or "")[:12],
                "applied": (r.apply_sha or "")[:12],
                "live": (r.server_sha or "")[:12],
                # whom a write was made as: a tenant's ServiceAccount, or driftbus itself;
                # hits and keeps write nothing
                "as": (r.identity or "driftbus") if r.action in ("apply", "delete") else "",
            }
            for r in records
        ]
        if args.output == "table":
            print(f"decisions for {key} in cluster {args.cluster}:")
        table.emit(
            rows,
            ["at", "bundle", "revision", "action", "reason", "as", "manifest", "applied", "live"],
            args.output,
        )
        return 0 if records else 1

    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the bus refused or is away: one line, no trace
        return table.fail("why", exc)


def cmd_shards(args: argparse.Namespace) -> int:
    from services.cli import table, user

    async def run() -> int:
        nc = await user.connect(args)
        try:
            got = await user.shards(nc.jetstream())
        finally:
            await nc.drain()
        if args.output == "json":
            table.emit([got], [], "json")
            return 0
        print("planner replicas:")
        table.emit(got["planners"], ["planner", "clusters", "heartbeat"], "table")
        print("\nclusters:")
        table.emit(got["clusters"], ["cluster", "planner", "fencing_token", "since"], "table")
        return 0

    return asyncio.run(run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = sub.add_parser("status", help="current state of bundles (and objects with --bundle)")
    st.add_argument("--cluster", required=True)
    st.add_argument("--bundle", help="one bundle (TENANT/NAME for a tenant's), with its objects")
    st.add_argument(
        "--tenant", help="only this tenant's bundles ('' for the platform team's, no tenant)"
    )
    st.add_argument("-o", "--output", choices=["table", "json"], default="table")
    st.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="then print every change as it comes (bundle summaries; with --bundle, its "
        "objects too) until Ctrl-C",
    )
    settings.add_arguments(st, NatsSettings)
    st.set_defaults(func=cmd_status)

    why = sub.add_parser("why", help="decision history of one object")
    why.add_argument("object", metavar="KIND[.GROUP]/NAMESPACE/NAME")
    why.add_argument("--cluster", required=True)
    why.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(why, NatsSettings)
    why.set_defaults(func=cmd_why)

    sh = sub.add_parser(
        "shards", help="planner replicas, their heartbeats, and which one plans which cluster"
    )
    sh.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(sh, NatsSettings)
    sh.set_defaults(func=cmd_shards)
