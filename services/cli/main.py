"""``driftbus`` — the command line: one parser, each command family registered by its module.

Subcommands so far:

* ``driftbus up [--detach]`` / ``driftbus down`` — the whole stack locally
  (``services/cli/up/command.py``).
* ``driftbus watcher|planner|applier|source`` — run one service (settings: ``--help`` of each;
  ``services/cli/run.py``).
* ``driftbus publish PATH... --cluster C --bundle B [--wait]`` — publish manifests as a bundle
  (which files a PATH loads: ``services/inputs/load.py``). Refuses a revision with no objects
  unless ``--allow-empty``; warns when no watcher or applier serves the cluster. With
  ``--wait`` the exit code says how it ended: 0 Ready; 1 Failed, Degraded or Conflict; 2 no
  end within ``--timeout`` (still Reconciling or OutOfSync, or no status at all); 3 PruneHeld
  (applied; its deletions wait for ``driftbus approve``).
* ``driftbus approve BUNDLE [--cluster C]`` — let deletions held by the prune budget through
  (``services/cli/approve.py``, docs/lifecycle.md, docs/fleet.md).
* ``driftbus status --cluster C [--bundle B] [-o json] [-f]`` — current state of bundles/objects,
  then (``-f``) every change: bundle summaries, and with ``--bundle`` its objects too. A fleet
  bundle with no ``--cluster``: a row per cluster and the rollout's summary.
* ``driftbus clusters [-o json]``, ``clusters label NAME KEY=VALUE… KEY-``, ``clusters remove
  NAME`` — the cluster registry and who serves each cluster (``services/cli/fleet/clusters.py``).
* ``driftbus rollout status|pause|resume|promote|undo|history BUNDLE`` — a fleet bundle's
  rollout, seen and steered (``services/cli/fleet/rollout.py``).
* ``driftbus why KIND/NAMESPACE/NAME --cluster C`` — the decision history of one object.
* ``driftbus shards`` — planner replicas and which one plans which cluster.
* ``driftbus replay [--since DUR] [--cluster C]`` — the recorded decisions re-run through this
  build's rule; exit 2 if any would differ (``services/cli/replay.py``, docs/replay.md).
* ``driftbus bundles|delete bundle|suspend|resume|rollback`` — a bundle's life after its
  publish (``services/cli/lifecycle.py``, docs/lifecycle.md).
* ``driftbus plan PATH... --cluster C --bundle B`` — what a publish would do, with diffs; with
  ``-l SELECTOR`` or ``--cluster`` repeated, for every cluster of a fleet from the bus alone
  (``services/cli/plan/command.py``; the plan itself: ``services/cli/plan/explain.py``).
* ``driftbus tenants [apply FILE]`` — the tenant policy in force, or a new one
  (``services/cli/tenants.py``, docs/tenancy.md).
* ``driftbus windows [apply FILE]`` — the sync windows in force, or new ones
  (``services/cli/windows.py``, docs/windows.md).
* ``driftbus notify`` — the notification service; ``notify apply FILE`` / ``notify show`` its
  configuration (``services/cli/notify.py``, docs/notifications.md).
* ``driftbus push DIR oci://REGISTRY/REPO:TAG`` — a directory as an OCI artifact; ``publish``,
  ``plan`` and ``source`` read them with ``--oci`` (``services/cli/push.py``, docs/oci.md).
* ``driftbus nats-config`` / ``driftbus dev-certs`` — NATS users and test certificates.
* ``driftbus ui`` — the live status page; ``driftbus assets`` — show or build the server
  binaries (``services/cli/tools.py``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
from typing import NoReturn

FAMILIES: dict[str, tuple[str, ...]] = {
    # module of services/cli -> the commands it registers, in the order of `driftbus --help`
    "up.command": ("up", "down"),
    "run": ("watcher", "planner", "applier", "source"),
    "publish": ("publish",),
    "push": ("push",),  # push DIR oci://…
    "plan.command": ("plan",),
    "status.command": ("status", "why", "shards"),
    "replay": ("replay",),
    "lifecycle": ("bundles", "delete", "suspend", "resume", "rollback"),
    "approve": ("approve",),
    "fleet.clusters": ("clusters",),
    "fleet.rollout": ("rollout",),
    "tenants": ("tenants",),
    "windows": ("windows",),  # windows [apply FILE]
    "notify": ("notify",),  # notify (the service), notify apply|show
    "security": ("nats-config", "dev-certs"),
    "tools": ("ui", "assets", "version"),
}
"""Which module registers which commands. ``driftbus COMMAND`` imports only its command's
module: each imports what its command needs, and importing every one (all the services, the
control plane, OCI, the UI) cost each invocation ~0.3 s of CPU, each service process too."""

_FAMILY_OF = {command: module for module, commands in FAMILIES.items() for command in commands}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or (``command`` named) the part that parses that command."""
    parser = argparse.ArgumentParser(
        prog="driftbus",
        description="Keep Kubernetes clusters equal to published manifests, over NATS JetStream.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    family = _FAMILY_OF.get(command or "")
    for module in [family] if family else FAMILIES:
        importlib.import_module(f"services.cli.{module}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from services.cli import context
    from services.cli.reads import BusUnreachable

    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        # a fleet publish and why rollout/BUNDLE name no cluster
        fleet = (
            getattr(args, "selector", None) is not None
            or getattr(args, "fleet", False) is True
            or str(getattr(args, "object", "")).lower().startswith("rollout/")
        )
        # status --bundle of a fleet bundle names no cluster either: status decides, once it
        # knows whether the bundle has a rollout (status.cmd_status)
        fleet = fleet or (args.command == "status" and bool(args.bundle) and not args.follow)
        if getattr(args, "cluster_from_context", False) and args.cluster is None and not fleet:
            args.cluster = context.cluster(None)
            if args.cluster is None:
                parser.error(f"{args.command}: --cluster is required (no driftbus up is running)")
        code: int = args.func(args)
        sys.stdout.flush()
    except (BusUnreachable, context.StaleContext) as exc:  # one line, no traceback
        print(f"driftbus {args.command}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return closed_pipe()
    return code


def closed_pipe() -> int:
    """The reader of our output went away (``driftbus version | head -3``): stop quietly, as
    kubectl does. Whatever is still buffered goes to /dev/null, so the interpreter's last flush
    at exit does not print a second traceback; 141 is what a shell reports for SIGPIPE."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def entry() -> NoReturn:
    """The ``driftbus`` executable: ``main``, then ``exit_now`` with its code."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once what an exit must do is done, without tearing the
    interpreter down.

    Python's finalisation frees every module and object one by one: about 0.2 s of CPU for a
    process that imported nats, aiohttp and OpenTelemetry (a fifth of a short command, and of
    every service's stop). What an exit must do still happens: the atexit handlers run
    (logging's flush and close, OpenTelemetry's exporters, a caller's own), then the standard
    streams are flushed. A command that raises does not get here: it ends as Python ends it.
    """
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            # a reader gone, a stream closed: nothing is left to keep
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    exit_now(main())
