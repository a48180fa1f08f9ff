"""``driftbus publish``: send manifests as a bundle revision and, with ``--wait``, follow its status
to an exit code (0 Ready; 1 Failed, Degraded or Conflict; 2 no end within ``--timeout``; 3
PruneHeld: applied, its deletions wait for ``driftbus approve`` or ``--allow-prune``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, get_args

from schemas.messages import BundleOptions, DriftMode, IgnoreRule, Propagation
from services.cli.inputs import add_source_args, load_manifests
from services.common import settings
from services.common.bus import NatsSettings
from services.core.ignore import IgnoreError, parse_rule


def bundle_options(args: argparse.Namespace) -> BundleOptions:
    """The BundleOptions a publish sends, from its flags (``_add_bundle_option_flags``)."""
    return BundleOptions(
        prune=not args.no_prune,
        force=args.force,
        allow_replace=args.allow_replace,
        allow_empty=args.allow_empty,
        take_over=args.take_over,
        propagation=args.prune_propagation,
        namespace=args.namespace or "",
        ignore=list(args.ignore or ()),
        drift=args.drift,
        depends_on=list(getattr(args, "depends_on", None) or ()),
        override_window=bool(getattr(args, "override_window", False)),
        allow_prune=bool(getattr(args, "allow_prune", False)),
    )


def _ignore_rule(text: str) -> IgnoreRule:
    try:
        return parse_rule(text)
    except IgnoreError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_publish(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.cli import table
    from services.cli.fleet import publish as fleet
    from services.core.manifest import ManifestError, check_bundle_name
    from services.fleet.publish import FleetError, check
    from services.inputs import load

    if isinstance(args.cluster, list) and len(args.cluster) == 1 and not fleet.is_fleet(args):
        args.cluster = args.cluster[0]
    try:
        check_bundle_name(args.bundle)  # one line before anything is read or sent
        if fleet.is_fleet(args):
            check(args.selector or "", args.cluster or [], fleet.rollout_spec(args))
        loaded = load_manifests(args)
        revision = args.revision or loaded.revision or loaded.content_revision()
        options = bundle_options(args)
    except (load.InputError, ManifestError) as exc:
        return table.fail("publish", exc)
    except FleetError as exc:
        return table.fail("publish", exc)
    if fleet.is_fleet(args):
        return asyncio.run(_publish_fleet(args, loaded, revision, options))

    from services.common import telemetry
    from services.revisions.publish import publish_bundle

    telemetry.setup("cli", telemetry.TelemetrySettings(otlp_endpoint=otlp_endpoint()))

    async def run() -> int:
        refused = user.quiet_members_denial()
        nc = await user.connect(args)
        js = nc.jetstream()
        try:
            # asked alongside the publish, so a slow or refused answer costs (almost) no time
            served = asyncio.create_task(user.unserved(js, args.cluster, refused=refused))
            waiter = user.BundleWait(nc, args.cluster, args.bundle)
            if args.wait:
                await waiter.start()
            # the root of the bundle's trace: planner, watcher and appliers continue it
            with telemetry.tracer.start_as_current_span(
                "publish bundle",
                attributes={
                    "cluster": args.cluster,
                    "bundle": args.bundle,
                    "revision": revision,
                    "objects": len(loaded.manifests),
                },
            ):
                await publish_bundle(
                    js,
                    cluster=args.cluster,
                    bundle=args.bundle,
                    revision=revision,
                    manifests=[m.obj for m in loaded.manifests],
                    options=options,
                    source=loaded.source,
                )
            print(
                f"published {args.bundle}@{revision} to cluster {args.cluster}: "
                f"{len(loaded.manifests)} objects",
                file=sys.stderr,
            )
            if problems := await served:
                for problem in problems:
                    print(f"driftbus publish: warning: {problem}", file=sys.stderr)
                print(
                    "driftbus publish: warning: the bundle is published, but nothing reconciles "
                    f"it until a watcher and an applier for cluster {args.cluster} run",
                    file=sys.stderr,
                )
            if not args.wait:
                return 0
            st = await waiter.wait(revision, within=args.timeout, progress=True)
        finally:
            await nc.drain()
            telemetry.flush()
        return user.reported(
            st, command="publish", bundle=args.bundle, revision=revision, timeout=args.timeout
        )

    return asyncio.run(run())


async def _publish_fleet(
    args: argparse.Namespace, loaded: Any, revision: str, options: BundleOptions
) -> int:
    from services.cli import reads as user
    from services.cli import table
    from services.cli.fleet import publish as fleet
    from services.fleet.publish import FleetError
    from services.revisions.publish import BundleError

    async with user.connected(args) as nc:
        try:
            return await fleet.publish(nc, args, loaded, revision, options)
        except (FleetError, BundleError) as exc:
            return table.fail("publish", exc)


def otlp_endpoint() -> str:
    """Where the CLI sends its spans: the services' setting, from the environment only."""
    return os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")


def add_ignore_arg(p: argparse.ArgumentParser) -> None:
    """``--ignore``, for ``publish`` and ``plan`` alike (``args.ignore``: the rules)."""
    p.add_argument(
        "--ignore",
        action="append",
        type=_ignore_rule,
        metavar="[GROUP/]KIND[/NS/NAME]:POINTER",
        help="fields another controller manages, neither applied nor compared, e.g. "
        "apps/Deployment:/spec/replicas (repeatable; comma-separated pointers; NS and NAME may "
        "be *; docs/drift.md)",
    )


def _add_bundle_option_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``BundleOptions`` (``bundle_options`` reads them back)."""
    p.add_argument("--no-prune", action="store_true", help="keep objects that leave the bundle")
    p.add_argument("--force", action="store_true", help="take over fields other managers own")
    p.add_argument(
        "--allow-replace",
        action="store_true",
        help="delete and recreate objects whose immutable fields changed",
    )
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="publish even when PATH holds no objects, which prunes every object the bundle "
        "has (without it an empty revision is refused: it is usually a wrong path)",
    )
    p.add_argument(
        "--take-over",
        action="store_true",
        help="take objects another bundle declares: they move to this bundle (without it "
        "such an object is refused, naming the bundle that has it)",
    )
    add_ignore_arg(p)
    p.add_argument(
        "--depends-on",
        action="append",
        metavar="BUNDLE",
        help="a bundle of the same cluster that must be Ready before this one writes anything "
        "(repeatable; NAME of the same tenant, TENANT/NAME, or /NAME for a platform bundle)",
    )
    p.add_argument(
        "--drift",
        choices=get_args(DriftMode),
        default=BundleOptions().drift,
        help="what a change someone else makes to a field driftbus owns gets: correct (apply "
        "the manifest again) or warn (write nothing, report the bundle OutOfSync naming the "
        "objects); default %(default)s",
    )
    p.add_argument(
        "--override-window",
        action="store_true",
        help="write this revision (and correct its drift) even in a deny sync window or "
        "outside every allow window; each such write names the window in the decision log "
        "(docs/windows.md)",
    )
    p.add_argument(
        "--allow-prune",
        action="store_true",
        help="let this revision's deletions through even past the prune budget (more than "
        "half of the bundle's objects on a cluster, or a Namespace or CRD); without it such a "
        "revision is applied but its deletions wait: PruneHeld (docs/lifecycle.md)",
    )
    p.add_argument(
        "--prune-propagation",
        choices=get_args(Propagation),
        default=BundleOptions().propagation,
        help="how prune deletes treat the pruned object's dependents: Background (deleted "
        "by the garbage collector afterwards), Foreground (deleted first, the object "
        "last) or Orphan (kept); default %(default)s",
    )


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pub = sub.add_parser(
        "publish",
        help="publish manifests as a bundle",
        description="Publish manifests as a bundle. With --wait the exit code says how it "
        "ended: 0 Ready; 1 Failed, Degraded or Conflict; 2 not ended within --timeout.",
    )
    add_source_args(pub, fleet=True)
    pub.add_argument(
        "--revision",
        help="default: the Git commit, the OCI manifest's digest, or a digest of the content",
    )
    _add_bundle_option_flags(pub)
    pub.add_argument(
        "--wait",
        action="store_true",
        help="follow status until Ready, Failed, Degraded or Conflict; exit non-zero unless Ready "
        "(a fleet: until Complete, Halted, RolledBack or RollbackFailed; a rollback is followed "
        "until the previous revision is Ready again on every cluster it went back to)",
    )
    pub.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to --wait (default %(default)s)"
    )
    from services.cli.fleet.publish import add_fleet_flags

    add_fleet_flags(pub)
    settings.add_arguments(pub, NatsSettings)
    pub.set_defaults(func=cmd_publish)
