"""``driftbus up`` / ``driftbus down``: the whole thing, locally, in one command.

``up`` starts nats-server (JetStream) and — unless ``--kubeconfig`` points at an existing
cluster — the local control plane (etcd + kube-apiserver), then a watcher, the planner and
``--appliers`` appliers and ``driftbus notify`` (as its own NATS role; ``--notify FILE`` puts the
platform's notifications in force first) as supervised child processes (restarted if they
crash), publishes the
example bundle with live progress, prints a status table and keeps running until Ctrl-C, which
stops everything. ``--detach`` leaves it running in the background; ``driftbus down`` stops it.

A fleet on a laptop: ``--cluster NAME[:KEY=VALUE,…]`` repeated, or ``--clusters N``, starts a
control plane per cluster, each with its own watcher (given the labels) and appliers, all sharing
the one nats-server and planner, and one kubeconfig with a context per cluster (``upclusters``).

The stack is closed to other local processes: NATS requires mutual TLS and a password per role
(``localbus``; the operator's go into the context every command reads), etcd a client
certificate only the API server has, the status page its token; everything binds to loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from services.cli import context
from services.cli.up import clusters as upclusters
from services.cli.up import localbus
from services.cli.up.detach import cmd_down, detach
from services.cli.up.example import (
    apply_notifications,
    apply_policy,
    notify_following,
    print_example,
    publish_example,
)
from services.cli.up.example import say as _say
from services.cli.up.info import default_workdir, print_info
from services.controlplane import assets, servers
from services.ui import UI_PORT
from services.ui.guard import TOKEN_ENV

MAX_RESTARTS = 5


def source_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``driftbus source`` flags of ``up --git``: follow the repository every 5 s (a local
    one is read in place, so that is cheap; push to a branch and watch it apply)."""
    repo = str(Path(args.git).resolve()) if Path(args.git).is_dir() else args.git
    out = ["--git", repo, "--bundle", args.git_bundle, "--interval", str(args.git_interval)]
    for flag in ("path", "branch", "namespace"):
        if value := getattr(args, flag):
            out += [f"--{flag}", value]
    return tuple(out)


def port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:``port`` already (or it cannot be had)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _terminate_children() -> None:
    """SIGTERM to every child at once, so that stopping them one by one afterwards does not
    wait for each in turn (a Ctrl-C must end everything within seconds)."""
    for pid in list(servers.RUNNING):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)


def cmd_up(args: argparse.Namespace) -> int:
    try:  # before anything starts: a bad name or label is one line naming it
        wanted = upclusters.specs(args.cluster, args.clusters)
    except upclusters.SpecError as exc:
        print(f"driftbus up: {exc}", file=sys.stderr)
        return 2
    if args.kubeconfig and len(wanted) > 1:
        print("driftbus up: --kubeconfig serves one cluster; give one --cluster", file=sys.stderr)
        return 2
    if args.ui_port and port_taken(args.ui_port):
        # before anything starts: a page that cannot listen would take the stack down later
        print(
            f"driftbus up: port {args.ui_port} for the status page is taken (another `driftbus "
            "up`?); give --ui-port N, or 0 for no page",
            file=sys.stderr,
        )
        return 1
    if args.detach:
        return detach(args)
    try:
        return _up(args, wanted)
    except KeyboardInterrupt:
        print("driftbus up: interrupted; everything it started is stopped", file=sys.stderr)
        return 130


def _up(args: argparse.Namespace, wanted: list[upclusters.ClusterSpec]) -> int:
    tenant_policy = None
    if args.tenants:
        from services.cli import tenants
        from services.tenancy.policy import PolicyError

        try:  # before anything starts: a wrong file is one line, not a half-started stack
            tenant_policy = tenants.read_file(args.tenants)
        except (PolicyError, OSError) as exc:
            print(f"driftbus up: --tenants: {exc}", file=sys.stderr)
            return 1
        tenants.warn_exposed(tenant_policy, "driftbus up: --tenants")
    notifications = None
    if args.notify:
        from services.cli.notify import read_file as read_notifications
        from services.notify.config import ConfigError

        try:  # before anything starts, as the tenants file
            notifications = read_notifications(args.notify, "")
        except (ConfigError, OSError) as exc:
            print(f"driftbus up: --notify: {exc}", file=sys.stderr)
            return 1
    workdir = Path(args.workdir) if args.workdir else default_workdir()
    if workdir.exists() and not args.workdir:
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o700)  # credentials, the page's token, the cluster's data
    try:
        creds = localbus.create(workdir / "bus", [s.name for s in wanted])
    except localbus.LocalBusError as exc:
        print(f"driftbus up: {exc}", file=sys.stderr)
        return 1
    _say(f"starting driftbus in {workdir} …")
    nats_server = servers.NatsServer(workdir / "nats", extra_args=creds.server_args())
    clusters: list[servers.Cluster] = []
    first = wanted[0].name  # every command's default --cluster, the Git source's cluster
    procs: list[servers.Process] = []
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    # while starting, Ctrl-C (or SIGTERM) interrupts whatever is being waited for at once;
    # once everything runs, it ends the supervision loop
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    interrupted = False
    try:
        try:
            needed = ["nats-server"]
            if not args.kubeconfig:
                needed += ["etcd", "kube-apiserver"]
                if not args.no_controllers:
                    needed += ["kube-controller-manager", "kube-scheduler", "kwok"]
            assets.ensure_all(needed)
            nats_server.start()
            if args.kubeconfig:
                kubeconfig = Path(args.kubeconfig)
            else:
                controllers = not args.no_controllers
                upclusters.start(wanted, workdir, controllers=controllers, into=clusters)
                kubeconfig = upclusters.kubeconfig(clusters, workdir / "kubeconfig")
        except (assets.AssetError, servers.ServerError) as exc:
            print(f"driftbus up: {exc}", file=sys.stderr)
            return 1
        nats_url = creds.url(nats_server.port)
        operator = creds.nats("cli", nats_server.port)
        # the caller's own NATS identity is not the services': each gets its role's
        env = {k: v for k, v in os.environ.items() if not k.startswith("DRIFTBUS_NATS_")}
        env |= {"NATS_URL": nats_url, "KUBECONFIG": str(kubeconfig)}
        if tenant_policy is not None:
            # in force before the planner starts: no bundle is ever taken without it
            asyncio.run(apply_policy(operator, tenant_policy))
            _say(f"tenant policy from {args.tenants}: {len(tenant_policy.tenants)} tenants")
        if notifications is not None:
            asyncio.run(apply_notifications(operator, notifications))
            _say(f"notifications from {args.notify} in force")
        token = secrets.token_urlsafe(32)
        envs = {r: env | creds.env(r) for r in ("planner", "ui", "source", "notify")}
        envs["ui"][TOKEN_ENV] = token  # the page's token: its environment only, never a flag
        procs = upclusters.cluster_services(wanted, args, workdir, env, creds)
        procs.insert(1, upclusters.service("planner", "planner", first, workdir, envs["planner"]))
        if args.ui_port:
            page = upclusters.service("ui", "ui", first, workdir, envs["ui"], ui_port=args.ui_port)
            procs.append(page)
        procs.append(upclusters.service("notify", "notify", first, workdir, envs["notify"]))
        if args.git:
            extra = source_args(args)
            source = upclusters.service(
                "source", "source", first, workdir, envs["source"], extra=extra
            )
            procs.append(source)
        for p in procs:
            p.start()
        _say(f"started {', '.join(p.name for p in procs)}")
        info = {
            "cluster": first,
            "clusters": upclusters.describe(
                wanted, local=not args.kubeconfig, context=args.context
            ),
            "nats_url": nats_url,
            "kubeconfig": str(kubeconfig),
            "workdir": str(workdir),
            "pid": os.getpid(),
            "services": {p.name: p.pid for p in procs},
            "logs": str(workdir / "services"),
        }
        if args.ui_port:
            # as Jupyter does: the address with the token, which sets a cookie when opened
            info["ui"] = f"http://127.0.0.1:{args.ui_port}/?token={token}"
        # from now on other terminals' commands find this stack (the example may take a while)
        info["context"] = str(context.path())
        # a `driftbus notify` started beside this stack finds it, as its own role
        roles = {"notify": creds.settings("notify")}
        context.write({**info, "nats_auth": creds.settings("cli"), "nats_roles": roles})
        notifier = creds.nats("notify", nats_server.port)
        if not asyncio.run(notify_following(notifier, 60.0)):  # else the example comes first
            _say("notify is not ready yet (its log is in services/); going on")
        for spec in [] if args.no_example else wanted:
            if len(wanted) > 1:
                _say(f"cluster {spec.name}:")
            status, rows = asyncio.run(publish_example(operator, spec.name, args.timeout))
            print_example(status, rows, args.output)
        # written whole, then renamed: a detached ``up`` reads it the moment it exists, and
        # read between the file's creation and its write it was empty (a CI failure)
        written = workdir / "stack.json.new"
        written.unlink(missing_ok=True)
        written.touch(mode=0o600)
        written.write_text(json.dumps(info, indent=2))
        os.replace(written, workdir / "stack.json")
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        print_info(info, args.output)
        return _supervise(procs, stopping)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        # a second Ctrl-C must not leave the stopping half done
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _say("stopping driftbus …")
        if interrupted:
            _terminate_children()
        for p in procs:  # all at once: each stop below then waits for one already stopping
            p.terminate()
        for p in reversed(procs):
            p.stop(timeout=10)
        for c in reversed(clusters):
            c.stop()
        nats_server.stop()
        (workdir / "stack.json").unlink(missing_ok=True)
        context.remove(os.getpid())


def _supervise(procs: list[servers.Process], stopping: threading.Event) -> int:
    restarts: dict[str, list[float]] = {p.name: [] for p in procs}
    while not stopping.wait(0.5):
        for p in procs:
            if p.alive():
                continue
            recent = [t for t in restarts[p.name] if time.monotonic() - t < 60]
            if len(recent) >= MAX_RESTARTS:
                print(
                    f"driftbus up: {p.name} keeps crashing; last lines of {p.log_path}:\n"
                    f"{servers.log_tail(p.log_path, 20)}",
                    file=sys.stderr,
                )
                return 1
            print(f"driftbus up: {p.name} exited; restarting (log: {p.log_path})", file=sys.stderr)
            restarts[p.name] = [*recent, time.monotonic()]
            p.start()
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser("up", help="run driftbus locally: NATS, a control plane, all services")
    up.add_argument(
        "--cluster",
        action="append",
        metavar="NAME[:KEY=VALUE,...]",
        help="a cluster to start (repeat for several; default local): its name, a DNS label, "
        "and the labels its watcher registers it with; the first is every command's default "
        "--cluster",
    )
    up.add_argument(
        "--clusters",
        type=int,
        metavar="N",
        help=f"start N clusters without labels: {upclusters.DEFAULT} for 1, "
        f"{upclusters.DEFAULT}-1 … {upclusters.DEFAULT}-N otherwise (each its own control "
        "plane, watcher and appliers; one NATS, one planner, one KUBECONFIG with a context "
        "per cluster)",
    )
    up.add_argument(
        "--tenants",
        metavar="FILE",
        help="tenants file (docs/tenancy.md) put in force before the planner starts; "
        "change it later with `driftbus tenants apply`",
    )
    up.add_argument(
        "--notify",
        metavar="FILE",
        help="notifications file (docs/notifications.md) put in force as the platform's before "
        "`driftbus notify` starts (it always runs; change it later with `driftbus notify apply`)",
    )
    up.add_argument("--kubeconfig", help="use this cluster instead of starting a local one")
    up.add_argument("--context", help="kubeconfig context (with --kubeconfig)")
    up.add_argument(
        "--appliers",
        type=int,
        default=2,
        help="applier replicas per cluster (default %(default)s)",
    )
    up.add_argument(
        "--no-controllers",
        action="store_true",
        help="start the local cluster without kube-controller-manager, kube-scheduler and kwok "
        "(no Deployment ever becomes Available, no Namespace finishes terminating)",
    )
    up.add_argument("--workdir", help="data and logs (default: ~/.cache/driftbus/up)")
    up.add_argument("--detach", action="store_true", help="leave it running in the background")
    up.add_argument("--no-example", action="store_true", help="do not publish examples/hello")
    up.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the example (default %(default)s)",
    )
    up.add_argument(
        "-o",
        "--output",
        choices=["table", "json"],
        default="table",
        help="table (default), or json: one line describing the running stack",
    )
    up.add_argument(
        "--ui-port",
        type=int,
        default=UI_PORT,
        help="port of the status page (0: no page; default %(default)s)",
    )
    up.add_argument(
        "--git",
        metavar="REPO",
        help="also run `driftbus source` following this repository (a local path or any URL "
        "git clones) into bundle --git-bundle of the first cluster",
    )
    up.add_argument(
        "--git-bundle",
        default="git",
        help="bundle the repository is published as (default %(default)s)",
    )
    up.add_argument("--path", help="directory in the repository (with --git)")
    up.add_argument("--branch", help="branch to follow (with --git; default: the default one)")
    up.add_argument("-n", "--namespace", help="default namespace of the repository's objects")
    up.add_argument(
        "--git-interval",
        type=float,
        default=5.0,
        help="seconds between polls (with --git; default %(default)s)",
    )
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop a stack started with `driftbus up --detach`")
    down.add_argument(
        "--workdir",
        help="as given to `driftbus up` (default: the running stack's, from its context)",
    )
    down.set_defaults(func=cmd_down)
