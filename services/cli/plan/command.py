"""``driftbus plan`` as a command: its flags, the connections it opens, and how it prints the
plan (table, JSON document or Markdown: ``render`` for one cluster, ``fleetview`` for a fleet).

One cluster (``--cluster C``): with a kubeconfig at hand (``--kubeconfig``, ``$KUBECONFIG``, or
the stack ``driftbus up`` runs) the objects that would change are dry-run on the server and the
plan shows their field-level diff, as it always did; ``--no-diff`` (or no kubeconfig) plans from
the bus alone. A fleet (``-l/--selector``, ``--cluster`` repeated, a rollout flag) is planned
from the bus alone — no request to any API server, no kubeconfig needed — unless ``--diff``
asks for the dry-run of what would change, through the kubeconfig's context named as each
cluster (as ``driftbus up`` names them). Exit: 1 when the revision would be refused (on any
cluster) or the server refuses an object; with ``--exit-code`` also 2 when anything would be
applied or deleted; else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from services.cli.fleet.publish import add_fleet_flags, is_fleet
from services.cli.inputs import add_source_args, load_manifests
from services.cli.publish import add_ignore_arg
from services.common import settings
from services.common.bus import NatsSettings


def cmd_plan(args: argparse.Namespace) -> int:
    from services.cli import context, table
    from services.core.manifest import ManifestError, check_bundle_name
    from services.fleet.publish import FleetError, check
    from services.fleet.rollout_flags import from_args
    from services.inputs import load

    try:
        check_bundle_name(args.bundle)
        if is_fleet(args):
            check(args.selector or "", _named(args), from_args(args).spec())
        loaded = load_manifests(args)
    except (load.InputError, ManifestError, FleetError) as exc:
        return table.fail("plan", exc)
    # the running stack's kubeconfig only when its bus is the one used too
    stack = (context.read() if not (args.nats_url or os.environ.get("NATS_URL")) else None) or {}
    kubeconfig = args.kubeconfig or stack.get("kubeconfig")
    if is_fleet(args):
        from services.cli.plan.fleetcmd import run_fleet

        if args.diff and not kubeconfig:
            return table.fail("plan", RuntimeError("--diff needs a kubeconfig (--kubeconfig)"))
        return asyncio.run(run_fleet(args, loaded, kubeconfig if args.diff else None))
    diff = bool(kubeconfig) if args.diff is None else args.diff
    if diff and not kubeconfig:
        return table.fail("plan", RuntimeError("--diff needs a kubeconfig (--kubeconfig)"))
    return asyncio.run(_run_one(args, loaded, kubeconfig if diff else None))


def _named(args: argparse.Namespace) -> list[str]:
    c = args.cluster
    return list(c) if isinstance(c, list) else [c] if c else []


async def _run_one(args: argparse.Namespace, loaded: Any, kubeconfig: str | None) -> int:
    """One cluster's plan: dry-run diffs through ``kubeconfig``, or (None) from the bus alone."""
    from services.cli import output, table
    from services.cli import reads as user
    from services.cli.plan import render as plan_render
    from services.cli.plan.explain import plan
    from services.core.manifest import ManifestError
    from services.kube import KubeClient

    cluster = _named(args)[0]
    nc = await user.connect(args)
    kube = None
    if kubeconfig is not None:
        try:
            kube = await KubeClient.from_kubeconfig(kubeconfig, args.context)
        except Exception as exc:  # noqa: BLE001 - no usable kubeconfig: one line
            await nc.drain()
            return table.fail("plan", RuntimeError(f"the cluster cannot be reached: {exc}"))
    try:
        rows = await plan(
            nc.jetstream(),
            kube,
            cluster=cluster,
            bundle=args.bundle,
            loaded=loaded,
            prune_removed=not args.no_prune,
            namespace=args.namespace or "",
            ignore=list(args.ignore or ()),
            force=args.force,
        )
    except ManifestError as exc:
        return table.fail("plan", exc)
    finally:
        if kube is not None:
            await kube.close()
        await nc.drain()
    doc = plan_render.document(rows, cluster=cluster, bundle=args.bundle, force=args.force)
    code = plan_render.exit_code(doc)
    if code == plan_render.CHANGES and not args.exit_code:
        code = plan_render.NO_CHANGES
    if args.output in ("json", "yaml"):
        output.dump(doc, args.output)
        return code
    if args.output == "markdown":
        print(plan_render.markdown(doc, diffed=kube is not None), end="")
        return code
    table.emit(
        [
            {
                "action": r.action,
                "reason": r.reason,
                "kind": r.key.kind,
                "namespace": r.key.namespace,
                "name": r.key.name,
                "changes": len(r.changes) or "",
                "ignored": ",".join(r.ignored),
            }
            for r in rows
        ],
        ["action", "reason", "kind", "namespace", "name", "changes", "ignored"],
        "table",
    )
    for r in rows:
        if r.changes:
            print(f"\n{r.key}:")
            for c in r.changes:
                print(f"  {c}")
    print(f"\nplan: {plan_render.summary_line(doc)}")
    if kube is None:
        print(f"({plan_render.NO_DIFF_NOTE.replace('`', '')})")
    return code


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pl = sub.add_parser(
        "plan",
        help="what a publish would apply, delete or skip, and why (one cluster or a fleet)",
        description="What a publish would apply, delete or skip, and why, by the planner's own "
        "rule on the state the bus records (nothing is written). One cluster with a kubeconfig: "
        "the objects that would change are dry-run on the server for their field-level diff "
        "(--no-diff: not). A fleet (--selector, --cluster repeated, a rollout flag): every "
        "cluster it names, from the bus alone, no API server asked (--diff: dry-run what would "
        "change, through the kubeconfig context named as each cluster). docs/plan.md. Exit: 1 "
        "when the revision would be refused or the server refuses an object; with --exit-code "
        "also 2 when anything would change; else 0.",
    )
    add_source_args(pl, fleet=True)
    pl.add_argument(
        "--no-prune", action="store_true", help="show objects leaving the bundle as kept"
    )
    pl.add_argument(
        "--allow-empty",
        action="store_true",
        help="plan a revision with no objects (every object of the bundle would be deleted)",
    )
    add_ignore_arg(pl)
    pl.add_argument(
        "--diff",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="dry-run the objects that would change on their server for the field-level diff "
        "(default: on for one cluster with a kubeconfig, off for a fleet; --no-diff: the bus "
        "alone, no API server asked)",
    )
    pl.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="the cluster to dry-run against (default: $KUBECONFIG, else the one of the "
        "stack `driftbus up` runs); a fleet's --diff uses its context named as each cluster",
    )
    pl.add_argument("--context", help="kubeconfig context of one cluster (default: the current)")
    pl.add_argument(
        "--force",
        action="store_true",
        help="plan a publish with --force: fields other managers own are taken over",
    )
    pl.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 2 when anything would be applied or deleted (0 nothing, 1 errors): for CI",
    )
    pl.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml", "markdown"],
        default="table",
        help="table (default), json or yaml (schemas/json/cli-plan.schema.json; a fleet: "
        "cli-plan-fleet.schema.json), or markdown (a pull-request comment)",
    )
    add_fleet_flags(pl)
    settings.add_arguments(pl, NatsSettings)
    pl.set_defaults(func=cmd_plan)
