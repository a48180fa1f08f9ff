"""``driftbus watcher|planner|applier|source``: run one service in the foreground until a signal
(``driftbus notify`` too, whose command with its own actions is ``services/cli/notify.py``).

What differs between services (settings model, help, how it stops) is a row of ``SERVICES``.
``driftbus planner`` runs two peer services in one process: the planner, and beside it on its
connection the rollout driver (``services.fleet.driver``), so every planner replica can drive
the fleets' rollouts and the one holding the driver's lease does. Neither imports the other:
they meet here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import uvloop

from services.applier.settings import ApplierSettings
from services.common import heap, logs, settings, stalls
from services.planner.settings import PlannerSettings
from services.source.settings import SourceSettings
from services.watcher.settings import WatcherSettings


@dataclasses.dataclass(frozen=True)
class Service:
    """One service as the CLI runs it."""

    run: Callable[..., Coroutine[Any, Any, None]]
    settings: type[Any]
    help: str
    # On SIGTERM/SIGINT, True: ``run`` gets a ``stopping`` event, set then, and finishes the work
    # it started before returning (the applier's intents in flight). False: the task is
    # cancelled, since everything the service holds is in the streams.
    drains: bool = False


def _run_of(module: str) -> Callable[..., Coroutine[Any, Any, None]]:
    """``module.run``, imported when the service starts: a planner process loads the planner,
    not the applier, the watcher and the source too (~0.1-0.25 s of CPU at each start)."""

    def run(config: Any, **kwargs: Any) -> Coroutine[Any, Any, None]:
        started: Coroutine[Any, Any, None] = importlib.import_module(module).run(config, **kwargs)
        return started

    return run


def _planner_and_driver(config: PlannerSettings) -> Coroutine[Any, Any, None]:
    """The planner, with the rollout driver beside it: the replica's id is the driver's, and
    the planners' heartbeat settings time the driver's lease."""
    from services.fleet.driver.drive import Driver
    from services.fleet.rollout.steps import LeaveBudget
    from services.planner import service as planner

    def driver(js: Any, s: PlannerSettings) -> Coroutine[Any, Any, None]:
        return Driver(
            js,
            driver_id=s.planner_id,
            lease_interval=s.heartbeat_interval,
            lease_timeout=s.heartbeat_timeout,
            leave_budget=LeaveBudget(
                s.fleet_prune_share, s.fleet_prune_min, s.fleet_prune_settle, s.fleet_prune_window
            ),
        ).run()

    return planner.run(config, beside=[driver])


SERVICES: dict[str, Service] = {
    "watcher": Service(
        _run_of("services.watcher.service"), WatcherSettings, "list+watch a cluster, publish SHAs"
    ),
    "planner": Service(
        _planner_and_driver, PlannerSettings, "decide what to apply; drive the fleets' rollouts"
    ),
    "applier": Service(
        _run_of("services.applier.service"),
        ApplierSettings,
        "server-side apply intents",
        drains=True,
    ),
    "source": Service(
        _run_of("services.source.service"),
        SourceSettings,
        "follow Git repositories, publish bundles",
    ),
}


def cmd_service(args: argparse.Namespace) -> int:
    return start(args.command, SERVICES[args.command], args)


def start(name: str, service: Service, args: argparse.Namespace) -> int:
    """Run ``service`` (called ``name``) with the settings ``args`` and the environment give,
    until a signal (``driftbus notify`` runs its service through this too)."""
    try:
        config = settings.load(service.settings, args)
    except settings.SettingsError as exc:
        print(f"driftbus {name}: {exc}", file=sys.stderr)
        return 2
    logs.configure(name)
    heap.collect_young_rarely()
    # uvloop: the services are I/O loops (a NATS message, an HTTPS request and a publish per
    # object); libuv's loop costs a fraction of the selector loop's CPU per event (bench/README)
    return uvloop.run(_until_signal(service, config))


async def _until_signal(service: Service, config: Any) -> int:
    """Run a service until SIGTERM/SIGINT, then stop it as its ``drains`` says."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    kwargs = {"stopping": stopping} if service.drains else {}
    task = asyncio.create_task(service.run(config, **kwargs))
    # where the loop is held, when DRIFTBUS_STALL_REPORT asks (``common.stalls``)
    watches = [asyncio.create_task(watch.run()) for watch in stalls.watched()]

    signals = 0

    def stop() -> None:
        # The first signal stops the service. A second one is ignored: a repeated signal (the
        # test harness's terminate-then-stop, a supervisor, a user pressing Ctrl-C twice) must
        # not cancel the shutdown under way. Landing in the NATS client's drain, it cancelled
        # the PING of a flush; nats-py then failed on the PONG (InvalidStateError in its read
        # loop) and the drain waited out its 10 s flush timeout, until SIGKILL. A third one
        # ends the process at once: a shutdown that hangs can still be broken without SIGKILL.
        nonlocal signals
        signals += 1
        if signals == 1:
            stopping.set()
            if not service.drains:
                task.cancel()
        elif signals >= 3:
            print("driftbus: a third signal: stopping at once", file=sys.stderr, flush=True)
            os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    with contextlib.suppress(asyncio.CancelledError):
        await task
    for watch in watches:
        watch.cancel()
    return 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, service in SERVICES.items():
        p = sub.add_parser(name, help=service.help)
        settings.add_arguments(p, service.settings)
        p.set_defaults(func=cmd_service)
