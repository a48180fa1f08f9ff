"""``driftbus`` — the command line.

Subcommands so far:

* ``driftbus up [--detach]`` / ``driftbus down`` — the whole stack locally (``services/cli/up.py``).
* ``driftbus watcher|planner|applier`` — run one service (settings: ``--help`` of each).
* ``driftbus publish PATH... --cluster C --bundle B [--wait]`` — publish manifests as a bundle
  (which files a PATH loads: ``services/cli/load.py``). Refuses a revision with no objects
  unless ``--allow-empty``; warns when no watcher or applier serves the cluster. With
  ``--wait`` the exit code says how it ended: 0 Ready; 1 Failed, Degraded or Conflict; 2 no
  end within ``--timeout`` (still Reconciling or OutOfSync, or no status at all).
* ``driftbus status --cluster C [--bundle B] [-o json] [-f]`` — current state of bundles/objects,
  then (``-f``) every change: bundle summaries, and with ``--bundle`` its objects too.
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
from typing import Any, get_args

from schemas.messages import BundleOptions, Propagation
from services.applier import service as applier
from services.cli import security as security_cmd
from services.cli import up as up_cmd
from services.common import logs, settings
from services.common.bus import NatsSettings
from services.controlplane import assets
from services.planner import service as planner
from services.source import service as source
from services.watcher import service as watcher

SERVICES: dict[str, tuple[Any, type[Any], str]] = {
    "watcher": (watcher.run, watcher.WatcherSettings, "list+watch a cluster, publish SHAs"),
    "planner": (planner.run, planner.PlannerSettings, "decide what to apply"),
    "applier": (applier.run, applier.ApplierSettings, "server-side apply intents"),
    "source": (source.run, source.SourceSettings, "follow Git repositories, publish bundles"),
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
    """The manifests named on the command line: PATH... or --git REPO --ref REF [--path DIR];
    a revision with no objects is refused unless --allow-empty (it would prune the bundle)."""
    from services.cli import gitrepo, load

    if sum(map(bool, (args.helm, args.git, args.paths))) > 1:
        raise load.InputError(f"{args.command}: give one source: PATH..., --git or --helm")
    if args.helm:
        loaded = load.load_helm(
            args.helm,
            release=args.release or args.bundle,
            namespace=args.namespace or "",
            values=args.values,
            sets=args.set,
        )
    elif args.git:
        # a chart at --path is rendered like --helm, its --values relative to the chart
        helm = gitrepo.HelmOptions(
            release=args.release or args.bundle,
            namespace=args.namespace or "",
            values=tuple(args.values),
            sets=tuple(args.set),
        )
        loaded = gitrepo.load_git(args.git, args.ref, args.path or "", helm)
    elif args.paths:
        loaded = load.load_paths(args.paths)
    else:
        raise load.InputError(
            f"nothing to {args.command}: give PATH..., --git REPO [--ref REF] or --helm CHART"
        )
    if not args.allow_empty:
        load.require_objects(loaded, args.bundle, args.command)
    load.require_namespaces(loaded, args.namespace or "")
    return loaded


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
    )


def cmd_publish(args: argparse.Namespace) -> int:
    from services.cli import load, user
    from services.core.manifest import ManifestError

    try:
        loaded = _load_manifests(args)
        revision = args.revision or loaded.revision or user.content_revision(loaded)
        options = bundle_options(args)
    except (load.InputError, ManifestError) as exc:
        return _fail("publish", exc)

    from services.common import telemetry

    telemetry.setup("cli", telemetry.TelemetrySettings(otlp_endpoint=otlp_endpoint()))

    async def run() -> int:
        refused = user.quiet_members_denial()
        nc = await _connect(args)
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
        print(f"{colour_phase(st.phase)}: {st.message}")
        for line in st.failed_objects:
            print(f"  {line}")
        if st.phase is user.BundlePhase.READY:
            return 0
        if st.phase not in user.WAIT_ENDS:
            print(
                f"driftbus publish: {args.bundle}@{revision} not Ready within "
                f"{args.timeout:.0f}s (last status: {st.phase})",
                file=sys.stderr,
            )
            return 2
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
                statuses = await user.bundle_statuses(js, args.cluster, seen=seen)
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
            sys.stdout.flush()
            if live is None:
                return 0
            # a round trip: whatever the server sent this connection before (every live copy of
            # a message the current state included) is in the queue now
            await nc.flush()
            return await _follow(live, seen, args)
        finally:
            await nc.drain()

    return asyncio.run(run())


async def _subscribe_status(nc: Any, args: argparse.Namespace) -> asyncio.Queue[Any]:
    """Queue every status message of the followed bundle (its summary and its objects), or the
    summaries of all bundles of the cluster. One subscription, so nothing arrives twice."""
    from schemas.subjects import encode_token

    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        queue.put_nowait(msg)

    c = encode_token(args.cluster)
    subject = (
        f"driftbus.status.{c}.{encode_token(args.bundle)}.>"
        if args.bundle
        else f"driftbus.status.{c}.*.bundle"
    )
    # a slow terminal must not make the server drop messages: no limit on what waits here
    await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    return queue


def status_line(subject: str, data: bytes, output: str) -> str | None:
    """How ``status -f`` shows one status message (None: not a status it can read)."""
    from schemas.codec import WireError, decode, encode
    from schemas.messages import BundleStatus, ObjectStatus, SourceStatus
    from schemas.subjects import SubjectError, parse_subject
    from services.cli.table import colour

    event: BundleStatus | ObjectStatus | SourceStatus
    try:
        family = parse_subject(subject).family
        if family == "status.bundle":
            event = b = decode(data, BundleStatus)
            line = f"{b.bundle}@{b.revision}: {colour(str(b.phase))} {b.message}"
        elif family == "status.object":
            event = o = decode(data, ObjectStatus)
            line = f"{o.key}: {colour(str(o.phase))} {o.message}"
        elif family == "status.source":
            event = src = decode(data, SourceStatus)
            line = f"{src.bundle} git source {src.ref}: {colour(str(src.phase))} {src.message}"
        else:
            return None
    except (WireError, SubjectError):
        return None
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
                namespace=args.namespace or "",
            )
        except ManifestError as exc:
            return _fail("plan", exc)
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


def _add_source_args(p: argparse.ArgumentParser) -> None:
    """Where the manifests come from, and which bundle of which cluster: publish and plan."""
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="directories (recursive; hidden files and directories below them skipped), "
        "YAML/JSON files, .tar.gz tarballs",
    )
    p.add_argument("--cluster", required=True, help="the cluster the bundle is for")
    p.add_argument("--bundle", required=True, help="the bundle's name")
    p.add_argument("--git", metavar="REPO", help="read the manifests from a Git repository")
    p.add_argument("--ref", default="HEAD", help="Git ref to read (with --git)")
    p.add_argument("--path", help="directory inside the repository (with --git)")
    p.add_argument(
        "--helm",
        metavar="CHART",
        help="render a Helm chart (a chart directory or .tgz) with `helm template`",
    )
    p.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="FILE",
        help="Helm values file (repeat; with --git, relative to the chart at --path)",
    )
    p.add_argument("--set", action="append", default=[], metavar="K=V", help="Helm value (repeat)")
    p.add_argument("--release", help="Helm release name (default: the bundle's name)")
    p.add_argument(
        "-n",
        "--namespace",
        help="default namespace for objects of namespaced kinds that name none (as kubectl "
        "apply -n); objects naming a namespace keep it",
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
    p.add_argument(
        "--prune-propagation",
        choices=get_args(Propagation),
        default=BundleOptions().propagation,
        help="how prune deletes treat the pruned object's dependents: Background (deleted "
        "by the garbage collector afterwards), Foreground (deleted first, the object "
        "last) or Orphan (kept); default %(default)s",
    )


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
    up.add_argument(
        "--git",
        metavar="REPO",
        help="also run `driftbus source` following this repository (a local path or any URL "
        "git clones) into bundle --git-bundle",
    )
    up.add_argument("--git-bundle", default="git", help="bundle the repository is published as")
    up.add_argument("--path", help="directory in the repository (with --git)")
    up.add_argument("--branch", help="branch to follow (with --git; default: the default one)")
    up.add_argument("-n", "--namespace", help="default namespace of the repository's objects")
    up.add_argument(
        "--git-interval", type=float, default=5.0, help="seconds between polls (with --git)"
    )
    up.set_defaults(func=up_cmd.cmd_up)

    down = sub.add_parser("down", help="stop a stack started with `driftbus up --detach`")
    down.add_argument("--workdir", help="as given to `driftbus up`")
    down.set_defaults(func=up_cmd.cmd_down)

    for name, (_, model, help_text) in SERVICES.items():
        p = sub.add_parser(name, help=help_text)
        settings.add_arguments(p, model)
        p.set_defaults(func=cmd_service)

    pub = sub.add_parser(
        "publish",
        help="publish manifests as a bundle",
        description="Publish manifests as a bundle. With --wait the exit code says how it "
        "ended: 0 Ready; 1 Failed, Degraded or Conflict; 2 not ended within --timeout.",
    )
    _add_source_args(pub)
    pub.add_argument("--revision", help="default: the Git commit, or a digest of the content")
    _add_bundle_option_flags(pub)
    pub.add_argument(
        "--wait",
        action="store_true",
        help="follow status until Ready, Failed, Degraded or Conflict; exit non-zero unless Ready",
    )
    pub.add_argument("--timeout", type=float, default=300.0, help="seconds to --wait")
    settings.add_arguments(pub, NatsSettings)
    pub.set_defaults(func=cmd_publish)

    pl = sub.add_parser("plan", help="what a publish would apply, delete or skip, and why")
    _add_source_args(pl)
    pl.add_argument(
        "--no-prune", action="store_true", help="show objects leaving the bundle as kept"
    )
    pl.add_argument(
        "--allow-empty",
        action="store_true",
        help="plan a revision with no objects (every object of the bundle would be deleted)",
    )
    pl.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="the cluster to dry-run against (default: $KUBECONFIG)",
    )
    pl.add_argument("--context", help="kubeconfig context (default: the current one)")
    pl.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(pl, NatsSettings)
    pl.set_defaults(func=cmd_plan)

    st = sub.add_parser("status", help="current state of bundles (and objects with --bundle)")
    st.add_argument("--cluster", required=True)
    st.add_argument("--bundle")
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
