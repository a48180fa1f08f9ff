"""``driftbus up --detach`` and ``driftbus down``: the whole stack in the background, started
in a session of its own and ready when its ``stack.json`` exists; stopped by its pid (that ``up``
stops everything it started: every cluster's control plane and services, then NATS).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from services.cli import context
from services.cli.up.info import default_workdir, print_detached, print_info
from services.controlplane import servers


def detach(args: argparse.Namespace) -> int:
    """Run ``up`` in a new session and return once it is ready (its stack.json exists)."""
    workdir = Path(args.workdir) if args.workdir else default_workdir()
    if (workdir / "stack.json").exists():
        print(
            f"driftbus up: already running (see {workdir / 'stack.json'}; "
            "`driftbus down` stops it)",
            file=sys.stderr,
        )
        return 1
    if workdir.exists() and not args.workdir:
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o700)  # its log, credentials and the page's token: the owner's only
    argv = [
        sys.executable,
        "-m",
        "services.cli.main",
        "up",
        "--workdir",
        str(workdir),
        "--appliers",
        str(args.appliers),
        "-o",
        "json",
        "--timeout",
        str(args.timeout),
        "--ui-port",
        str(args.ui_port),
    ]
    for spec in args.cluster or []:
        argv += ["--cluster", spec]
    if args.clusters is not None:
        argv += ["--clusters", str(args.clusters)]
    if args.kubeconfig:
        argv += ["--kubeconfig", args.kubeconfig]
    if args.context:
        argv += ["--context", args.context]
    if args.no_example:
        argv.append("--no-example")
    if args.no_controllers:
        argv.append("--no-controllers")
    if args.tenants:
        argv += ["--tenants", str(Path(args.tenants).resolve())]
    if args.git:
        argv += ["--git", args.git, "--git-bundle", args.git_bundle]
        argv += ["--git-interval", str(args.git_interval)]
        for flag in ("path", "branch", "namespace"):
            if getattr(args, flag):
                argv += [f"--{flag}", getattr(args, flag)]
    with (workdir / "up.log").open("ab") as log:
        child = subprocess.Popen(
            argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
    # Ctrl-C while it starts stops it, even when this process was started with SIGINT ignored
    # (a job of a shell without job control, some CI runners): as `up` itself does
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _until_ready(child, workdir, args)
    except KeyboardInterrupt:
        # Ctrl-C while it starts: the background stack is stopped too, not left behind
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
        print("driftbus up: interrupted; the background stack is stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)


def _until_ready(child: subprocess.Popen[bytes], workdir: Path, args: argparse.Namespace) -> int:
    # each cluster starts its control plane, then is given the example
    clusters = max(1, args.clusters or len(args.cluster or ()))
    deadline = time.monotonic() + (60 + args.timeout) * clusters
    while time.monotonic() < deadline:
        if (workdir / "stack.json").exists():
            info = json.loads((workdir / "stack.json").read_text())
            print_info(info, args.output) if args.output == "json" else print_detached(info)
            return 0
        if child.poll() is not None:
            print(
                f"driftbus up: failed; see {workdir / 'up.log'}\n"
                f"{servers.log_tail(workdir / 'up.log', 20)}",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.2)
    print(f"driftbus up: not ready in time; see {workdir / 'up.log'}", file=sys.stderr)
    return 1


def _running_workdir() -> Path:
    """Where the running stack keeps its state: the one the context names (``up --workdir``
    elsewhere), else the default."""
    try:
        info = context.read()
    except context.StaleContext:
        info = None
    named = (info or {}).get("workdir")
    return Path(named) if isinstance(named, str) and named else default_workdir()


def cmd_down(args: argparse.Namespace) -> int:
    workdir = Path(args.workdir) if args.workdir else _running_workdir()
    state = workdir / "stack.json"
    if not state.exists():
        print(f"driftbus down: nothing running ({state} does not exist)", file=sys.stderr)
        return 1
    info = json.loads(state.read_text())
    pid = int(info["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state.unlink(missing_ok=True)
        print("driftbus down: it had already stopped", file=sys.stderr)
        return 0
    within = 45 + 15 * len(context.clusters(info))  # its services, then each control plane
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not servers.pid_alive(pid):  # gone, or a zombie awaiting its reaper
            print("driftbus stopped", file=sys.stderr)
            return 0
        time.sleep(0.2)
    print(f"driftbus down: pid {pid} did not stop within {within}s", file=sys.stderr)
    return 1
