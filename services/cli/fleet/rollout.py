"""``driftbus rollout status|pause|resume|promote|undo|history BUNDLE``: a fleet bundle's rollout
seen and steered from the command line (docs/fleet.md), and the fleet view ``driftbus status
--bundle B`` shows when no cluster is named.

Steering is a request to the rollout driver, the only writer of rollout states: ``pause``,
``resume`` and ``promote`` publish a ``RolloutControl`` (``driftbus.rollout-control.<tenant>.
<name>.<action>``) that the driver applies on its next tick, checking again that the rollout can
be steered; the command reads the state first only to refuse early, then waits (``REACT_WITHIN``)
for the driver to take the request and act. ``pause`` and ``resume`` set ``paused``, ``promote``
sets ``promote`` (it ends the current step's bake; it never skips the gate that every cluster of
the step is Ready on the revision). ``undo`` republishes an earlier
fleet revision (the FLEET stream keeps the last 10) with ``rollback_of``; it then rolls out with
its own rollout spec like any revision. What ``status`` shows is the one rollout view
(``services.fleet.rollout.view``, which the status page renders too); it and the rows, the
history and the choice of what ``undo`` puts back (``undo_target``) are pure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Any

from schemas.fleet import (
    FleetBundle,
    FleetStatus,
    RolloutEvent,
    RolloutHistory,
    RolloutPhase,
    RolloutState,
)
from schemas.messages import BundleStatus
from services.cli import exits, output
from services.common import settings
from services.common.bus import NatsSettings
from services.fleet.rollout.steps import STEERABLE
from services.fleet.rollout.view import fleet_status

ACTIONS = ("status", "pause", "resume", "promote", "undo", "history")
REACT_WITHIN = 10.0
"""Seconds ``pause``/``resume``/``promote`` wait for the driver to act on the change."""


class RolloutError(RuntimeError):
    """A rollout command cannot do what it was asked; the message names the bundle."""


# --- what the views show ----------------------------------------------------------------------


def summary_line(fs: FleetStatus) -> str:
    """``B@rev: Progressing, step 2/3, 4/6 clusters Ready``."""
    line = (
        f"{fs.bundle}@{fs.revision}: {fs.phase}, step {min(fs.step, fs.steps - 1) + 1}/"
        f"{fs.steps}, {fs.ready}/{fs.total} clusters Ready"
    )
    if fs.rollback:
        line += f", {fs.rollback_ready}/{len(fs.rollback)} back Ready on {fs.previous}"
    if fs.paused and fs.phase is not RolloutPhase.PAUSED:
        line += " (pause asked)"
    if fs.promote:
        line += " (promote asked)"
    if fs.prune_held:
        line += (
            f"; PruneHeld: {len(fs.prune_held)} clusters left the fleet at once "
            f"({', '.join(fs.prune_held)}), pruned there once approved: "
            f"driftbus approve {fs.bundle}"
        )
    return f"{line}: {fs.message}" if fs.message else line


def status_rows(fs: FleetStatus) -> list[dict[str, Any]]:
    return [
        {
            "cluster": r.cluster,
            "phase": r.phase,
            "revision": r.revision or "-",
            "rollout": r.rollout,
            "step": r.step + 1 if r.step >= 0 else "-",
            "message": r.message,
        }
        for r in fs.clusters
    ]


STATUS_COLUMNS = ("cluster", "phase", "revision", "rollout", "step", "message")
HISTORY_COLUMNS = ("at", "revision", "event", "phase", "step", "clusters", "message")


def history_rows(events: Sequence[RolloutEvent]) -> list[dict[str, Any]]:
    return [
        {
            "at": e.at.isoformat(timespec="seconds") if e.at else "",
            "revision": e.revision,
            "event": e.event,
            "phase": str(e.phase),
            "step": e.step + 1,
            "clusters": ",".join(e.clusters) or "-",
            "message": e.message,
        }
        for e in events
    ]


def in_order(events: Sequence[RolloutEvent]) -> list[RolloutEvent]:
    """The transitions in the order they were recorded, each once (a driver taking over may
    publish again one its predecessor had sent)."""
    seen: set[tuple[str, int]] = set()
    out = []
    for e in events:
        if (e.revision, e.seq) not in seen:
            seen.add((e.revision, e.seq))
            out.append(e)
    return out


def undo_target(revisions: Sequence[FleetBundle], in_force: str, to: str | None) -> FleetBundle:
    """What ``undo`` puts back: the newest revision other than the one in force, or the newest
    message of ``to``; RolloutError when the bus no longer has it (it keeps 10)."""
    usable = [fb for fb in revisions if not fb.delete and fb.manifests_ref is not None]
    known = ", ".join(dict.fromkeys(fb.revision for fb in usable)) or "none"
    bundle = revisions[0].bundle if revisions else "the bundle"
    if to is not None:
        if to == in_force:
            raise RolloutError(f"{bundle}: revision {to} is the one in force already")
        for fb in reversed(usable):
            if fb.revision == to:
                return fb
        raise RolloutError(
            f"{bundle}: revision {to} is not among the revisions on the bus ({known})"
        )
    for fb in reversed(usable):
        if fb.revision != in_force:
            return fb
    raise RolloutError(f"{bundle}: no revision before {in_force} on the bus ({known})")


# --- the bus ---------------------------------------------------------------------------------


async def load_fleet_status(js: Any, bundle: str) -> FleetStatus | None:
    """The fleet view of ``bundle`` (None: it has no rollout, it is not a fleet bundle)."""
    from schemas.codec import WireError, decode
    from schemas.subjects import bundle_status_subject
    from services.cli.fleet.publish import read_state
    from services.clusters import registry
    from services.common import bus

    got = await read_state(js, bundle)
    if got is None:
        return None
    state = got[1]
    fleet = registry.members(await registry.records(js), state.selector, state.clusters_named)
    statuses: dict[str, BundleStatus] = {}
    for cluster in sorted(fleet.keys() | state.clusters.keys()):
        try:
            msg = await bus.last_message(js, bus.STATUS, bundle_status_subject(cluster, bundle))
        except Exception:  # noqa: BLE001, S112 - not permitted or away: the rollout state says
            continue
        if msg is not None and msg.data:
            try:
                statuses[cluster] = decode(msg.data, BundleStatus)
            except WireError:
                continue
    return fleet_status(state, fleet, statuses)


async def steer(js: Any, state: RolloutState, action: str) -> int:
    """Ask the rollout driver to ``action`` (pause, resume, promote) the rollout of ``state``: a
    ``RolloutControl`` it applies on its next tick (it alone writes the state, and checks again
    that the rollout can be steered). The request's stream sequence, which the state names once
    the driver took it (``control_seq``)."""
    from schemas.codec import encode
    from schemas.fleet import RolloutControl
    from schemas.subjects import rollout_control_subject
    from services.common import bus

    ctl = RolloutControl(
        bundle=state.bundle,
        action=action,  # type: ignore[arg-type]  # one of ACTIONS, checked by the parser
        revision=state.target.revision,
        at=dt.datetime.now(dt.UTC),
    )
    ack = await bus.publish(js, rollout_control_subject(state.bundle, action), encode(ctl))
    return int(ack.seq)


async def _reacted(js: Any, bundle: str, done: Callable[[RolloutState], bool]) -> RolloutState:
    """The rollout state once the driver acted (``done``), or as it is after ``REACT_WITHIN``."""
    from services.cli.fleet.publish import read_state

    deadline = time.monotonic() + REACT_WITHIN
    while True:
        got = await read_state(js, bundle)
        if got is None:
            raise RolloutError(f"{bundle}: the rollout state is gone")
        if done(got[1]) or time.monotonic() > deadline:
            return got[1]
        await asyncio.sleep(0.3)


async def history(js: Any, bundle: str) -> RolloutHistory:
    from schemas.codec import WireError, decode
    from schemas.subjects import rollout_event_subject
    from services.common import bus

    events = []
    follower = bus.Follower(js, bus.ROLLOUTS, rollout_event_subject(bundle), history=True)
    with contextlib.suppress(Exception):  # no stream yet, or nothing on the subject
        async for m in follower.snapshot(timeout=10.0):
            try:
                events.append(decode(m.data, RolloutEvent))
            except WireError:
                continue
    return RolloutHistory(bundle=bundle, events=in_order(events))


# --- the commands ----------------------------------------------------------------------------


async def _run(js: Any, args: argparse.Namespace) -> int:
    from services.cli import table
    from services.cli.fleet.publish import progress_line, read_state

    b = args.bundle
    if args.action == "history":
        got = await history(js, b)
        if args.output != "table":
            output.dump(got, args.output)
        else:
            table.emit(history_rows(got.events), HISTORY_COLUMNS, "table")
        return 0 if got.events else 1
    if args.action == "status":
        fs = await load_fleet_status(js, b)
        if fs is None:
            raise RolloutError(f"{b}: no rollout (not a fleet bundle?)")
        print_status(fs, args.output)
        return 0
    current = await read_state(js, b)
    if current is None:
        raise RolloutError(f"{b}: no rollout (not a fleet bundle?)")
    state = current[1]
    if args.action == "undo":
        return await _undo(js, args, state)
    if state.phase not in STEERABLE:
        raise RolloutError(
            f"{b}@{state.target.revision} is {state.phase}: only a Progressing or Paused "
            f"rollout can be told to {args.action}"
        )
    seq = await steer(js, state, args.action)
    if args.action in ("pause", "resume"):
        paused = args.action == "pause"
        print(f"{b}: {'pause' if paused else 'resume'} written")
        want = RolloutPhase.PAUSED
        state = await _reacted(
            js, b, lambda s: s.control_seq >= seq and (s.phase is want) == paused
        )
    else:
        print(
            f"{b}: promote written: the step's bake ends as soon as every cluster of it is "
            "Ready on the revision (promote never skips that gate)"
        )
        state = await _reacted(js, b, lambda s: s.control_seq >= seq and not s.promote)
        if state.control_seq < seq or state.promote:
            print(f"{b}: not promoted yet: step {state.step + 1} is not Ready (or paused)")
    print(progress_line(state))
    return 0


async def _undo(js: Any, args: argparse.Namespace, state: RolloutState) -> int:
    from services.cli.fleet.publish import wait
    from services.fleet.publish import fleet_revisions, republish

    in_force = state.target.revision
    back = undo_target(await fleet_revisions(js, args.bundle), in_force, args.to)
    sent = await republish(js, back, rollback_of=in_force)
    print(
        f"{args.bundle}: republished {back.revision} (rollback of {in_force}); it rolls out "
        f"with its own rollout spec ({len(back.rollout.steps) + 1} steps)"
    )
    if not args.wait:
        return 0
    return await wait(js, args.bundle, sent.published_at, within=args.timeout)


def print_status(fs: FleetStatus, fmt: str) -> None:
    from services.cli import table

    if fmt != "table":
        output.dump(fs, fmt)
        return
    print(summary_line(fs))
    table.emit(status_rows(fs), STATUS_COLUMNS, "table")
    for cluster, why in sorted(fs.excluded.items()):
        print(f"excluded: {cluster}: {why}")


def cmd_rollout(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.cli import table

    if args.to is not None and args.action != "undo":
        return table.fail("rollout", ValueError("--to goes with undo only"))

    async def run() -> int:
        async with user.connected(args) as nc:
            return await _run(nc.jetstream(), args)

    return exits.run_or_fail(f"rollout {args.action}", run())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rollout",
        help="a fleet bundle's rollout: status, pause, resume, promote, undo, history",
        description="status: phase, step and every cluster; pause: no step starts and no "
        "cluster gets the revision until resume; promote: end the current step's bake now "
        "(it never skips the gate that every cluster of the step is Ready); undo [--to REV]: "
        "republish the previous revision (the bus keeps 10), which rolls out with its own "
        "rollout spec; history: every transition, oldest first.",
    )
    p.add_argument("action", choices=ACTIONS, help="what to do")
    p.add_argument("bundle", metavar="BUNDLE", help="the fleet bundle (TENANT/NAME for a tenant's)")
    p.add_argument("--to", metavar="REVISION", help="undo: this revision (default: the previous)")
    p.add_argument("--wait", action="store_true", help="undo: follow its rollout to the end")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to --wait (default %(default)s)"
    )
    output.add_output_arg(p, "cli-rollout-status (cli-rollout-history with history)")
    settings.add_arguments(p, NatsSettings)
    p.set_defaults(func=cmd_rollout)
