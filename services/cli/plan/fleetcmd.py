"""``driftbus plan`` for a fleet: the targeting flags read as ``publish`` reads them, the plan
computed from the bus (``gather``), optionally the dry-run of what would change on each cluster
(``--diff``, through the kubeconfig context named as the cluster), and printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from services.cli.fleet.publish import rollout_spec
from services.cli.plan.fleet import ClusterPlan, Targeting
from services.cli.publish import bundle_options


def targeting(args: argparse.Namespace, manifests: list[Any]) -> Targeting:
    """The fleet a publish with these flags names, and how it rolls out."""
    named = args.cluster if isinstance(args.cluster, list) else []
    return Targeting(
        bundle=args.bundle,
        manifests=manifests,
        options=bundle_options(_with_publish_defaults(args)),
        selector=args.selector or "",
        named=list(named),
        steps=list(rollout_spec(args).steps),
        substitute=args.substitute,
        on_leave=args.on_leave,
    )


def _with_publish_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the publish-only option flags plan does not take, at their defaults."""
    from schemas.messages import BundleOptions

    d = BundleOptions()
    given = vars(args)
    defaults = {
        "allow_replace": d.allow_replace,
        "take_over": d.take_over,
        "prune_propagation": d.propagation,
        "drift": d.drift,
    }
    return argparse.Namespace(**{**defaults, **given})


async def dry_runs(plans: list[ClusterPlan], kubeconfig: str, *, force: bool) -> None:
    """``--diff``: each cluster's objects that would be applied, dry-run on its server (the
    kubeconfig's context named as the cluster); a cluster that cannot be reached turns its
    rows into errors naming why."""
    from services.cli.plan.explain import dry_run
    from services.cli.plan.verdict import PlanRow
    from services.kube import KubeClient

    for p in plans:
        if not any(r.action == "apply" for r in p.rows):
            continue
        try:
            kube = await KubeClient.from_kubeconfig(kubeconfig, p.cluster)
        except Exception as exc:  # noqa: BLE001 - no such context, or unreadable: named
            why = f"not dry-run: kubeconfig context {p.cluster}: {exc}"
            p.rows = [PlanRow(r.key, "error", why) if r.action == "apply" else r for r in p.rows]
            continue
        try:
            p.rows = [await dry_run(kube, r, force=force) for r in p.rows]
        finally:
            await kube.close()


async def run_fleet(args: argparse.Namespace, loaded: Any, kubeconfig: str | None) -> int:
    from services.cli import output, table
    from services.cli import reads as user
    from services.cli.plan import fleetview
    from services.cli.plan.gather import fleet_plan
    from services.cli.plan.render import CHANGES, NO_CHANGES

    t = targeting(args, [m.obj for m in loaded.manifests])
    nc = await user.connect(args)
    try:
        plans, unregistered = await fleet_plan(nc.jetstream(), t)
        if kubeconfig is not None:
            await dry_runs(plans, kubeconfig, force=args.force)
    finally:
        await nc.drain()
    doc = fleetview.document(plans, t, unregistered=unregistered, diff=kubeconfig is not None)
    code = fleetview.exit_code(doc)
    if code == CHANGES and not args.exit_code:
        code = NO_CHANGES
    if args.output in ("json", "yaml"):
        output.dump(doc, args.output)
        return code
    if args.output == "markdown":
        print(fleetview.markdown(doc), end="")
        return code
    for c in unregistered:
        print(f"driftbus plan: cluster {c} is not registered (driftbus clusters)", file=sys.stderr)
    table.emit(fleetview.summary_rows(doc), fleetview.SUMMARY_COLUMNS, "table")
    changed = fleetview.object_rows(doc)
    if changed:
        print()
        table.emit(changed, fleetview.OBJECT_COLUMNS, "table")
    for e in doc.clusters:
        for o in e.objects:
            if o.changes:
                print(f"\n{e.cluster}: {fleetview.object_name(o)}:")
                for ch in o.changes:
                    print(f"  {fleetview.diff_line(ch)}")
    print(f"\nplan: {fleetview.summary_line(doc)}")
    if not doc.diff:
        print("(from the recorded state alone: no API server asked; --diff dry-runs the changes)")
    return code
