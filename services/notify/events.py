"""What the notify service sends about: one ``Event`` made from a message of the bus (pure).

- a bundle's status (``driftbus.status.<c>.<bundle>.bundle``): its phase, as ``Ready``,
  ``Failed`` (``Conflict`` too), ``Degraded``, ``PruneHeld`` (its deletions wait for someone
  to approve them: never Ready) or ``Progressing`` (``Reconciling``, ``OutOfSync``); a deleted
  bundle's is not sent;
- a planner decision (``driftbus.decision.…``): an apply because the live object drifted or was
  deleted by hand, ``DriftCorrected``; every other decision is not an event;
- a rollout transition (``driftbus.rollout.<tenant>.<name>``): ``RolloutStep``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Final

from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.fleet import RolloutEvent
from schemas.messages import BundlePhase, BundleStatus
from schemas.notify import EventKind
from schemas.subjects import split_bundle

_PHASES: Final = {
    BundlePhase.READY: EventKind.READY,
    BundlePhase.FAILED: EventKind.FAILED,
    BundlePhase.CONFLICT: EventKind.FAILED,
    BundlePhase.DEGRADED: EventKind.DEGRADED,
    BundlePhase.RECONCILING: EventKind.PROGRESSING,
    BundlePhase.OUT_OF_SYNC: EventKind.PROGRESSING,
    BundlePhase.PRUNE_HELD: EventKind.PRUNE_HELD,
}
_DRIFT: Final = (DecisionReason.DRIFT, DecisionReason.DELETED)
PHASE_KINDS: Final = frozenset(_PHASES.values())
"""Kinds that are a bundle's phase in a cluster: a repeat of the current one is no news."""


@dataclasses.dataclass(frozen=True)
class Event:
    """One thing worth telling, whatever provider it goes to."""

    kind: EventKind
    bundle: str
    """The bundle's full name (``TENANT/NAME``, or ``NAME`` for a platform bundle)."""
    revision: str
    cluster: str = ""
    """"" for a rollout's event: ``clusters`` names those it concerns."""
    clusters: tuple[str, ...] = ()
    detail: str = ""
    """The phase (``Conflict``), the reason (``drift``, ``deleted``) or the rollout's transition
    (``step 2``)."""
    message: str = ""
    object: str = ""
    """``Kind/ns/name`` of the object a drift correction wrote."""
    source: str = ""
    """Where the revision came from (``URL@commit``, for commit statuses)."""
    at: dt.datetime | None = None

    @property
    def tenant(self) -> str:
        return split_bundle(self.bundle)[0]

    @property
    def where(self) -> tuple[str, ...]:
        """The clusters the event concerns."""
        return (self.cluster,) if self.cluster else self.clusters

    def title(self) -> str:
        """One line, for chat messages and commit status descriptions."""
        place = f" in {self.cluster}" if self.cluster else ""
        rev = self.revision[:12]
        if self.kind is EventKind.DRIFT_CORRECTED:
            how = (
                "deleted by hand, re-created" if self.detail == "deleted" else "drifted, corrected"
            )
            return f"{self.object} of {self.bundle}{place}: {how}"
        if self.kind is EventKind.ROLLOUT_STEP:
            return f"rollout of {self.bundle} {rev}: {self.detail}"
        state = self.detail if self.detail and self.detail != self.kind else self.kind
        return f"{self.bundle} {rev}{place}: {state}"


def from_bundle_status(s: BundleStatus) -> Event | None:
    kind = _PHASES.get(s.phase)
    if kind is None:
        return None
    return Event(
        kind=kind,
        bundle=s.bundle,
        revision=s.revision,
        cluster=s.cluster,
        detail=str(s.phase),
        message=s.message or "; ".join(s.failed_objects[:3]),
        source=s.source,
        at=s.at,
    )


def from_decision(d: DecisionRecord) -> Event | None:
    if d.action is not DecisionAction.APPLY or d.reason not in _DRIFT:
        return None
    return Event(
        kind=EventKind.DRIFT_CORRECTED,
        bundle=d.bundle,
        revision=d.revision,
        cluster=d.cluster,
        detail=str(d.reason),
        object=str(d.key),
        at=d.at,
    )


def from_rollout(r: RolloutEvent) -> Event:
    detail = f"{r.event} {r.step}" if r.event == "step" else r.event
    return Event(
        kind=EventKind.ROLLOUT_STEP,
        bundle=r.bundle,
        revision=r.revision,
        clusters=tuple(r.clusters),
        detail=detail,
        message=r.message,
        at=r.at,
    )
