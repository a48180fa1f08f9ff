"""What a rollout tick asks for, done on the bus: a ``Place`` publishes the placement's revision
as the cluster's bundle (its stored manifests referred to, or substituted with the cluster's
labels), a ``Remove`` deletes the bundle from a cluster that left, and each transition is
appended to the rollout log. Every publish carries a message id of its own (the placement's
``seq``, the event's), so doing it again after a take-over sends nothing twice.

Before every publish the driver's lease is asked again (``fence``): a driver that lost it
publishes nothing more (``LeaseLost``), and each placement carries the lease's fencing token, so
one already on its way when the lease ran out is refused by the cluster's planner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec

from schemas.bundle import Bundle
from schemas.codec import encode
from schemas.fleet import Placement, RolloutEvent, RolloutState
from schemas.subjects import rollout_event_subject
from services.common import bus
from services.fleet.driver.views import FleetViews
from services.fleet.rollout import substitute
from services.fleet.rollout.steps import Place, Remove
from services.revisions.publish import load_manifests, publish_bundle

log = logging.getLogger("driftbus.fleet")
MANIFESTS_KEPT = 8


class Placer:
    """Carries out a rollout's placements and records its transitions (for the driver)."""

    def __init__(self, js: bus.JetStream, views: FleetViews, fence: Callable[[], int]) -> None:
        self.js = js
        self.fence = fence
        """The lease's fencing token, asked before every publish (raises ``LeaseLost``)."""
        self.views = views
        """Read for each cluster's labels (the registry) when a placement is substituted."""
        self.manifests: dict[str, list[Any]] = {}
        self.needed: dict[str, list[tuple[str, str]]] = {}

    async def perform(self, state: RolloutState, action: Place | Remove) -> None:
        cluster = action.cluster
        msg_id = f"fleet/{state.bundle}/{cluster}/{action.seq}"
        if isinstance(action, Remove):
            # a fleet published without prune prunes nothing when a cluster leaves either
            prune = state.target.options.prune and not action.orphan
            token = self.fence()
            await publish_bundle(
                self.js,
                cluster=cluster,
                bundle=state.bundle,
                revision=state.target.revision,
                manifests=[],
                options=msgspec.structs.replace(state.target.options, prune=prune),
                delete=True,
                fleet=True,
                published_at=action.at,
                msg_id=msg_id,
                source=f"fleet {state.bundle}: left the fleet",
                fencing_token=token,
                streams_known=True,
            )
            return
        placement = state.target if action.which == "target" else state.previous
        assert placement is not None
        rollback_of = state.target.revision if action.which == "previous" else ""
        common: dict[str, Any] = {
            "cluster": cluster,
            "bundle": state.bundle,
            "revision": placement.revision,
            "options": placement.options,
            "source": placement.source,
            "fleet": True,
            "published_at": action.at,
            "msg_id": msg_id,
            "rollback_of": rollback_of,
            # the planner beside the driver made the streams: no ten stream lookups per placement
            "streams_known": True,
        }
        if placement.substitute:
            record = self.views.registry.records.get(cluster)
            if record is None:  # removed meanwhile: the next tick takes it out of the fleet
                log.warning(
                    "rollout of %s: %s left the registry; not placed", state.bundle, cluster
                )
                return
            manifests = await self.load(state.bundle, placement)
            substituted = substitute.substitute(manifests, cluster, record.labels)
            await publish_bundle(
                self.js, manifests=substituted, fencing_token=self.fence(), **common
            )
        else:
            await publish_bundle(
                self.js,
                manifests=[],
                stored=placement.manifests_ref,
                kinds=placement.kinds,
                fencing_token=self.fence(),
                **common,
            )

    async def record(self, event: RolloutEvent) -> None:
        self.fence()
        await bus.publish(
            self.js,
            rollout_event_subject(event.bundle),
            encode(event),
            headers={"Nats-Msg-Id": f"rollout/{event.bundle}/{event.seq}"},
        )

    async def load(self, bundle: str, placement: Placement) -> list[Any]:
        """The placement's manifests (a few kept: substitution reads them per cluster)."""
        ref = placement.manifests_ref
        if ref is None:
            return []
        if ref.sha not in self.manifests:
            carrier = Bundle(
                cluster="fleet", bundle=bundle, revision=placement.revision, manifests_ref=ref
            )
            while len(self.manifests) >= MANIFESTS_KEPT:
                self.manifests.pop(next(iter(self.manifests)))
            self.manifests[ref.sha] = list(await load_manifests(self.js, carrier))
        return self.manifests[ref.sha]

    async def labels_needed(self, bundle: str, placement: Placement) -> list[tuple[str, str]]:
        """The label variables the placement's manifests name, read once per manifests."""
        ref = placement.manifests_ref
        key = ref.sha if ref is not None else ""
        if key not in self.needed:
            self.needed[key] = substitute.labels_named(await self.load(bundle, placement))
        return self.needed[key]
