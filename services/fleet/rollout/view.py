"""The rollout view (pure): where a fleet bundle's rollout stands, a row per cluster. It is the
one answer ``driftbus status --bundle B``, ``driftbus rollout status`` and the status page's
fleet view all render, so they cannot disagree.

A row is a cluster the rollout placed or will place: the fleet's members (selector and names;
those the tenant's limits exclude are listed apart, in ``excluded``) and every cluster the
rollout placed. A member the rollout has not reached with its target yet — no placement, or a
placement of an earlier revision while the rollout moves — is ``waiting``, with the step that
reaches it. The steps hold what the driver's do: the members it may reach (``step_sets``); a
step that is no selector (the driver halts the rollout on it) holds none, so every member
waits for the last step, the whole fleet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Protocol

from schemas.fleet import FleetRow, FleetStatus, RolloutState
from services.clusters.selector import SelectorError
from services.fleet.rollout.steps import STEERABLE, step_sets

WAITING = "waiting"
"""A member's place in the rollout before the rollout reaches it with its target."""
PRUNE_HELD = "prune-held"
"""A cluster that left the fleet whose prune waits for an approval (``leave_held``)."""


class Reported(Protocol):
    """A cluster's last status of the bundle, as the view reads it (a ``BundleStatus``)."""

    @property
    def phase(self) -> str: ...
    @property
    def revision(self) -> str: ...
    @property
    def message(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Seen:
    """A ``Reported`` status made from what the status page holds (plain JSON)."""

    phase: str
    revision: str
    message: str = ""

    @classmethod
    def of(cls, status: Mapping[str, object]) -> Seen:
        return cls(
            str(status.get("phase", "")),
            str(status.get("revision", "")),
            str(status.get("message", "") or ""),
        )


def step_clusters(state: RolloutState, members: Mapping[str, Mapping[str, str]]) -> list[set[str]]:
    """The clusters each step holds (the last: the whole fleet), of the members the tenant may
    use; a step that is no selector holds none."""
    eligible = {c: labels for c, labels in members.items() if c not in state.excluded}
    try:
        return step_sets(state.spec.steps, eligible)
    except SelectorError:
        return [set() for _ in state.spec.steps] + [set(eligible)]


def fleet_status(
    state: RolloutState,
    members: Mapping[str, Mapping[str, str]],
    statuses: Mapping[str, Reported],
) -> FleetStatus:
    """The rollout's view: ``members`` are the fleet's clusters and labels (selector and names,
    tenant limits not yet applied), ``statuses`` each cluster's last status of the bundle."""
    sets = step_clusters(state, members)
    eligible = set(members) - set(state.excluded)
    moving = state.phase in STEERABLE
    rows = []
    for cluster in sorted(state.clusters.keys() | eligible):
        entry = state.clusters.get(cluster)
        seen = statuses.get(cluster)
        later = next((i for i, held in enumerate(sets) if cluster in held), len(sets) - 1)
        if entry is None:
            revision, rollout, step, message = "", WAITING, later, ""
        else:
            on_target = entry.revision == state.target.revision and entry.seq >= state.first_seq
            waiting = moving and not on_target and entry.state not in ("removed", "refused")
            revision, message = entry.revision, entry.message
            rollout = WAITING if waiting else entry.state
            step = later if waiting else entry.step
            if cluster in state.leave_held:
                rollout = PRUNE_HELD
                message = f"left the fleet: its prune waits for driftbus approve {state.bundle}"
        if entry is not None and entry.state == "refused":
            phase = "Refused"
        elif seen is None:
            phase = "NoStatus"
        else:
            phase = str(seen.phase)
        if not message and seen is not None and seen.revision == revision:
            message = seen.message
        rows.append(
            FleetRow(
                cluster=cluster,
                phase=phase,
                revision=revision,
                rollout=rollout,
                step=step,
                message=message,
                reported_revision=seen.revision if seen is not None else "",
            )
        )
    prev = state.previous.revision if state.previous is not None else ""
    back = [r for r in rows if r.cluster in state.rollback]
    return FleetStatus(
        bundle=state.bundle,
        revision=state.target.revision,
        phase=state.phase,
        step=state.step,
        steps=len(state.spec.steps) + 1,
        ready=sum(1 for r in rows if r.rollout == "ready" and r.revision == state.target.revision),
        total=sum(1 for r in rows if r.rollout not in ("removed", PRUNE_HELD)),
        clusters=rows,
        excluded=dict(state.excluded),
        message=state.message,
        previous=prev,
        rollback=list(state.rollback),
        rollback_ready=sum(r.rollout == "ready" and r.revision == prev for r in back),
        paused=state.paused,
        promote=state.promote,
        updated_at=state.updated_at,
        prune_held=list(state.leave_held),
    )
