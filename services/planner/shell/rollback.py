"""Rollback: an earlier revision of a bundle put back in force by republishing it from the
bundle's history on the bus (the BUNDLES stream keeps the last few revisions per bundle).

The planner answers the request (``driftbus.rollback.<cluster>.<tenant>.<name>``) because it
reads the BUNDLES stream, which users may not (a user of one cluster would read every
cluster's manifests, Secrets included); a tenant may ask for its own bundles only, as for
publishing. The revision republished is an ordinary publish (``bundles.publish_bundle``, the
one way a revision reaches the bundle subject) with ``rollback_of`` set, so the decision rule
writes exactly the objects that differ from what is in force, and a planner that restarts finds
it as the bundle's latest revision. ``choose`` is the pure part.
"""

from __future__ import annotations

import logging
import time

from schemas.codec import WireError, decode, encode
from schemas.messages import Bundle, RollbackAnswer, RollbackRequest
from schemas.subjects import SubjectError, cluster_filter, parse_subject
from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.revisions.publish import publish_bundle, revisions

log = logging.getLogger("driftbus.planner")
QUEUE = "driftbus-planner"
"""Queue group: while a cluster's claim moves between replicas, one of them answers."""


def choose(history: list[Bundle], in_force: str, to: str) -> Bundle | str:
    """The revision to republish from ``history`` (oldest first), or why there is none.

    ``to`` names it; "" means the newest one before ``in_force`` (the revision of the view in
    force, "" for a deleted bundle: then the newest one, an undelete). Deletions are never
    chosen; a revision equal to the one in force is nothing to roll back to."""
    revisions = [b for b in history if not b.delete]
    listed = ", ".join(dict.fromkeys(b.revision for b in revisions)) or "none"
    if to:
        for b in reversed(revisions):
            if b.revision == to:
                if to == in_force:
                    return f"revision {to} is the one in force"
                return b
        return f"revision {to} is not among the revisions on the bus ({listed})"
    start = len(revisions)
    if in_force:
        start = next(
            (i for i in range(len(revisions) - 1, -1, -1) if revisions[i].revision == in_force),
            len(revisions),
        )
    for b in reversed(revisions[:start]):
        if b.revision != in_force:
            return b
    return f"no revision before {in_force or 'the deletion'} on the bus ({listed})"


class RollbackDesk:
    """Answers the rollback requests of one cluster."""

    def __init__(self, *, js: bus.JetStream, state: ClusterState) -> None:
        self.js = js
        self.state = state

    async def serve(self, nc: bus.Connection) -> None:
        """Answer the cluster's rollback requests until cancelled."""
        subject = cluster_filter("rollback", self.state.cluster)
        await bus.serve(nc, subject, queue=QUEUE, answer=self._reply)

    async def _reply(self, msg: bus.Message) -> bytes:
        if not self.state.live:
            answer = RollbackAnswer(
                ok=False, message="the planner is still rebuilding its state; try again"
            )
        else:
            try:
                answer = await self.answer(msg)
            except Exception as exc:  # noqa: BLE001 - one request failed, not the planner
                log.warning("rollback request on %s failed: %s", msg.subject, exc)
                answer = RollbackAnswer(ok=False, message=f"the rollback failed: {exc}")
        return encode(answer)

    async def answer(self, msg: bus.Message) -> RollbackAnswer:
        try:
            req = decode(msg.data, RollbackRequest)
            where = parse_subject(msg.subject)
        except (WireError, SubjectError) as exc:
            return RollbackAnswer(ok=False, message=f"not a rollback request: {exc}")
        if (req.cluster, req.bundle) != (where.cluster, where.bundle):
            return RollbackAnswer(
                ok=False,
                message=f"the request names {req.cluster}/{req.bundle} but was sent to the "
                f"subject of {where.cluster}/{where.bundle}",
            )
        view = self.state.bundles.get((req.cluster, req.bundle))
        in_force = view.revision if view is not None else ""
        try:
            history = await revisions(self.js, req.cluster, req.bundle)
        except Exception as exc:  # noqa: BLE001 - NATS away: the requester is told
            return RollbackAnswer(ok=False, message=f"the bundle's history was not read: {exc}")
        names = [b.revision for b in history]
        if not history:
            return RollbackAnswer(ok=False, message=f"no bundle {req.bundle} on the bus")
        chosen = choose(history, in_force, req.to)
        if isinstance(chosen, str):
            return RollbackAnswer(ok=False, message=chosen, rollback_of=in_force, history=names)
        if (chosen.cluster, chosen.bundle) != (req.cluster, req.bundle):
            # a raw publish the planner refused: republished under this subject's names, it
            # would be taken, which it never was
            return RollbackAnswer(
                ok=False,
                message=f"revision {chosen.revision} names {chosen.cluster}/{chosen.bundle}, "
                "not this bundle: it was never taken",
                rollback_of=in_force,
                history=names,
            )
        again = await publish_bundle(
            self.js,
            cluster=req.cluster,
            bundle=req.bundle,
            revision=chosen.revision,
            manifests=list(chosen.manifests),
            options=chosen.options,
            source=chosen.source,
            stored=chosen.manifests_ref,
            kinds=list(chosen.kinds),
            fleet=chosen.fleet,
            rollback_of=in_force,
            msg_id=f"rollback:{req.cluster}/{req.bundle}@{chosen.revision}/{time.time_ns()}",
            streams_known=True,  # the planner made them
        )
        log.info(
            "bundle %s/%s: rolled back from %s to %s",
            req.cluster,
            req.bundle,
            in_force or "(deleted)",
            again.revision,
        )
        return RollbackAnswer(
            ok=True,
            message=f"republished {again.revision} (was {in_force or 'deleted'})",
            revision=again.revision,
            rollback_of=in_force,
            history=names,
        )
