"""The newest server fact of every object of some clusters, as the bus holds them now: each
cluster's checkpoint, then the SERVER messages above it (issue 44).

SERVER keeps batches of facts (``ServerFacts``, one per list page or watch burst), each until a
checkpoint of its cluster covers it (the planner then purges it: ``planner.shell.checkpointing``),
so no one message per object is left to read "the last per subject" from. A reader that needs
the cluster as it is — the watcher seeding its cache, ``driftbus status`` showing live health,
the status page — takes the checkpoint's objects and folds what came after it. Where two facts
of an object disagree the newer resourceVersion wins (active-active watchers may publish out of
order), as in the planner's rule.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from schemas.checkpoint import CheckpointError, CheckpointObject, inflate, whole
from schemas.codec import WireError, server_events
from schemas.messages import Health, ServerEvent
from schemas.subjects import ObjectKey
from services.common import bus
from services.core.manifest import rv_int
from services.stored import checkpoints

log = logging.getLogger("driftbus.facts")

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


def fold(into: dict[ObjectKey, ServerEvent], ev: ServerEvent) -> None:
    """Keep ``ev`` unless ``into`` holds a newer fact of its object."""
    was = into.get(ev.key)
    if was is None or rv_int(ev.resource_version) >= rv_int(was.resource_version):
        into[ev.key] = ev


async def checkpointed(
    js: bus.JetStream, clusters: Collection[str] | None = None
) -> tuple[ServerFactsByCluster, dict[str, int]]:
    """Per cluster (``clusters``, or every one), the server facts of its whole checkpoint, and
    the SERVER sequence each covers. A checkpoint that is not whole, or claims more than SERVER
    holds (the streams made anew), is not used."""
    wanted = None if clusters is None else set(clusters)
    found = await checkpoints.parts(js, clusters)
    wholes, unusable = whole(found)
    for cluster, why in unusable.items():
        log.info("cluster %s: checkpoint not used (%s); reading its facts", cluster, why)
    held = await bus.last_sequence(js, bus.SERVER) if wholes else 0
    facts: ServerFactsByCluster = {}
    covered: dict[str, int] = {}
    for cluster, mine in wholes.items():
        upto = mine[0].read_up_to.get("server", 0)
        if (wanted is not None and cluster not in wanted) or upto > held:
            continue
        objects: dict[ObjectKey, ServerEvent] = {}
        try:
            for part in mine:
                for o in inflate(part):
                    if (ev := as_event(cluster, o)) is not None:
                        objects[ev.key] = ev
        except CheckpointError as exc:
            log.info("cluster %s: checkpoint not used (%s); reading its facts", cluster, exc)
            continue
        facts[cluster], covered[cluster] = objects, upto
    return facts, covered


async def latest(
    js: bus.JetStream, clusters: Collection[str] | None = None
) -> ServerFactsByCluster:
    """Per cluster (``clusters``, or every one with a fact), per object, its newest server
    fact: the cluster's checkpoint, then every SERVER message above it (the whole stream for a
    cluster without one). A stream not made yet holds nothing."""
    out, covered = await checkpointed(js, clusters)
    wanted = None if clusters is None else set(clusters)
    start = 1 + min(
        (covered.get(c, 0) for c in (wanted if wanted is not None else covered)), default=0
    )
    if wanted is None:
        start = 1  # clusters without a checkpoint are not known before reading
    if wanted is not None:
        for c in wanted:
            out.setdefault(c, {})

    def take(m: bus.Message) -> None:
        cluster = checkpoints.cluster_in(m.subject)
        if (wanted is not None and cluster not in wanted) or bus.stream_sequence(m) <= covered.get(
            cluster, 0
        ):
            return
        try:
            events = server_events(m.subject, m.data)
        except WireError as exc:
            log.warning("ignoring server facts on %s: %s", m.subject, exc)
            return
        mine = out.setdefault(cluster, {})
        for ev in events:
            fold(mine, ev)

    follower = (
        bus.Follower(js, bus.SERVER, checkpoints.subjects("server", clusters))
        if start <= 1
        else bus.Follower(js, bus.SERVER, checkpoints.subjects("server", clusters), start_seq=start)
    )
    try:
        await follower.each(take)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
    return out
