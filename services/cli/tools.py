"""``driftbus ui`` and ``driftbus assets``: two small commands around a running stack, the live
status page (``services/ui``) and the server binaries tests and ``up`` start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from services.common import logs, settings
from services.common.bus import NatsSettings
from services.controlplane import assets


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = sub.add_parser("ui", help="serve the live status page")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on")
    ui.add_argument("--port", type=int, default=8080)
    settings.add_arguments(ui, NatsSettings)
    ui.set_defaults(func=cmd_ui)

    a = sub.add_parser("assets", help="show (or --build) the server binaries tests use")
    a.add_argument("--build", action="store_true", help="build whatever is missing")
    # [] among the choices: with no NAME given, argparse checks the empty default against them
    a.add_argument("names", nargs="*", choices=[*assets.ASSETS, []], metavar="NAME")
    a.set_defaults(func=cmd_assets)
