"""``driftbus ui`` and ``driftbus assets``: two small commands around a running stack, the live
status page (``services/ui``) and the server binaries tests and ``up`` start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from services.cli import output
from services.common import logs, settings
from services.common.bus import NatsSettings
from services.controlplane import assets
from services.ui import UI_PORT


def cmd_ui(args: argparse.Namespace) -> int:
    from services.cli import context
    from services.ui import guard, server

    logs.configure("ui")
    context.fill_nats(args)  # the running stack's bus and credentials, as for every command
    nats_settings = settings.load(NatsSettings, args)
    page = guard.PageSettings.load(args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.run(nats_settings, page))
    return 0


def cmd_assets(args: argparse.Namespace) -> int:
    argv = ["ensure", *args.names] if args.build else ["show"]
    return assets.main(argv)


def cmd_version(args: argparse.Namespace) -> int:
    import importlib.metadata
    import platform

    from schemas.cli import BinaryVersion, VersionDocument
    from services.cli import output, table

    try:
        mine = importlib.metadata.version("driftbus")
    except importlib.metadata.PackageNotFoundError:
        mine = "unknown (not installed)"
    doc = VersionDocument(
        driftbus=mine,
        python=platform.python_version(),
        binaries=[
            BinaryVersion(
                name=a.name, version=a.version, path=str(p) if (p := assets.find(a.name)) else None
            )
            for a in assets.ASSETS.values()
        ],
    )
    if args.output != "table":
        output.dump(doc, args.output)
        return 0
    print(f"driftbus {doc.driftbus} (Python {doc.python})")
    rows = [
        {"binary": b.name, "version": b.version, "path": b.path or "(not built)"}
        for b in doc.binaries
    ]
    table.emit(rows, ["binary", "version", "path"], "table")
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = sub.add_parser("ui", help="serve the live status page")
    ui.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    ui.add_argument(
        "--port", type=int, default=UI_PORT, help="port to listen on (default %(default)s)"
    )
    from services.ui import guard

    guard.add_arguments(ui)  # --allow-host, --tenant (the token: DRIFTBUS_UI_TOKEN)
    settings.add_arguments(ui, NatsSettings)
    ui.set_defaults(func=cmd_ui)

    a = sub.add_parser("assets", help="show (or --build) the server binaries tests use")
    a.add_argument("--build", action="store_true", help="build whatever is missing")
    # [] among the choices: with no NAME given, argparse checks the empty default against them
    a.add_argument(
        "names",
        nargs="*",
        choices=[*assets.ASSETS, []],
        metavar="NAME",
        help=f"which binaries to build ({', '.join(assets.ASSETS)}; default: all)",
    )
    a.set_defaults(func=cmd_assets)

    v = sub.add_parser(
        "version", help="the versions of driftbus and of the server binaries it builds"
    )
    output.add_output_arg(v, "cli-version")
    v.set_defaults(func=cmd_version)
