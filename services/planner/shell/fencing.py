"""The rollout driver's fence, as a cluster's planner holds fleet placements to it (issue 41
item 12): a placement whose fencing token is below one already taken for its bundle comes from
a driver that lost its lease, and is dropped (``dropped``; the rule is ``revision.fenced``).

The fence is the planner's memory (``ClusterState.fleet_fences``), so a placement met with no
memory of its bundle's fence — a rebuild after a restart or a claim, when a stale placement may
have landed while no planner served the cluster — whose token is below the lease holder's (the
lease entry names it: ``services.core.lease.lease_token``) is checked against the bundle's history
(``after_newer``; ``revision.history_needed``, ``revision.in_force_of``). A placement of the
holder's own term reads nothing more, so a normal rebuild costs what it did.

Either way the message in force is published again as it was (same bytes; one message id per
dropped message, so planners that drop the same one publish it once), so the bundle's last
message is never the dropped one and a later rebuild takes the one in force — unless that
message is itself below the fence (a newer driver's placement raised it and was then refused:
``revision.republishable``), which would be dropped in turn; then nothing is published, and a
rebuild's history check refuses the dropped placement instead.
"""

from __future__ import annotations

import logging

from schemas.codec import WireError, decode
from schemas.messages import Bundle
from schemas.subjects import ROLLOUT_DRIVER_KEY
from services.common import bus
from services.core.lease import lease_token
from services.planner.memory.cluster import ClusterState
from services.planner.rule.revision import history_needed, in_force_of, republishable

log = logging.getLogger("driftbus.planner")


class PlacementFence:
    """One cluster's fleet placements held to the driver's fence (for the bundle intake)."""

    def __init__(self, *, state: ClusterState, js: bus.JetStream, publisher: bus.Publisher):
        self.state = state
        self.js = js
        self.pub = publisher
        self._rebuild_lease: tuple[int | None] | None = None
        """The driver lease's token as read once for the rebuild (None: not read yet)."""

    async def dropped(
        self, ident: tuple[str, str], msg: bus.Message, revision: str, why: str
    ) -> None:
        """A deposed driver's placement, dropped: the log says why, and the revision in force
        is published again as it was (same bytes: nothing is written for it), so the bundle's
        last message is never the dropped one."""
        log.error("bundle %s/%s@%s: %s", *ident, revision, why)
        self.state.counters["placements_fenced"] += 1
        view = self.state.bundles.get(ident)
        if view is None:
            return
        in_force = await bus.message_at(self.js, bus.BUNDLES, view.seq)
        if in_force is None or not in_force.data:
            return
        highest = self.state.fleet_fences.get(ident[1], 0)
        if not republishable(_fence_mark(in_force.data), highest):
            log.warning(
                "bundle %s/%s: the message in force (sequence %s) is itself below the fence "
                "(%d): not published again (a newer driver's placement was refused)",
                *ident,
                view.seq,
                highest,
            )
            return
        await self._republish(msg, in_force.data)

    async def _republish(self, msg: bus.Message, in_force: bytes) -> None:
        await self.pub.publish(
            msg.subject, in_force, msg_id=f"fenced:{msg.subject}:{msg.metadata.sequence.stream}"
        )

    async def after_newer(self, ident: tuple[str, str], msg: bus.Message, bundle: Bundle) -> bool:
        """Whether ``msg`` (``bundle``, decoded and checked to name its subject's bundle) is a
        deposed driver's placement that landed after a newer driver's while this planner had
        no memory of the bundle's fence (``revision.history_needed``): then it is dropped, said
        in the log, and the message the bundle's history holds in force (the newest placement
        with the highest token, or a later message that is not the driver's) is published
        again as it was, and taken when it arrives."""
        fences = self.state.fleet_fences
        if not (bundle.fleet and bundle.fencing_token) or bundle.bundle in fences:
            return False  # the common case, decided without reading the lease
        if not history_needed(bundle, fences, await self._lease_token()):
            return False
        seq = msg.metadata.sequence.stream
        earlier = await bus.subject_history(self.js, bus.BUNDLES, msg.subject, upto=seq - 1)
        marks = [_fence_mark(m.data) for m in earlier] + [(True, bundle.fencing_token)]
        index, highest = in_force_of(marks)
        fences[bundle.bundle] = max(fences.get(bundle.bundle, 0), highest)
        if index == len(earlier):
            return False  # this placement is the one in force: taken as ever
        in_force = earlier[index]
        log.error(
            "bundle %s/%s@%s: a placement of a rollout driver that lost its lease (fencing "
            "token %d; the bundle's history holds a newer driver's, %d): refused, the message "
            "in force (sequence %s) is published again",
            *ident,
            bundle.revision,
            bundle.fencing_token,
            highest,
            in_force.seq,
        )
        self.state.counters["placements_fenced"] += 1
        if in_force.data:
            await self._republish(msg, in_force.data)
        return True

    async def _lease_token(self) -> int | None:
        """The rollout driver lease's token (None: unknown), read once for a rebuild and each
        time once live (a placement met with no fence is rare then)."""
        if not self.state.live and self._rebuild_lease is not None:
            return self._rebuild_lease[0]
        try:
            entry = await bus.kv_get(self.js, bus.ROLLOUTS_BUCKET, ROLLOUT_DRIVER_KEY)
        except Exception as exc:  # noqa: BLE001 - unknown: the history is read instead
            log.warning("cluster %s: the driver lease not read: %r", self.state.cluster, exc)
            return None
        token = lease_token(entry.value if entry is not None else None)
        if not self.state.live:
            self._rebuild_lease = (token,)
        return token


def _fence_mark(data: bytes | None) -> tuple[bool, int]:
    """``(fleet, fencing_token)`` of a stored bundle message (one that cannot be read: neither)."""
    try:
        b = decode(data or b"", Bundle)
    except WireError:
        return False, 0
    return b.fleet, b.fencing_token
