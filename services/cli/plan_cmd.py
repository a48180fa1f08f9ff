"""``driftbus plan`` as a command: its flags, the NATS and Kubernetes connections it opens, and
how it prints the rows ``plan.plan`` computes.
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
    from services.cli import table, user
    from services.cli.plan import plan
    from services.common import load
    from services.common.kube import KubeClient
    from services.core.manifest import ManifestError, check_bundle_name

    try:
        check_bundle_name(args.bundle)
        loaded = load_manifests(args)
    except (load.InputError, ManifestError) as exc:
        return table.fail("plan", exc)

    async def run() -> int:
        nc = await user.connect(args)
        kube = await KubeClient.from_kubeconfig(args.kubeconfig, args.context)
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
            )
        except ManifestError as exc:
            return table.fail("plan", exc)
        finally:
            await kube.close()
            await nc.drain()
        if args.output == "json":
            table.emit([r.as_json() for r in rows], [], "json")
            return 0
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
        counts: dict[str, int] = {}
        for r in rows:
            counts[r.action] = counts.get(r.action, 0) + 1
        print("\nplan: " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())))
        return 0

    return asyncio.run(run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pl = sub.add_parser("plan", help="what a publish would apply, delete or skip, and why")
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
        help="the cluster to dry-run against (default: $KUBECONFIG)",
    )
    pl.add_argument("--context", help="kubeconfig context (default: the current one)")
    pl.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(pl, NatsSettings)
    pl.set_defaults(func=cmd_plan)
