"""Rollback: an earlier revision of a bundle put back in force by republishing it from the
bundle's history on the bus (the BUNDLES stream keeps the last few revisions per bundle).

The planner answers the request (``driftbus.rollback.<cluster>.<tenant>.<name>``) because it
reads the BUNDLES stream, which users may not (a user of one cluster would read every
cluster's manifests, Secrets included); a tenant may ask for its own bundles only, as for
publishing. The revision republished is an ordinary publish (``bundles.publish_bundle``, the
one way a revision reaches the bundle subject) with ``rollback_of`` set, so the decision rule
writes exactly the objects that differ from what is in force, and a planner that restarts finds
it as the bundle's latest revision. ``choose`` is the pure part.

An approval of the deletions the prune budget holds (``driftbus approve B --cluster C``, a
``PruneApproval`` on the same subject, with the same rights) is answered the same way: the held
revision is republished with ``allow_prune``, exactly what ``publish --allow-prune`` would have
sent, and its deletions go out. Only the revision held now is approved: an approval naming
another (one since replaced) is refused, so it never lets a later revision's deletions through.
"""

from __future__ import annotations

import logging
import time

import msgspec

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    Bundle,
    BundleOptions,
    PruneApproval,
    RollbackAnswer,
    RollbackRequest,
)
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
            req: RollbackRequest | PruneApproval = decode(
                msg.data,
                RollbackRequest | PruneApproval,  # type: ignore[arg-type]
            )
            where = parse_subject(msg.subject)
        except (WireError, SubjectError) as exc:
            return RollbackAnswer(ok=False, message=f"not a rollback request: {exc}")
        if (req.cluster, req.bundle) != (where.cluster, where.bundle):
            return RollbackAnswer(
                ok=False,
                message=f"the request names {req.cluster}/{req.bundle} but was sent to the "
                f"subject of {where.cluster}/{where.bundle}",
            )
        if isinstance(req, PruneApproval):
            return await self.approve(req)
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
            # an approval (or publish --allow-prune) let that revision's deletions through
            # once; going back to it weighs its deletions afresh
            options=msgspec.structs.replace(chosen.options, allow_prune=False),
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

    async def approve(self, req: PruneApproval) -> RollbackAnswer:
        """Let the deletions of ``req.revision`` through, if the prune budget holds them now:
        that revision republished with ``allow_prune`` (its manifests, options and placement as
        they were), which the bundle's intake then prunes for."""
        held = self.state.gates.prune_held.get(req.bundle)
        view = self.state.bundles.get((req.cluster, req.bundle))
        if held is None or view is None or held.revision != view.revision:
            return RollbackAnswer(
                ok=False, message=f"nothing of bundle {req.bundle} is held by the prune budget"
            )
        if held.revision != req.revision:
            return RollbackAnswer(
                ok=False,
                message=f"revision {req.revision} is not the one held (revision "
                f"{held.revision} is): approve what driftbus status shows",
                revision=held.revision,
            )
        history = await revisions(self.js, req.cluster, req.bundle)
        chosen = next((b for b in reversed(history) if b.revision == held.revision), None)
        if chosen is None or chosen.delete:
            return RollbackAnswer(ok=False, message=f"revision {held.revision} is not on the bus")
        options = msgspec.structs.replace(chosen.options, allow_prune=True)
        try:
            again = await self._republish_approved(req, chosen, options, view.seq)
        except bus.ApiError as exc:
            if exc.err_code not in bus.COMPARE_REFUSED:
                raise
            return RollbackAnswer(
                ok=False,
                message=f"a newer revision of bundle {req.bundle} was published meanwhile: "
                "approve what driftbus status shows now",
            )
        log.info(
            "bundle %s/%s@%s: prune approved: %d deletions",
            held.cluster,
            held.bundle,
            held.revision,
            len(held.keys),
        )
        return RollbackAnswer(
            ok=True,
            message=f"approved: revision {again.revision} deletes {len(held.keys)} objects "
            f"({held.why})",
            revision=again.revision,
        )

    async def _republish_approved(
        self, req: PruneApproval, chosen: Bundle, options: BundleOptions, seq: int
    ) -> Bundle:
        """``chosen`` again with ``options`` (``allow_prune``), only over the revision held:
        not over one published since that the planner has not taken in yet (which may declare
        the objects again, or be held itself)."""
        return await publish_bundle(
            self.js,
            cluster=req.cluster,
            bundle=req.bundle,
            revision=chosen.revision,
            manifests=list(chosen.manifests),
            options=options,
            source=chosen.source,
            stored=chosen.manifests_ref,
            kinds=list(chosen.kinds),
            published_at=chosen.published_at,
            fleet=chosen.fleet,
            rollback_of=chosen.rollback_of,
            msg_id=f"approve:{req.cluster}/{req.bundle}@{chosen.revision}/{time.time_ns()}",
            streams_known=True,
            expected_last_seq=seq,
        )
