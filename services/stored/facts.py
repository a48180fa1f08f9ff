"""The newest server or applied fact of every object of some clusters, as the bus holds them
now: each cluster's checkpoint, then the SERVER or APPLIED messages above it (issue 44).

SERVER and APPLIED keep batches of facts (``ServerFacts``: a list page or watch burst;
``AppliedFacts``: an applier's report), each until a checkpoint of its cluster covers it (the
planner then purges it: ``planner.shell.checkpointing``), so no one message per object is left
to read "the last per subject" from. A reader that needs the cluster as it is — the watcher
seeding its cache, ``driftbus status`` showing live health, the status page and its object
detail — takes the checkpoint's objects and folds what came after it. Where two facts of an
object disagree the newer resourceVersion wins (active-active watchers, two appliers finishing
one object, may publish out of order), as in the planner's rule.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Literal, TypeVar

from schemas.checkpoint import CheckpointError, CheckpointObject, inflate, whole
from schemas.codec import WireError, applied_events, server_events
from schemas.messages import AppliedEvent, Health, ServerEvent
from schemas.subjects import ObjectKey
from services.common import bus
from services.core.manifest import rv_int
from services.stored import checkpoints

log = logging.getLogger("driftbus.facts")

Family = Literal["server", "applied"]
F = TypeVar("F", bound=ServerEvent | AppliedEvent)
ServerFactsByCluster = dict[str, dict[ObjectKey, ServerEvent]]


def as_event(cluster: str, o: CheckpointObject) -> ServerEvent | None:
    """The server fact a checkpoint's object stands for (None: the watcher never saw it)."""
    if o.server_sha is None and not o.server_deleted:
        return None
    return ServerEvent(
        cluster=cluster,
        key=ObjectKey(o.group, o.kind, o.namespace, o.name),
        resource_version=str(o.server_rv),
        server_sha=o.server_sha.hex() if o.server_sha is not None else None,
        deleted=o.server_deleted,
        health=Health(o.health) if o.health in Health._value2member_map_ else Health.UNKNOWN,
        health_message=o.health_message,
        api_version=o.api_version,
        bundle=o.owner_bundle,
        keep=o.keep,
        retired=o.server_retired,
    )


def as_applied(cluster: str, o: CheckpointObject) -> AppliedEvent | None:
    """The applied fact a checkpoint's object stands for (None: nothing applied, or pruned)."""
    if o.applied_manifest_sha is None:
        return None
    return AppliedEvent(
        cluster=cluster,
        key=ObjectKey(o.group, o.kind, o.namespace, o.name),
        bundle=o.applied_bundle or "?",
        revision=o.applied_revision,
        manifest_sha=o.applied_manifest_sha.hex(),
        apply_sha=o.apply_sha.hex() if o.apply_sha is not None else None,
        resource_version=str(o.applied_rv),
        applied_at=dt.datetime.fromtimestamp(o.applied_at, dt.UTC) if o.applied_at else None,
    )


def fold(into: dict[ObjectKey, F], ev: F) -> None:
    """Keep ``ev`` unless ``into`` holds a newer fact of its object: the planner's rebuild rule
    (``decide.restore``) — a newer or equal resourceVersion wins, and a prune whose object was
    already gone (it reports none) ends the applied state whatever came before."""
    was = into.get(ev.key)
    rv = rv_int(ev.resource_version)
    gone = isinstance(ev, AppliedEvent) and ev.deleted and not rv
    if was is None or gone or rv >= rv_int(was.resource_version):
        into[ev.key] = ev


_READ: dict[Family, tuple[str, Callable[[str, bytes], Sequence[ServerEvent | AppliedEvent]]]] = {
    "server": (bus.SERVER, server_events),
    "applied": (bus.APPLIED, applied_events),
}
_FROM_CHECKPOINT: dict[Family, Callable[[str, CheckpointObject], ServerEvent | AppliedEvent | None]]
_FROM_CHECKPOINT = {"server": as_event, "applied": as_applied}


async def checkpointed(
    js: bus.JetStream, clusters: Collection[str] | None = None, family: Family = "server"
) -> tuple[dict[str, dict[ObjectKey, ServerEvent | AppliedEvent]], dict[str, int]]:
    """Per cluster (``clusters``, or every one), the ``family`` facts of its whole checkpoint,
    and the stream sequence each covers. A checkpoint that is not whole, or claims more than
    the stream holds (the streams made anew), is not used."""
    wanted = None if clusters is None else set(clusters)
    found = await checkpoints.parts(js, clusters)
    wholes, unusable = whole(found)
    for cluster, why in unusable.items():
        log.info("cluster %s: checkpoint not used (%s); reading its facts", cluster, why)
    stream, _ = _READ[family]
    held = await bus.last_sequence(js, stream) if wholes else 0
    of = _FROM_CHECKPOINT[family]
    facts: dict[str, dict[ObjectKey, ServerEvent | AppliedEvent]] = {}
    covered: dict[str, int] = {}
    for cluster, mine in wholes.items():
        upto = mine[0].read_up_to.get(family, 0)
        if (wanted is not None and cluster not in wanted) or upto > held:
            continue
        objects: dict[ObjectKey, ServerEvent | AppliedEvent] = {}
        try:
            for part in mine:
                for o in inflate(part):
                    if (ev := of(cluster, o)) is not None:
                        objects[ev.key] = ev
        except CheckpointError as exc:
            log.info("cluster %s: checkpoint not used (%s); reading its facts", cluster, exc)
            continue
        facts[cluster], covered[cluster] = objects, upto
    return facts, covered


async def latest(
    js: bus.JetStream, clusters: Collection[str] | None = None, family: Family = "server"
) -> dict[str, dict[ObjectKey, ServerEvent | AppliedEvent]]:
    """Per cluster (``clusters``, or every one with a fact), per object, its newest ``family``
    fact: the cluster's checkpoint, then every message above it (the whole stream for a
    cluster without one). A stream not made yet holds nothing."""
    out, covered = await checkpointed(js, clusters, family)
    stream, unpack = _READ[family]
    wanted = None if clusters is None else set(clusters)
    # clusters without a checkpoint are only known by reading: then the whole stream
    start = 1 if wanted is None else 1 + min((covered.get(c, 0) for c in wanted), default=0)
    for c in wanted or ():
        out.setdefault(c, {})

    def take(m: bus.Message) -> None:
        cluster = checkpoints.cluster_in(m.subject)
        if wanted is not None and cluster not in wanted:
            return
        if bus.stream_sequence(m) <= covered.get(cluster, 0):
            return
        try:
            events = unpack(m.subject, m.data)
        except WireError as exc:
            log.warning("ignoring %s facts on %s: %s", family, m.subject, exc)
            return
        mine = out.setdefault(cluster, {})
        for ev in events:
            fold(mine, ev)

    await checkpoints.each_above(js, stream, checkpoints.subjects(family, clusters), start, take)
    return out


async def live(js: bus.JetStream, clusters: Collection[str] | None = None) -> ServerFactsByCluster:
    """``latest`` server facts: what the watchers last said of each live object."""
    return await latest(js, clusters, "server")  # type: ignore[return-value]


async def applied(
    js: bus.JetStream, clusters: Collection[str]
) -> dict[str, dict[ObjectKey, AppliedEvent]]:
    """``latest`` applied facts: what the appliers last applied of each object."""
    return await latest(js, clusters, "applied")  # type: ignore[return-value]
