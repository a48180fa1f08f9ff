"""What one rollout's tick decides (the driver's, for the lease holder): the rollout's inputs
gathered from the driver's views — the fleet bundle's revision, its members with the tenant's
limits and credentials applied, substitutions a cluster cannot take, each cluster's status — and
the pure rule asked (``services.fleet.rollout``). The ``rollout pause``, ``resume`` and
``promote`` requests that came since the last tick are applied to the state first
(``steer``): the driver is the only writer of a rollout's state.

A fleet revision no one can read (from a publisher that did not check it) is refused: nothing
placed or removed, the refusal recorded. What the tick decides is written and carried out by
the driver's loop (``drive``).
"""

from __future__ import annotations

import datetime as dt
import logging

import msgspec

from schemas.fleet import FleetBundle, Placement, RolloutPhase, RolloutSpec, RolloutState
from schemas.subjects import split_bundle
from services.clusters.registry import members
from services.clusters.selector import SelectorError
from services.fleet.driver.placing import Placer
from services.fleet.driver.views import FleetViews, Stored
from services.fleet.publish import FleetError, check
from services.fleet.rollout import engine as rollout
from services.fleet.rollout import substitute
from services.fleet.rollout.steer import steer
from services.fleet.rollout.steps import DEFAULT_LEAVE_BUDGET, Event, LeaveBudget, Tick
from services.tenancy.clusters import cluster_refusal, credentials_refusal

log = logging.getLogger("driftbus.fleet")


class Decider:
    """Decides each rollout's tick from the driver's views (``placer``: the labels a
    substituted revision needs, read from its stored manifests)."""

    def __init__(
        self, views: FleetViews, placer: Placer, leave_budget: LeaveBudget = DEFAULT_LEAVE_BUDGET
    ) -> None:
        self.views = views
        self.placer = placer
        self.leave_budget = leave_budget
        """How many clusters may leave a fleet at once before their prune waits (settings)."""

    async def decide(
        self, bundle: str, seq: int, fb: FleetBundle, stored: Stored | None, now: dt.datetime
    ) -> Tick | None:
        read = state = stored.state if stored is not None else None
        if state is not None:
            state = self._steered(bundle, state)
        if state is None or seq > state.source_seq:
            if fb.delete:
                if state is None:
                    return None
                # deleting prunes, unless the deletion says to leave the objects
                orphan = fb.on_leave == "orphan" or not fb.options.prune
                t = rollout.delete(state, now, orphan=orphan)
                return Tick(msgspec.structs.replace(t.state, source_seq=seq), t.actions, t.events)
            tenant, _ = split_bundle(bundle)
            try:
                check(fb.selector, fb.clusters, fb.rollout)
            except FleetError as exc:
                return _refused(bundle, seq, fb, state, now, str(exc))
            state, started = rollout.start(
                bundle=bundle,
                target=_placement(fb),
                spec=fb.rollout,
                selector=fb.selector,
                clusters_named=fb.clusters,
                on_leave=fb.on_leave,
                tenant=tenant,
                source_seq=seq,
                now=now,
                before=state,
            )
            if read is None:  # a request older than the rollout was refused by the CLI
                taken = (s for s, _ in self.views.controls.get(bundle, {}).values())
                state = msgspec.structs.replace(state, control_seq=max(taken, default=0))
            t = await self._advance(state, now)
            return Tick(t.state, t.actions, (started, *t.events))
        if state.phase is RolloutPhase.DELETED:  # a steering request taken is still written
            return Tick(state, (), ()) if state != read else None
        t = await self._advance(state, now)
        return t if (t.changed or t.state != read) else None

    async def _advance(self, state: RolloutState, now: dt.datetime) -> Tick:
        try:
            fleet = members(self.views.registry.records, state.selector, state.clusters_named)
        except SelectorError as exc:
            # never read as "no members" (that would prune every cluster): nothing changes
            log.error("fleet bundle %s: its selector cannot be read: %s", state.bundle, exc)
            return Tick(state, (), ())
        excluded = {}
        for cluster, labels in list(fleet.items()):
            # the policy's limits, and the tenant's own NATS credentials: the driver publishes
            # for every tenant, so it must not reach a cluster the tenant could not itself
            why = cluster_refusal(
                self.views.policy, state.tenant, cluster, labels
            ) or credentials_refusal(self.views.credentials, state.tenant, cluster)
            if why is not None:
                excluded[cluster] = why
                del fleet[cluster]
        refusals: dict[str, str] = {}
        if state.target.substitute:
            needed = await self.placer.labels_needed(state.bundle, state.target)
            for cluster, labels in fleet.items():
                lacking = [v for v, key in needed if key not in labels]
                if lacking:
                    refusals[cluster] = substitute.lacking(cluster, lacking)
        registry = self.views.registry
        # only a removal recorded in the registry, or labels that no longer match, take a
        # cluster out; one the registry cannot say anything about (unreadable, or a bucket
        # lost) keeps what it has
        unknown = {
            c
            for c in state.clusters
            if c not in fleet
            and c not in excluded
            and (
                c in registry.unreadable
                or (c not in registry.records and c not in registry.removed)
            )
        }
        observed = self.views.statuses.get(state.bundle, {})
        return rollout.advance(
            state,
            fleet,
            observed,
            now,
            refusals=refusals,
            excluded=excluded,
            unknown=unknown,
            leave_budget=self.leave_budget,
        )

    def _steered(self, bundle: str, state: RolloutState) -> RolloutState:
        """``state`` with the steering requests not taken yet applied (refusals logged)."""
        state, refused = steer(state, self.views.controls.get(bundle, {}).values())
        for why in refused:
            log.warning("rollout of %s: %s", bundle, why)
        return state


def _refused(
    bundle: str,
    seq: int,
    fb: FleetBundle,
    state: RolloutState | None,
    now: dt.datetime,
    why: str,
) -> Tick:
    """A fleet revision that cannot be rolled out (a selector or step no one can read, from a
    publisher that did not check): nothing placed or removed, the revision in force stays, and
    the refusal is recorded."""
    message = f"revision {fb.revision} refused: {why}"
    if state is None:
        state, _ = rollout.start(
            bundle=bundle,
            target=_placement(fb),
            spec=RolloutSpec(),
            selector="",
            clusters_named=[],
            on_leave=fb.on_leave,
            tenant=split_bundle(bundle)[0],
            source_seq=seq,
            now=now,
            before=None,
        )
        state = msgspec.structs.replace(state, phase=RolloutPhase.HALTED)
    state = msgspec.structs.replace(state, source_seq=seq, message=message, updated_at=now)
    return Tick(state, (), (Event("revision-refused", (), message),))


def _placement(fb: FleetBundle) -> Placement:
    """The revision as the driver places it: every field of it is the fleet bundle's."""
    return Placement(**{f: getattr(fb, f) for f in Placement.__struct_fields__})
