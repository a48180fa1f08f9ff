"""``driftbus publish`` to a fleet: ``--selector`` / ``-l`` or ``--cluster`` repeated, with the
rollout flags; and ``--wait`` on a fleet, which follows the rollout to the same exit codes as a
one-cluster publish (0 Complete; 1 Halted, RolledBack or RollbackFailed; 2 no end within
``--timeout``). ``RollingBack`` is no end: a rollback is waited for until the previous revision
is Ready again on every cluster it went back to (RolledBack), or it failed there.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import msgspec

from schemas.fleet import RolloutPhase, RolloutSpec, RolloutState
from schemas.messages import BundleOptions
from schemas.subjects import rollout_key
from services.common import bus
from services.fleet import rollout_flags
from services.inputs.documents import Loaded

ENDS = {
    RolloutPhase.COMPLETE: 0,
    RolloutPhase.HALTED: 1,
    RolloutPhase.ROLLED_BACK: 1,
    RolloutPhase.ROLLBACK_FAILED: 1,
    RolloutPhase.DELETED: 0,
}
"""The phases ``--wait`` ends on, and its exit code (RollingBack is not one of them)."""


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
    rollout_flags.add_flags(g)


def is_fleet(args: argparse.Namespace) -> bool:
    """Whether a publish goes to a fleet: a selector, several clusters, or any flag only a
    fleet has (``--cluster a --substitute`` is a fleet of one: never the flag dropped)."""
    clusters = args.cluster if isinstance(args.cluster, list) else []
    return (
        args.selector is not None
        or len(clusters) > 1
        or bool(rollout_flags.given(rollout_flags.from_args(args)))
    )


def rollout_spec(args: argparse.Namespace) -> RolloutSpec:
    return rollout_flags.from_args(args).spec()


async def publish(
    nc: bus.Connection,
    args: argparse.Namespace,
    loaded: Loaded,
    revision: str,
    options: BundleOptions,
) -> int:
    """Publish to the fleet, then (``--wait``) follow the rollout to an exit code."""
    from services.fleet.publish import publish_fleet

    js = nc.jetstream()
    clusters = args.cluster if isinstance(args.cluster, list) else []
    for warning in await reach_warnings(js, args.selector or "", clusters, args.rollout):
        print(f"driftbus publish: warning: {warning}", file=sys.stderr)
    fb = await publish_fleet(
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
    return await wait(js, args.bundle, fb.published_at, within=args.timeout)


async def reach_warnings(
    js: Any, selector: str, clusters: list[str], steps: list[str]
) -> list[str]:
    """What a fleet publish would reach, said before it is sent when it is nothing: a
    selector no registered cluster matches, a named cluster not registered, a rollout step
    with no cluster (a typo in a canary step would skip the canary)."""
    from services.clusters import registry
    from services.fleet.rollout.steps import step_sets

    try:
        records = await registry.records(js)
    except Exception:  # noqa: BLE001 - the registry cannot be read: nothing to say
        return []
    fleet = registry.members(records, selector, clusters)
    out = [
        f"cluster {c} is not registered (driftbus clusters)" for c in clusters if c not in records
    ]
    if not fleet:
        return [*out, "no registered cluster is in this fleet: nothing is placed until one is"]
    sets = step_sets(steps, fleet)
    out += [
        f"rollout step {i + 1} ({step}) holds no cluster of the fleet"
        for i, step in enumerate(steps)
        if not (sets[i] - (sets[i - 1] if i else set()))
    ]
    return out


async def read_state(js: Any, bundle: str) -> tuple[int, RolloutState] | None:
    """The rollout state of ``bundle`` and its KV revision (None: no rollout yet)."""
    try:
        entry = await bus.kv_get(js, bus.ROLLOUTS_BUCKET, rollout_key(bundle))
    except Exception:  # noqa: BLE001 - no bucket, not permitted, away: no rollout to say
        return None
    if entry is None:
        return None
    try:
        return entry.revision, msgspec.json.decode(entry.value, type=RolloutState)
    except msgspec.DecodeError:
        return None


def progress_line(state: RolloutState) -> str:
    ready = sum(
        1
        for e in state.clusters.values()
        if e.state == "ready" and e.revision == state.target.revision and e.seq >= state.first_seq
    )
    total = sum(1 for e in state.clusters.values() if e.state != "removed")
    steps = len(state.spec.steps) + 1
    line = (
        f"{state.bundle}@{state.target.revision}: {state.phase}, step {state.step + 1}/"
        f"{steps}, {ready}/{total} clusters Ready on it"
    )
    if state.rollback and state.previous is not None:
        back = sum(
            1
            for c in state.rollback
            if (e := state.clusters.get(c)) is not None
            and e.revision == state.previous.revision
            and e.state == "ready"
        )
        line += f", {back}/{len(state.rollback)} back Ready on {state.previous.revision}"
    return f"{line}: {state.message}" if state.message else line


async def wait(js: Any, bundle: str, published_at: Any, *, within: float) -> int:
    """Follow the rollout of the revision published at ``published_at`` (this publish, not an
    earlier one of the same name) to its end: 0 Complete, 1 halted (rolled back, or the rollback
    failed), 2 no end in time. A rollback under way is followed to its end."""
    deadline = time.monotonic() + within
    shown = ""
    while time.monotonic() < deadline:
        got = await read_state(js, bundle)
        if got is not None and got[1].target.published_at == published_at:
            state = got[1]
            line = progress_line(state)
            if line != shown:
                print(line, file=sys.stderr)
                shown = line
            if state.phase in ENDS:
                return ENDS[state.phase]
        await asyncio.sleep(0.5)
    print(
        f"driftbus: the rollout of {bundle} published at {published_at} did not end within "
        f"{within:g}s",
        file=sys.stderr,
    )
    return 2


async def delete(js: Any, bundle: str, *, keep: bool, wait: bool) -> int:
    """``delete bundle --fleet``: the fleet bundle deleted from every cluster it reached
    (pruned, or left in place with ``keep``); with ``wait``, until the driver did it."""
    from services.fleet.publish import publish_fleet

    got = await read_state(js, bundle)
    if got is None:
        print(f"driftbus delete: no fleet bundle {bundle}", file=sys.stderr)
        return 1
    state = got[1]
    await publish_fleet(
        js,
        bundle=bundle,
        revision=state.target.revision,
        manifests=[],
        options=msgspec.structs.replace(state.target.options, prune=not keep),
        on_leave="orphan" if keep else "prune",
        delete=True,
        source="driftbus delete bundle --fleet",
    )
    how = "its objects are kept" if keep else "its objects are pruned"
    print(f"deleting fleet bundle {bundle} from every cluster: {how}", file=sys.stderr)
    if not wait:
        return 0
    for _ in range(240):
        got = await read_state(js, bundle)
        if got is not None and got[1].phase is RolloutPhase.DELETED:
            return 0
        await asyncio.sleep(0.5)
    return 2
