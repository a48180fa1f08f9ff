"""A bundle's life after its publish: ``bundles`` (list), ``delete bundle``, ``suspend``,
``resume`` and ``rollback`` (docs/lifecycle.md).

Each is one message on a documented subject, so any NATS client can do the same: a deletion is
a ``Bundle`` with ``delete`` on the bundle's subject, suspend/resume a ``BundleControl`` on
``driftbus.control.<cluster>.<tenant>.<name>``, a rollback a ``RollbackRequest`` the planner
answers on ``driftbus.rollback.<cluster>.<tenant>.<name>``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any, get_args

from schemas.cli import BundleRow, FleetSummary
from schemas.messages import BundleOptions, BundlePhase, BundleStatus, Propagation
from services.cli import context, exits, output
from services.cli.table import age
from services.common import settings
from services.common.bus import NatsSettings

if TYPE_CHECKING:
    from schemas.messages import RollbackAnswer
    from services.common.bus import Connection

WAIT_HELP = "follow the bundle's status until it ends; the exit code says how (0 success)"


def bundle_row(st: BundleStatus, now: dt.datetime, fleet: FleetSummary | None = None) -> BundleRow:
    """One bundle as ``bundles -o json`` prints it (``schemas/json/cli-bundles.schema.json``)."""
    return BundleRow(
        fleet=fleet,
        cluster=st.cluster,
        bundle=st.bundle,
        phase=str(st.phase),
        revision=st.revision,
        published_at=st.published_at,
        age_seconds=round((now - st.published_at).total_seconds(), 3) if st.published_at else None,
        objects=st.counts.total,
        applied=st.counts.applied,
        ready=st.counts.ready,
        failed=st.counts.failed,
        suspended=st.suspended,
        depends_on=list(st.depends_on),
        rollback_of=st.rollback_of or None,
        message=st.message,
        updated_at=st.at,
    )


def table_row(st: BundleStatus, now: dt.datetime) -> dict[str, Any]:
    notes = []
    if st.suspended:
        notes.append("suspended")
    if st.rollback_of:
        notes.append(f"rollback of {st.rollback_of}")
    if st.depends_on:
        notes.append("after " + ",".join(st.depends_on))
    return {
        "bundle": st.bundle,
        "phase": str(st.phase),
        "revision": st.revision[:24],
        "age": age(st.published_at, now),
        "ready": f"{st.counts.ready}/{st.counts.total}",
        "notes": "; ".join(notes),
    }


def cmd_bundles(args: argparse.Namespace) -> int:
    from services.cli import output, table
    from services.cli import reads as user

    async def run() -> tuple[list[BundleStatus], dict[str, FleetSummary]]:
        async with user.connected(args) as nc:
            js = nc.jetstream()
            statuses = await user.bundle_statuses(js, args.cluster, tenant=args.tenant)
            return statuses, await fleet_rows(js, args.tenant, args.all)

    try:
        statuses, fleets = asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the bus refused or is away: one line
        return table.fail("bundles", exc)
    now = dt.datetime.now(dt.UTC)
    shown = [s for s in statuses if args.all or s.phase is not BundlePhase.DELETED]
    if args.output != "table":
        output.dump([bundle_row(s, now, fleets.get(s.bundle)) for s in shown], args.output)
    else:
        columns = ["bundle", "phase", "revision", "age", "ready", "notes"]
        table.emit([table_row(s, now) for s in shown], columns, "table")
        if fleets:  # the fleet bundles, after the cluster's (its table is unchanged)
            print("\nfleet bundles (driftbus rollout status BUNDLE):")
            rows = [fleet_table_row(b, f) for b, f in sorted(fleets.items())]
            table.emit(rows, ["bundle", "phase", "revision", "step", "clusters"], "table")
    return 0


def fleet_summary(state: Any) -> FleetSummary:
    """A fleet bundle's rollout in ``bundles``: its phase and step, clusters Ready/total."""
    on = state.target.revision
    ready = sum(
        1
        for e in state.clusters.values()
        if e.state == "ready" and e.revision == on and e.seq >= state.first_seq
    )
    return FleetSummary(
        phase=str(state.phase),
        revision=on,
        step=state.step + 1,
        steps=len(state.spec.steps) + 1,
        ready=ready,
        total=sum(1 for e in state.clusters.values() if e.state != "removed"),
    )


def fleet_table_row(bundle: str, f: FleetSummary) -> dict[str, Any]:
    return {
        "bundle": bundle,
        "phase": f.phase,
        "revision": f.revision[:24],
        "step": f"{f.step}/{f.steps}",
        "clusters": f"{f.ready}/{f.total} Ready",
    }


async def fleet_rows(js: Any, tenant: str | None, everything: bool) -> dict[str, FleetSummary]:
    """Every fleet bundle's row (of ``tenant``'s only, when given); deleted ones only with
    ``everything``. Nothing when the bus has no rollouts, or they may not be listed."""
    import contextlib

    import msgspec

    from schemas.fleet import RolloutPhase, RolloutState
    from services.common import bus

    rows: dict[str, FleetSummary] = {}
    with contextlib.suppress(Exception):  # no bucket, no keys, not permitted: no fleet rows
        for key in sorted(await bus.kv_keys(js, bus.ROLLOUTS_BUCKET)):
            if not key.startswith("rollout."):
                continue
            entry = await bus.kv_get(js, bus.ROLLOUTS_BUCKET, key)
            if entry is None:
                continue
            try:
                state = msgspec.json.decode(entry.value, type=RolloutState)
            except msgspec.DecodeError:
                continue
            if tenant is not None and state.tenant != tenant:
                continue
            if everything or state.phase is not RolloutPhase.DELETED:
                rows[state.bundle] = fleet_summary(state)
    return rows


async def _watch(nc: Any, args: argparse.Namespace, ends: frozenset[Any]) -> Any:
    """A wait on ``args.bundle``, started (subscribed) before what it waits for is sent."""
    from services.cli import reads as user

    waiter = user.BundleWait(nc, args.cluster, args.bundle, ends=ends)
    await waiter.start()
    return waiter


async def _wait(waiter: Any, args: argparse.Namespace, revision: str) -> int:
    """Follow the bundle until ``revision`` reaches a phase the wait ends on (``reported``)."""
    from services.cli import reads as user

    st = await waiter.wait(revision, within=args.timeout, progress=True)
    return user.reported(
        st,
        command=args.command,
        bundle=args.bundle,
        revision=revision,
        timeout=args.timeout,
        goal="Deleted" if args.command == "delete" else "Ready",
    )


def cmd_delete(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.core.manifest import check_bundle_name
    from services.revisions.publish import publish_bundle

    async def run() -> int:
        check_bundle_name(args.bundle)
        async with user.connected(args) as nc:
            js = nc.jetstream()
            if args.fleet:
                from services.cli.fleet import publish as fleet

                return await fleet.delete(js, args.bundle, keep=args.keep_objects, wait=args.wait)
            if not await user.bundle_statuses(js, args.cluster, args.bundle):
                print(
                    f"driftbus delete: no bundle {args.bundle} in cluster {args.cluster}",
                    file=sys.stderr,
                )
                return 1
            revision = "delete-" + dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
            options = BundleOptions(
                prune=not args.keep_objects, allow_empty=True, propagation=args.propagation
            )
            waiter = await _watch(nc, args, DELETE_ENDS) if args.wait else None
            await publish_bundle(
                js,
                cluster=args.cluster,
                bundle=args.bundle,
                revision=revision,
                manifests=[],
                options=options,
                source="driftbus delete bundle",
                delete=True,
            )
            kept = "its objects are kept" if args.keep_objects else "its objects are pruned"
            print(f"deleting {args.bundle} in cluster {args.cluster}: {kept}", file=sys.stderr)
            return await _wait(waiter, args, revision) if waiter is not None else 0

    return exits.run_or_fail("delete", run())


DELETE_ENDS = frozenset((BundlePhase.DELETED, BundlePhase.FAILED))


def cmd_suspend(args: argparse.Namespace, *, suspended: bool) -> int:
    from schemas.codec import encode
    from schemas.messages import BundleControl
    from schemas.subjects import control_subject
    from services.cli import reads as user
    from services.cli import table
    from services.common import bus
    from services.core.manifest import check_bundle_name

    verb = "suspend" if suspended else "resume"

    async def run() -> None:
        check_bundle_name(args.bundle)
        async with user.connected(args) as nc:
            if not await user.bundle_statuses(nc.jetstream(), args.cluster, args.bundle):
                print(
                    f"driftbus {verb}: warning: no bundle {args.bundle} in cluster "
                    f"{args.cluster} yet; this holds for it once it is published",
                    file=sys.stderr,
                )
            ctl = BundleControl(
                cluster=args.cluster,
                bundle=args.bundle,
                suspended=suspended,
                reason=getattr(args, "reason", "") or "",
                at=dt.datetime.now(dt.UTC),
            )
            await bus.publish(
                nc.jetstream(), control_subject(args.cluster, args.bundle), encode(ctl)
            )

    try:
        asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - one line, naming the bundle
        return table.fail(verb, exc)
    if suspended:
        print(
            f"suspended {args.bundle} in cluster {args.cluster}: nothing of it is written "
            "(drift is reported, not corrected) until `driftbus resume`"
        )
    else:
        print(f"resumed {args.bundle} in cluster {args.cluster}: what differs is written now")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from schemas.codec import encode
    from schemas.messages import RollbackRequest
    from services.cli import reads as user
    from services.core.manifest import check_bundle_name

    async def run() -> int:
        check_bundle_name(args.bundle)
        async with user.connected(args) as nc:
            req = RollbackRequest(cluster=args.cluster, bundle=args.bundle, to=args.to or "")
            waiter = await _watch(nc, args, user.WAIT_ENDS) if args.wait else None
            answer = await ask_planner(nc, "rollback", args.cluster, args.bundle, encode(req))
            if answer is None:
                return 2
            if not answer.ok:
                print(f"driftbus rollback: {args.bundle}: {answer.message}", file=sys.stderr)
                return 1
            print(f"{args.bundle}: {answer.message}", file=sys.stderr)
            if waiter is None:
                return 0
            return await _wait(waiter, args, answer.revision)

    return exits.run_or_fail("rollback", run())


def _bundle_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", metavar="BUNDLE", help="the bundle (TENANT/NAME for a tenant's)")
    context.add_cluster_arg(p, "the cluster the bundle is for")


def _wait_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true", help=WAIT_HELP)
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to --wait (default %(default)s)"
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ls = sub.add_parser(
        "bundles", help="list bundles: phase, revision, age, objects ready, suspended"
    )
    context.add_cluster_arg(ls, "the cluster whose bundles to list")
    ls.add_argument(
        "--tenant", help="only this tenant's bundles ('' for the platform team's, no tenant)"
    )
    ls.add_argument("--all", action="store_true", help="also deleted bundles")
    output.add_output_arg(ls, "cli-bundles")
    settings.add_arguments(ls, NatsSettings)
    ls.set_defaults(func=cmd_bundles)

    de = sub.add_parser(
        "delete",
        help="delete a bundle: prune its objects, then forget it",
        description="Delete a bundle: its objects are pruned with every prune safeguard "
        "(only what carries its label; driftbus.dev/prune: disabled and objects in use are "
        "kept), then the bundle is forgotten. With --wait: 0 Deleted, 1 a prune failed.",
    )
    de.add_argument("what", choices=["bundle"], help="what to delete")
    _bundle_args(de)
    de.add_argument(
        "--keep-objects", action="store_true", help="forget the bundle, leave its objects"
    )
    de.add_argument(
        "--fleet",
        action="store_true",
        help="a fleet bundle: delete it from every cluster its rollouts reached (no --cluster)",
    )
    de.add_argument(
        "--propagation",
        choices=get_args(Propagation),
        default=BundleOptions().propagation,
        help="how the prune deletes treat dependents (default %(default)s)",
    )
    _wait_args(de)
    settings.add_arguments(de, NatsSettings)
    de.set_defaults(func=cmd_delete)

    su = sub.add_parser("suspend", help="stop writing a bundle's objects (drift is still reported)")
    _bundle_args(su)
    su.add_argument("--reason", default="", help="why, shown in the bundle's status")
    settings.add_arguments(su, NatsSettings)
    su.set_defaults(func=lambda a: cmd_suspend(a, suspended=True))

    re_ = sub.add_parser("resume", help="write a suspended bundle's objects again")
    _bundle_args(re_)
    settings.add_arguments(re_, NatsSettings)
    re_.set_defaults(func=lambda a: cmd_suspend(a, suspended=False))

    rb = sub.add_parser(
        "rollback",
        help="put an earlier revision back in force (from the bus's last revisions)",
        description="Republish an earlier revision of a bundle (the bus keeps the last 5 "
        "per bundle); only the objects that differ are written. With --wait: 0 Ready, 1 "
        "Failed, Degraded or Conflict, 2 no end within --timeout.",
    )
    _bundle_args(rb)
    rb.add_argument("--to", metavar="REVISION", help="default: the revision before this one")
    _wait_args(rb)
    settings.add_arguments(rb, NatsSettings)
    rb.set_defaults(func=cmd_rollback)


async def ask_planner(
    nc: Connection, command: str, cluster: str, bundle: str, request: bytes
) -> RollbackAnswer | None:
    """Ask the planner of ``cluster`` on ``bundle``'s rollback subject (``rollback``,
    ``approve``) and return its answer; None, said on stderr, when no planner answered."""
    from schemas.codec import decode
    from schemas.messages import RollbackAnswer
    from schemas.subjects import rollback_subject
    from services.common import bus

    try:
        reply = await bus.request(nc, rollback_subject(cluster, bundle), request, timeout=15.0)
    except Exception as exc:  # noqa: BLE001 - no responders, a timeout
        print(
            f"driftbus {command}: no planner of cluster {cluster} answered "
            f"({type(exc).__name__}); is one running?",
            file=sys.stderr,
        )
        return None
    return decode(reply.data, RollbackAnswer)
