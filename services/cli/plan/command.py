"""``driftbus plan`` as a command: its flags, the NATS and Kubernetes connections it opens, and
how it prints the rows ``plan.plan`` computes (table, JSON document or Markdown:
``plan_render``). Exit: 1 when the revision would be refused or the server refuses an object in
the dry-run; with ``--exit-code`` also 2 when anything would be applied or deleted; else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from services.cli.inputs import add_source_args, load_manifests
from services.cli.publish import add_ignore_arg
from services.common import settings
from services.common.bus import NatsSettings


def cmd_plan(args: argparse.Namespace) -> int:

    from services.cli import context, output, table
    from services.cli import reads as user
    from services.cli.plan import render as plan_render
    from services.cli.plan.explain import plan
    from services.core.manifest import ManifestError, check_bundle_name
    from services.inputs import load
    from services.kube import KubeClient

    try:
        check_bundle_name(args.bundle)
        loaded = load_manifests(args)
    except (load.InputError, ManifestError) as exc:
        return table.fail("plan", exc)

    # the running stack's cluster only when its bus is the one used too
    stack = (context.read() if not (args.nats_url or os.environ.get("NATS_URL")) else None) or {}

    async def run() -> int:
        nc = await user.connect(args)
        try:
            kube = await KubeClient.from_kubeconfig(
                args.kubeconfig or stack.get("kubeconfig"), args.context
            )
        except Exception as exc:  # noqa: BLE001 - no usable kubeconfig: one line
            await nc.drain()
            return table.fail("plan", RuntimeError(f"the cluster cannot be reached: {exc}"))
        try:
            rows = await plan(
                nc.jetstream(),
                kube,
                cluster=args.cluster,
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
            await kube.close()
            await nc.drain()
        doc = plan_render.document(rows, cluster=args.cluster, bundle=args.bundle, force=args.force)
        code = plan_render.exit_code(doc)
        if code == plan_render.CHANGES and not args.exit_code:
            code = plan_render.NO_CHANGES
        if args.output in ("json", "yaml"):
            output.dump(doc, args.output)
            return code
        if args.output == "markdown":
            print(plan_render.markdown(doc), end="")
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
        return code

    return asyncio.run(run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pl = sub.add_parser(
        "plan",
        help="what a publish would apply, delete or skip, and why",
        description="What a publish would apply, delete or skip, and why, by server-side "
        "dry-run (nothing is written). Exit: 1 when the revision would be refused or the server "
        "refuses an object; with --exit-code also 2 when anything would change; else 0.",
    )
    add_source_args(pl)
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
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="the cluster to dry-run against (default: $KUBECONFIG, else the one of the "
        "stack `driftbus up` runs)",
    )
    pl.add_argument("--context", help="kubeconfig context (default: the current one)")
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
        help="table (default), json or yaml (schemas/json/cli-plan.schema.json), or markdown "
        "(a pull-request comment)",
    )
    settings.add_arguments(pl, NatsSettings)
    pl.set_defaults(func=cmd_plan)
