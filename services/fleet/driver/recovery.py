"""What a driver taking over must still publish: the state is written before a tick acts, so a
driver killed mid-tick leaves placements and transitions the state records and the bus lacks.

Each is compared with the bus itself (the last message of the cluster's bundle subject, the last
rollout event), never assumed sent, so nothing is published twice and nothing is lost.
"""

from __future__ import annotations

import contextlib
import datetime as dt

from schemas.bundle import Bundle
from schemas.codec import WireError, decode
from schemas.fleet import RolloutEvent, RolloutState
from schemas.subjects import bundle_subject, rollout_event_subject
from services.common import bus
from services.fleet.rollout.steps import Place, Remove


async def missing(
    js: bus.JetStream, bundle: str, state: RolloutState
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
        if await _done(js, cluster, bundle, entry.at):
            continue
        if entry.state == "removed":
            actions.append(Remove(cluster, entry.message == "orphaned", entry.seq, entry.at))
        elif entry.revision == state.target.revision:
            actions.append(Place(cluster, "target", entry.seq, entry.at))
        elif state.previous is not None and entry.revision == state.previous.revision:
            actions.append(Place(cluster, "previous", entry.seq, entry.at))
        # else: a revision the state no longer holds; the next tick decides afresh
    return events, actions


async def _done(js: bus.JetStream, cluster: str, bundle: str, at: dt.datetime) -> bool:
    """Whether the cluster's bundle subject carries the placement (or removal) made at ``at``,
    or anything published after it (a later placement, or a user's own publish, which a
    re-sent placement must never overwrite)."""
    msg = await bus.last_message(js, bus.BUNDLES, bundle_subject(cluster, bundle))
    if msg is None or not msg.data:
        return False
    try:
        last = decode(msg.data, Bundle)
    except WireError:
        return True  # something is there that is not ours to overwrite; reported elsewhere
    if last.published_at is None or last.published_at.utcoffset() is None:
        return True
    return (last.published_at - at).total_seconds() > -0.001
