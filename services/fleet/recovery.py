"""What a driver taking over must still publish: the state is written before a tick acts, so a
driver killed mid-tick leaves placements and transitions the state records and the bus lacks.

Each is compared with the bus itself (the last message of the cluster's bundle subject, the last
rollout event), never assumed sent, so nothing is published twice and nothing is lost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Literal

from nats.js import JetStreamContext

from schemas.bundle import Bundle
from schemas.codec import WireError, decode
from schemas.fleet import RolloutEvent, RolloutState
from schemas.subjects import bundle_subject, rollout_event_subject
from services.common import bus
from services.fleet.steps import Place, Remove


async def missing(
    js: JetStreamContext, bundle: str, state: RolloutState
) -> tuple[list[RolloutEvent], list[Place | Remove]]:
    """The events of ``state.recent`` the rollout log lacks, and the placements (and removals)
    the clusters' bundle subjects do not carry."""
    last = await bus.last_message(js, bus.ROLLOUTS, rollout_event_subject(bundle))
    logged = -1
    if last is not None and last.data:
        with contextlib.suppress(WireError):
            logged = decode(last.data, RolloutEvent).seq
    events = [e for e in state.recent if e.seq > logged]
    actions: list[Place | Remove] = []
    for cluster, entry in sorted(state.clusters.items()):
        if entry.state not in ("assigned", "removed") or entry.at is None:
            continue
        if await _carries(js, cluster, bundle, entry.revision, entry.at, entry.state):
            continue
        which: Literal["target", "previous"] = (
            "target" if entry.revision == state.target.revision else "previous"
        )
        actions.append(
            Remove(cluster, entry.message == "orphaned", entry.seq, entry.at)
            if entry.state == "removed"
            else Place(cluster, which, entry.seq, entry.at)
        )
    return events, actions


async def _carries(
    js: JetStreamContext, cluster: str, bundle: str, revision: str, at: dt.datetime, state: str
) -> bool:
    """Whether the cluster's bundle subject already carries the placement (or the removal)."""
    msg = await bus.last_message(js, bus.BUNDLES, bundle_subject(cluster, bundle))
    if msg is None or not msg.data:
        return False
    try:
        last = decode(msg.data, Bundle)
    except WireError:
        return False
    if state == "removed":
        return last.delete
    return last.revision == revision and last.published_at == at and not last.delete
