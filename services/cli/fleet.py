"""``driftbus publish`` to a fleet: ``--selector`` / ``-l`` or ``--cluster`` repeated, with the
rollout flags; and ``--wait`` on a fleet, which follows the rollout to the same exit codes as a
one-cluster publish (0 Complete; 1 Halted or RolledBack; 2 no end within ``--timeout``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, get_args

import msgspec
from nats.aio.client import Client as NATS

from schemas.fleet import OnFailure, OnLeave, RolloutPhase, RolloutSpec, RolloutState
from schemas.messages import BundleOptions
from schemas.subjects import rollout_key
from services.common import bus
from services.common.documents import Loaded

ENDS = {
    RolloutPhase.COMPLETE: 0,
    RolloutPhase.HALTED: 1,
    RolloutPhase.ROLLED_BACK: 1,
    RolloutPhase.DELETED: 0,
}


def add_fleet_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "fleet", "publish once to every cluster a selector names (docs/fleet.md)"
    )
    g.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="label selector over the cluster registry (kubectl syntax: env=prod,region in "
        "(eu,us),!canary); every matching cluster gets the revision, including clusters "
        "that register or are relabelled into it later",
    )
    g.add_argument(
        "--rollout",
        action="append",
        default=[],
        metavar="STEP",
        help="a rollout step, in order (repeatable): a selector within the fleet or N%% of its "
        "clusters; the whole fleet is the implicit last step",
    )
    g.add_argument(
        "--bake",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="every cluster of a step stays Ready on the revision this long before the next "
        "step starts (default %(default)s)",
    )
    g.add_argument(
        "--max-unavailable",
        type=int,
        default=0,
        metavar="N",
        help="clusters of a step updated at once (default: all of the step)",
    )
    g.add_argument(
        "--step-timeout",
        type=float,
        default=RolloutSpec().step_timeout,
        metavar="SECONDS",
        help="a step not Ready by then halts the rollout (default %(default)s)",
    )
    g.add_argument(
        "--on-failure",
        choices=get_args(OnFailure),
        default="halt",
        help="halt: later steps never get the revision; rollback: also put the clusters "
        "already on it back on the previous revision (default %(default)s)",
    )
    g.add_argument(
        "--on-leave",
        choices=get_args(OnLeave),
        default="prune",
        help="what a cluster that leaves the fleet gets: its objects pruned (every prune "
        "safeguard holds) or left in place (default %(default)s)",
    )
    g.add_argument(
        "--substitute",
        action="store_true",
        help="replace ${cluster.name} and ${cluster.labels.KEY} in the manifests per cluster "
        "(a cluster lacking the label is refused, named)",
    )


def is_fleet(args: argparse.Namespace) -> bool:
    """Whether a publish goes to a fleet: a selector, several clusters, or rollout flags."""
    clusters = args.cluster if isinstance(args.cluster, list) else []
    return args.selector is not None or len(clusters) > 1 or bool(args.rollout)


def rollout_spec(args: argparse.Namespace) -> RolloutSpec:
    return RolloutSpec(
        steps=list(args.rollout),
        bake=args.bake,
        max_unavailable=args.max_unavailable,
        step_timeout=args.step_timeout,
        on_failure=args.on_failure,
    )


async def publish(
    nc: NATS,
    args: argparse.Namespace,
    loaded: Loaded,
    revision: str,
    options: BundleOptions,
) -> int:
    """Publish to the fleet, then (``--wait``) follow the rollout to an exit code."""
    from services.fleet.publish import publish_fleet

    js = nc.jetstream()
    clusters = args.cluster if isinstance(args.cluster, list) else []
    await publish_fleet(
        js,
        bundle=args.bundle,
        revision=revision,
        manifests=[m.obj for m in loaded.manifests],
        options=options,
        selector=args.selector or "",
        clusters=clusters,
        rollout=rollout_spec(args),
        substitute=args.substitute,
        on_leave=args.on_leave,
        source=loaded.source,
    )
    whom = f"clusters {', '.join(clusters)}" if clusters else ""
    if args.selector is not None:
        whom = f"{whom} matching {args.selector!r}".strip()
    print(
        f"published {args.bundle}@{revision} to the fleet ({whom or 'every cluster'}): "
        f"{len(loaded.manifests)} objects",
        file=sys.stderr,
    )
    if not args.wait:
        return 0
    return await wait(js, args.bundle, revision, within=args.timeout)


async def read_state(js: Any, bundle: str) -> tuple[int, RolloutState] | None:
    """The rollout state of ``bundle`` and its KV revision (None: no rollout yet)."""
    try:
        kv = await js.key_value(bus.ROLLOUTS_BUCKET)
        entry = await kv.get(rollout_key(bundle))
    except Exception:  # noqa: BLE001 - no bucket, no key: no rollout
        return None
    try:
        return entry.revision, msgspec.json.decode(entry.value or b"", type=RolloutState)
    except msgspec.DecodeError:
        return None


def progress_line(state: RolloutState) -> str:
    ready = sum(
        1
        for e in state.clusters.values()
        if e.state == "ready" and e.revision == state.target.revision
    )
    total = sum(1 for e in state.clusters.values() if e.state != "removed")
    steps = len(state.spec.steps) + 1
    line = (
        f"{state.bundle}@{state.target.revision}: {state.phase}, step {state.step + 1}/"
        f"{steps}, {ready}/{total} clusters Ready on it"
    )
    return f"{line}: {state.message}" if state.message else line


async def wait(js: Any, bundle: str, revision: str, *, within: float) -> int:
    """Follow the rollout of ``revision`` to its end: 0 Complete, 1 halted, 2 no end in time."""
    deadline = time.monotonic() + within
    shown = ""
    while time.monotonic() < deadline:
        got = await read_state(js, bundle)
        if got is not None and got[1].target.revision == revision:
            state = got[1]
            line = progress_line(state)
            if line != shown:
                print(line, file=sys.stderr)
                shown = line
            if state.phase in ENDS:
                return ENDS[state.phase]
        await asyncio.sleep(0.5)
    print(
        f"driftbus publish: the rollout of {bundle}@{revision} did not end within {within:g}s",
        file=sys.stderr,
    )
    return 2
