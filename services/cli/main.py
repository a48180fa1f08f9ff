"""``driftbus`` — the command line.

Subcommands so far:

* ``driftbus up [--detach]`` / ``driftbus down`` — the whole stack locally (``services/cli/up.py``).
* ``driftbus watcher|planner|applier`` — run one service (settings: ``--help`` of each).
* ``driftbus publish PATH... --cluster C --bundle B [--wait]`` — publish manifests as a bundle.
* ``driftbus status [--cluster C] [--bundle B] [-o json]`` — current state of bundles/objects.
* ``driftbus why KIND/NAMESPACE/NAME --cluster C`` — the decision history of one object.
* ``driftbus plan PATH... --cluster C --bundle B`` — what a publish would do, with diffs.
* ``driftbus assets`` — show or build the server binaries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

from services.applier import service as applier
from services.cli import security as security_cmd
from services.cli import up as up_cmd
from services.common import logs, settings
from services.common.bus import NatsSettings
from services.controlplane import assets
from services.planner import service as planner
from services.watcher import service as watcher

SERVICES: dict[str, tuple[Any, type[Any], str]] = {
    "watcher": (watcher.run, watcher.WatcherSettings, "list+watch a cluster, publish SHAs"),
    "planner": (planner.run, planner.PlannerSettings, "decide what to apply"),
    "applier": (applier.run, applier.ApplierSettings, "server-side apply intents"),
}


def cmd_service(args: argparse.Namespace) -> int:
    run, model, _ = SERVICES[args.command]
    try:
        config = settings.load(model, args)
    except settings.SettingsError as exc:
        print(f"driftbus {args.command}: {exc}", file=sys.stderr)
        return 2
    logs.configure(args.command)
    return asyncio.run(_until_signal(args.command, run, config))


async def _until_signal(name: str, run: Any, config: Any) -> int:
    """Run a service until SIGTERM/SIGINT. The applier gets a stop event so it can finish the
    intents it started; the others are cancelled (everything they hold is in the streams)."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    kwargs = {"stopping": stopping} if name == "applier" else {}
    task = asyncio.create_task(run(config, **kwargs))

    def stop() -> None:
        stopping.set()
        if name != "applier":
            task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return 0


def _color(text: str, code: str) -> str:
    return f"\033[{code}m{text}\033[0m" if sys.stdout.isatty() else text


def _fail(command: str, exc: Exception) -> int:
    print(f"driftbus {command}: {exc}", file=sys.stderr)
    return 1


def _load_manifests(args: argparse.Namespace) -> Any:
    """The manifests named on the command line: PATH... or --git REPO --ref REF [--path DIR]."""
    from services.cli import load

    if args.git:
        return load.load_git(args.git, args.ref, args.path or "")
    if args.paths:
        return load.load_paths(args.paths)
    raise load.InputError(f"nothing to {args.command}: give PATH... or --git REPO --ref REF")


def cmd_publish(args: argparse.Namespace) -> int:
    from services.cli import load, user
    from services.core.manifest import ManifestError

    try:
        loaded = _load_manifests(args)
        revision = args.revision or loaded.revision or user.content_revision(loaded)
        options = user.BundleOptions(
            prune=not args.no_prune, force=args.force, allow_replace=args.allow_replace
        )
    except (load.InputError, ManifestError) as exc:
        return _fail("publish", exc)

    from services.common import telemetry

    telemetry.setup("cli", telemetry.TelemetrySettings(otlp_endpoint=otlp_endpoint()))

    async def run() -> int:
        nc = await _connect(args)
        js = nc.jetstream()
        try:
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
                await user.publish(
                    js,
                    cluster=args.cluster,
                    bundle=args.bundle,
                    loaded=loaded,
                    revision=revision,
                    options=options,
                )
            print(
                f"published {args.bundle}@{revision} to cluster {args.cluster}: "
                f"{len(loaded.manifests)} objects",
                file=sys.stderr,
            )
            if not args.wait:
                return 0
            st = await waiter.wait(revision, within=args.timeout, progress=sys.stderr.isatty())
        finally:
            await nc.drain()
            telemetry.flush()
        if st is None:
            print(
                f"driftbus publish: no status for {revision} within {args.timeout:.0f}s "
                "(is a planner running?)",
                file=sys.stderr,
            )
            return 2
        if st.phase is user.BundlePhase.READY:
            print(f"{colour_phase(st.phase)}: {st.message}")
            return 0
        print(f"{colour_phase(st.phase)}: {st.message}")
        for line in st.failed_objects:
            print(f"  {line}")
        return 1

    return asyncio.run(run())


def otlp_endpoint() -> str:
    """Where the CLI sends its spans: the services' setting, from the environment only."""
    return os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")


def colour_phase(phase: object) -> str:
    from services.cli.table import colour

    return colour(str(phase))


async def _connect(args: argparse.Namespace) -> Any:
    """The user's connection: credentials and TLS from the --nats-* flags or environment."""
    from services.common import bus

    s = settings.load(NatsSettings, args)
    return await bus.connect(s, name="driftbus-cli", reconnect=False)


def cmd_status(args: argparse.Namespace) -> int:
    from services.cli import table, user

    async def run() -> int:
        nc = await _connect(args)
        js = nc.jetstream()
        try:
            if args.bundle:
                rows = await user.object_rows(js, args.cluster, args.bundle)
                bundles = await user.bundle_statuses(js, args.cluster, args.bundle)
                if args.output == "json":
                    table.emit(
                        [{"bundle": [msgspec_to_builtins(b) for b in bundles], "objects": rows}],
                        [],
                        "json",
                    )
                    return 0
                for b in bundles:
                    c = b.counts
                    print(
                        f"{b.bundle}@{b.revision}: {table.colour(str(b.phase))} — {b.message} "
                        f"(applied {c.applied}/{c.total}, ready {c.ready}/{c.total})"
                    )
                table.emit(
                    rows,
                    ["kind", "namespace", "name", "phase", "health", "message", "last_change"],
                    "table",
                )
                return await _follow(nc, args) if args.follow else 0
            statuses = await user.bundle_statuses(js, args.cluster)
            rows = [
                {
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
            table.emit(
                rows,
                ["bundle", "revision", "phase", "applied", "ready", "failed", "message"],
                args.output,
            )
            return await _follow(nc, args) if args.follow else 0
        finally:
            await nc.drain()

    return asyncio.run(run())


async def _follow(nc: Any, args: argparse.Namespace) -> int:
    """After the current state, print each status event as it happens until Ctrl-C."""
    from schemas.codec import WireError, decode, encode
    from schemas.messages import BundleStatus, ObjectStatus
    from schemas.subjects import encode_token
    from services.cli.table import colour

    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)

    async def on_msg(msg: Any) -> None:
        event: BundleStatus | ObjectStatus
        try:
            if msg.subject.endswith(".bundle"):
                event = b = decode(msg.data, BundleStatus)
                line = f"{b.bundle}@{b.revision}: {colour(str(b.phase))} {b.message}"
            else:
                event = o = decode(msg.data, ObjectStatus)
                line = f"{o.key}: {colour(str(o.phase))} {o.message}"
        except WireError:
            return
        if args.output == "json":
            # re-encoded from the contract: only its fields, whatever else a publisher added
            print(encode(event).decode(), flush=True)
        else:
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)

    bundle = encode_token(args.bundle) if args.bundle else "*"
    await nc.subscribe(f"driftbus.status.{encode_token(args.cluster)}.{bundle}.>", cb=on_msg)
    if args.bundle is None:
        await nc.subscribe(f"driftbus.status.{encode_token(args.cluster)}.*.bundle", cb=on_msg)
    await done.wait()
    return 0


def msgspec_to_builtins(value: object) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def cmd_why(args: argparse.Namespace) -> int:
    from schemas.subjects import ObjectKey
    from services.cli import table, user

    parts = args.object.split("/")
    if len(parts) not in (2, 3):
        return _fail("why", ValueError("give KIND[.GROUP]/NAMESPACE/NAME or KIND[.GROUP]/NAME"))
    kind, _, group = parts[0].partition(".")
    key = ObjectKey(
        group=group, kind=kind, namespace=parts[1] if len(parts) == 3 else "", name=parts[-1]
    )

    async def run() -> int:
        nc = await _connect(args)
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
            }
            for r in records
        ]
        if args.output == "table":
            print(f"decisions for {key} in cluster {args.cluster}:")
        table.emit(
            rows,
            ["at", "bundle", "revision", "action", "reason", "manifest", "applied", "live"],
            args.output,
        )
        return 0 if records else 1

    return asyncio.run(run())


def cmd_shards(args: argparse.Namespace) -> int:
    from services.cli import table, user

    async def run() -> int:
        nc = await _connect(args)
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


def cmd_plan(args: argparse.Namespace) -> int:
    from services.cli import load, table
    from services.cli.plan import plan
    from services.common.kube import KubeClient
    from services.core.manifest import ManifestError

    try:
        loaded = _load_manifests(args)
    except (load.InputError, ManifestError) as exc:
        return _fail("plan", exc)

    async def run() -> int:
        nc = await _connect(args)
        kube = await KubeClient.from_kubeconfig(args.kubeconfig, args.context)
        try:
            rows = await plan(
                nc.jetstream(),
                kube,
                cluster=args.cluster,
                bundle=args.bundle,
                loaded=loaded,
                prune_removed=not args.no_prune,
            )
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
                }
                for r in rows
            ],
            ["action", "reason", "kind", "namespace", "name", "changes"],
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


def cmd_ui(args: argparse.Namespace) -> int:
    from services.ui import server

    logs.configure("ui")
    nats_settings = settings.load(NatsSettings, args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.run(nats_settings, args.host, args.port))
    return 0


def cmd_assets(args: argparse.Namespace) -> int:
    argv = ["ensure", *args.names] if args.build else ["show"]
    return assets.main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="driftbus",
        description="Keep Kubernetes clusters equal to published manifests, over NATS JetStream.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="run driftbus locally: NATS, a control plane, all services")
    up.add_argument("--cluster", default="local", help="name of the cluster")
    up.add_argument("--kubeconfig", help="use this cluster instead of starting a local one")
    up.add_argument("--context", help="kubeconfig context (with --kubeconfig)")
    up.add_argument("--appliers", type=int, default=2, help="applier replicas to run")
    up.add_argument("--workdir", help="data and logs (default: ~/.cache/driftbus/up)")
    up.add_argument("--detach", action="store_true", help="leave it running in the background")
    up.add_argument("--no-example", action="store_true", help="do not publish examples/hello")
    up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the example")
    up.add_argument("-o", "--output", choices=["table", "json"], default="table")
    up.add_argument(
        "--ui-port", type=int, default=8080, help="port of the status page (0: no page)"
    )
    up.set_defaults(func=up_cmd.cmd_up)

    down = sub.add_parser("down", help="stop a stack started with `driftbus up --detach`")
    down.add_argument("--workdir", help="as given to `driftbus up`")
    down.set_defaults(func=up_cmd.cmd_down)

    for name, (_, model, help_text) in SERVICES.items():
        p = sub.add_parser(name, help=help_text)
        settings.add_arguments(p, model)
        p.set_defaults(func=cmd_service)

    pub = sub.add_parser("publish", help="publish manifests as a bundle")
    pub.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="directories (recursive), YAML/JSON files, .tar.gz tarballs",
    )
    pub.add_argument("--cluster", required=True)
    pub.add_argument("--bundle", required=True)
    pub.add_argument("--revision", help="default: the Git commit, or a digest of the content")
    pub.add_argument("--git", metavar="REPO", help="read the manifests from a Git repository")
    pub.add_argument("--ref", default="HEAD", help="Git ref to read (with --git)")
    pub.add_argument("--path", help="directory inside the repository (with --git)")
    pub.add_argument("--no-prune", action="store_true", help="keep objects that leave the bundle")
    pub.add_argument("--force", action="store_true", help="take over fields other managers own")
    pub.add_argument(
        "--allow-replace",
        action="store_true",
        help="delete and recreate objects whose immutable fields changed",
    )
    pub.add_argument("--wait", action="store_true", help="follow status until Ready or failed")
    pub.add_argument("--timeout", type=float, default=300.0, help="seconds to --wait")
    settings.add_arguments(pub, NatsSettings)
    pub.set_defaults(func=cmd_publish)

    pl = sub.add_parser("plan", help="what a publish would apply, delete or skip, and why")
    pl.add_argument("paths", nargs="*", metavar="PATH")
    pl.add_argument("--cluster", required=True)
    pl.add_argument("--bundle", required=True)
    pl.add_argument("--git", metavar="REPO")
    pl.add_argument("--ref", default="HEAD")
    pl.add_argument("--path")
    pl.add_argument("--no-prune", action="store_true")
    pl.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    pl.add_argument("--context")
    pl.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(pl, NatsSettings)
    pl.set_defaults(func=cmd_plan)

    st = sub.add_parser("status", help="current state of bundles (and objects with --bundle)")
    st.add_argument("--cluster", required=True)
    st.add_argument("--bundle")
    st.add_argument("-o", "--output", choices=["table", "json"], default="table")
    st.add_argument("--follow", "-f", action="store_true", help="then print changes as they come")
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

    security_cmd.add_parsers(sub)

    ui = sub.add_parser("ui", help="serve the live status page")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ui.add_argument("--port", type=int, default=8080)
    settings.add_arguments(ui, NatsSettings)
    ui.set_defaults(func=cmd_ui)

    a = sub.add_parser("assets", help="show (or --build) the server binaries tests use")
    a.add_argument("--build", action="store_true", help="build whatever is missing")
    a.add_argument("names", nargs="*", choices=[*assets.ASSETS, []], metavar="NAME")
    a.set_defaults(func=cmd_assets)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
