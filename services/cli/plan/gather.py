"""What a fleet plan reads from the bus, once for every cluster it names: the cluster registry,
the tenant policy, the sync windows, the rollout in force, and the recorded state of each
cluster (``state``). Only NATS is asked: no API server, no kubeconfig.
"""

from __future__ import annotations

import datetime as dt
import gc

from services.cli.fleet.publish import read_state
from services.cli.plan import state
from services.cli.plan.fleet import ClusterPlan, Recorded, Targeting, leaving, plan_fleet, targets
from services.clusters import registry
from services.common import bus
from services.tenancy.store import read_policy
from services.windows.document import WindowsError, compiled
from services.windows.store import read_windows


async def recorded(js: bus.JetStream, t: Targeting, *, checkpoints: bool = True) -> Recorded:
    """Everything ``plan_fleet`` reads, for the clusters ``t`` names and those it leaves
    (``checkpoints=False``: every object's facts, not the clusters' checkpoints)."""
    records = await registry.records(js)
    spec, _problem = await read_windows(js)
    try:
        windows = compiled(spec)
    except WindowsError:  # never stored unchecked; the planners hold the last good ones too
        windows = ()
    got = await read_state(js, t.bundle)
    placed = [c for c, e in got[1].clusters.items() if e.state != "removed"] if got else []
    rec = Recorded(records, {}, policy=await read_policy(js), windows=windows, placed=placed)
    clusters = set(targets(t, records)) | set(leaving(t, rec))
    if not clusters:
        return rec
    return Recorded(
        records,
        await state.known(js, clusters, checkpoints=checkpoints),
        scopes=await state.learned_scopes(js, clusters),
        policy=rec.policy,
        windows=windows,
        placed=placed,
    )


async def fleet_plan(
    js: bus.JetStream, t: Targeting, now: dt.datetime | None = None, *, checkpoints: bool = True
) -> tuple[list[ClusterPlan], list[str]]:
    """The plan of every cluster ``t`` names, and the clusters it names that are not registered
    (nothing would be placed there until they are)."""
    # hundreds of thousands of facts, all alive until the plan is printed: nothing for the
    # cyclic garbage collector to find, and its passes over them cost as much as the reading
    collecting = gc.isenabled()
    gc.disable()
    try:
        rec = await recorded(js, t, checkpoints=checkpoints)
        unregistered = [c for c in t.named if c not in rec.records]
        return plan_fleet(t, rec, now or dt.datetime.now(dt.UTC)), unregistered
    finally:
        if collecting:
            gc.enable()
