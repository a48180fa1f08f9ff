"""``driftbus approve BUNDLE [--cluster C]``: let deletions held by the prune budget through
(docs/lifecycle.md, docs/fleet.md).

* With ``--cluster``: the revision the bundle's status shows ``PruneHeld`` on that cluster (or
  the one ``--revision`` names) is approved. The request is a ``PruneApproval`` the cluster's
  planner answers on ``driftbus.rollback.<cluster>.<tenant>.<name>`` — the subject, and so the
  rights, of ``driftbus rollback``: a tenant approves its own bundles only. The planner
  republishes that revision with ``allow_prune`` (what ``publish --allow-prune`` sends), and
  refuses an approval of any other revision: approving r1 never lets r2's deletions through.
* Without: the fleet bundle's clusters whose prune waits because too many left the fleet at once
  (``rollout status`` names them) are approved: a ``RolloutControl`` ``approve`` naming exactly
  those, which the rollout driver applies on its next tick (the rights of ``rollout promote``:
  the admin's).

Exit codes: 0 approved; 1 nothing held (or refused: the answer says why); 2 no planner or driver
answered.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
import time

from services.cli import exits
from services.common import bus, settings
from services.common.bus import NatsSettings

REACT_WITHIN = 15.0
"""Seconds the fleet approval waits for the driver to take it."""


def cmd_approve(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.core.manifest import check_bundle_name

    async def run() -> int:
        check_bundle_name(args.bundle)
        async with user.connected(args) as nc:
            if args.cluster:
                return await _cluster(nc, args)
            return await _fleet(nc, args)

    return exits.run_or_fail("approve", run())


async def _cluster(nc: bus.Connection, args: argparse.Namespace) -> int:
    from schemas.codec import encode
    from schemas.messages import BundlePhase, PruneApproval
    from services.cli import reads as user
    from services.cli.lifecycle import ask_planner

    js = nc.jetstream()
    revision = args.revision
    if not revision:
        statuses = await user.bundle_statuses(js, args.cluster, args.bundle)
        st = statuses[0] if statuses else None
        if st is None or st.phase is not BundlePhase.PRUNE_HELD:
            phase = st.phase if st is not None else "no status"
            print(
                f"driftbus approve: {args.bundle} in cluster {args.cluster} holds no prune "
                f"({phase})",
                file=sys.stderr,
            )
            return 1
        revision = st.revision
        print(st.message, file=sys.stderr)
    req = PruneApproval(cluster=args.cluster, bundle=args.bundle, revision=revision)
    answer = await ask_planner(nc, "approve", args.cluster, args.bundle, encode(req))
    if answer is None:
        return 2
    if not answer.ok:
        print(f"driftbus approve: {args.bundle}: {answer.message}", file=sys.stderr)
        return 1
    print(f"{args.bundle} in cluster {args.cluster}: {answer.message}")
    return 0


async def _fleet(nc: bus.Connection, args: argparse.Namespace) -> int:
    from schemas.codec import encode
    from schemas.fleet import RolloutControl
    from schemas.subjects import rollout_control_subject
    from services.cli.fleet.publish import read_state

    js = nc.jetstream()
    got = await read_state(js, args.bundle)
    if got is None:
        print(
            f"driftbus approve: {args.bundle} is not a fleet bundle (name a cluster with "
            "--cluster to approve a revision's deletions there)",
            file=sys.stderr,
        )
        return 1
    held = list(got[1].leave_held)
    if not held:
        print(f"driftbus approve: {args.bundle}: no fleet prune is held", file=sys.stderr)
        return 1
    ctl = RolloutControl(
        bundle=args.bundle,
        action="approve",
        revision=got[1].target.revision,
        at=dt.datetime.now(dt.UTC),
        clusters=held,
    )
    await bus.publish(js, rollout_control_subject(args.bundle, "approve"), encode(ctl))
    deadline = time.monotonic() + REACT_WITHIN
    while time.monotonic() < deadline:
        now = await read_state(js, args.bundle)
        if now is not None and not set(held) & set(now[1].leave_held):
            print(f"{args.bundle}: approved: pruned on {', '.join(held)}")
            return 0
        await asyncio.sleep(0.3)
    print(
        f"driftbus approve: {args.bundle}: asked; the rollout driver has not taken it within "
        f"{REACT_WITHIN:.0f}s (is a planner running?)",
        file=sys.stderr,
    )
    return 2


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "approve",
        help="let deletions held by the prune budget through (PruneHeld, or a fleet's)",
        description="Let deletions held by the prune budget through. With --cluster: the "
        "revision the bundle's status shows PruneHeld there (its deletions go out; a later "
        "revision is held again if it deletes as much). Without: the clusters whose prune "
        "waits because too many left the fleet bundle at once (rollout status names them).",
    )
    p.add_argument("bundle", metavar="BUNDLE", help="the bundle (TENANT/NAME for a tenant's)")
    p.add_argument(
        "--cluster", help="the cluster whose held deletions to approve (none: the fleet's hold)"
    )
    p.add_argument(
        "--revision",
        help="the revision whose deletions to approve (default: the one its status shows held); "
        "an approval of any other revision is refused",
    )
    settings.add_arguments(p, NatsSettings)
    p.set_defaults(func=cmd_approve)
