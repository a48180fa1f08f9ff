"""``driftbus`` — the command line.

Subcommands so far:

* ``driftbus up`` — start the local stack (nats-server with JetStream, etcd, kube-apiserver),
  print how to reach it, and keep it running until Ctrl-C. The watcher, planner and appliers
  join it when the reconcile pipeline lands.
* ``driftbus watcher|planner|applier`` — run one service (settings: ``--help`` of each).
* ``driftbus assets`` — show or build the server binaries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from services.applier import service as applier
from services.common import logs, settings
from services.controlplane import assets, servers
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


def cmd_up(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="driftbus-up-"))
    print(_color("starting local stack", "1") + f" in {workdir} …", file=sys.stderr)
    try:
        assets.ensure_all(["nats-server", "etcd", "kube-apiserver"])
        stack = servers.Stack.start(workdir, cluster_name=args.cluster)
    except (assets.AssetError, servers.ServerError) as exc:
        print(f"driftbus up: {exc}", file=sys.stderr)
        return 1
    stopping = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    info = {"cluster": args.cluster, **stack.describe()}
    (workdir / "stack.json").write_text(json.dumps(info, indent=2))
    try:
        if args.output == "json":
            print(json.dumps(info), flush=True)
        else:
            width = max(len(k) for k in info)
            print(_color("driftbus local stack is up", "32;1"))
            for k, v in info.items():
                print(f"  {k:<{width}}  {v}")
            print(f"\n  export KUBECONFIG={info['kubeconfig']}")
            print(f"  export NATS_URL={info['nats_url']}")
            print("\nCtrl-C stops everything.", flush=True)
        while not stopping.wait(0.5):
            for proc in (
                stack.nats.process,
                stack.cluster.etcd.process,
                stack.cluster.apiserver.process,
            ):
                if proc is not None and not proc.alive():
                    print(
                        f"driftbus up: {proc.name} exited; its log: {proc.log_path}",
                        file=sys.stderr,
                    )
                    print(servers.log_tail(proc.log_path, 20), file=sys.stderr)
                    return 1
    finally:
        print("stopping local stack …", file=sys.stderr)
        stack.stop()
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

    up = sub.add_parser("up", help="run the local stack (NATS + kube-apiserver + etcd)")
    up.add_argument("--cluster", default="local", help="name of the local cluster")
    up.add_argument("--workdir", help="keep data and logs here (default: a new temp dir)")
    up.add_argument("-o", "--output", choices=["table", "json"], default="table")
    up.set_defaults(func=cmd_up)

    for name, (_, model, help_text) in SERVICES.items():
        p = sub.add_parser(name, help=help_text)
        settings.add_arguments(p, model)
        p.set_defaults(func=cmd_service)

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
