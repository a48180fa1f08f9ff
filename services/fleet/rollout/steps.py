"""What the rollout rule reads and returns (pure): a cluster's observed status, the actions a
tick asks for, its events; and the steps of a rollout, each the set of clusters it holds."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from typing import Literal

from schemas.fleet import RolloutPhase, RolloutState
from schemas.messages import BundlePhase
from services.clusters.selector import SelectorError, parse_selector

FAILED_PHASES = frozenset((BundlePhase.FAILED, BundlePhase.DEGRADED, BundlePhase.CONFLICT))
"""A cluster whose status for the placement is one of these halts the rollout."""
ENDED = frozenset((RolloutPhase.COMPLETE, RolloutPhase.DELETED))
STEERABLE = (RolloutPhase.PROGRESSING, RolloutPhase.PAUSED)
"""A rollout that moves: what ``rollout pause``, ``resume`` and ``promote`` can steer."""


@dataclasses.dataclass(frozen=True)
class LeaveBudget:
    """How many clusters a membership change may prune a fleet bundle on at once (the planner
    settings ``fleet_prune_share`` and ``fleet_prune_min``): more waits for an approval."""

    share: float = 0.1
    at_least: int = 1
    settle: float = 0.0
    """Seconds: clusters leaving within this of each other are one change (``driftbus clusters
    label`` relabels one cluster at a time); their prune waits until none left for this long."""
    window: float = 600.0
    """Seconds: clusters pruned for leaving this recently count with those leaving now."""

    def exceeded(self, leaving: int, clusters: int) -> bool:
        """Whether pruning on ``leaving`` of the bundle's ``clusters`` at once is too much."""
        return leaving > self.at_least and leaving > self.share * clusters


DEFAULT_LEAVE_BUDGET = LeaveBudget()


@dataclasses.dataclass(frozen=True)
class Observed:
    """The last bundle status of the fleet bundle in one cluster (what the gate reads)."""

    revision: str
    phase: BundlePhase
    published_at: dt.datetime | None
    message: str = ""
    forbidden: bool = False
    """Objects of it are refused by the API server (403): never Ready, a failure for the gate."""
    window: str = ""
    """The sync window holding its writes there now (OutOfSync until it ends)."""


@dataclasses.dataclass(frozen=True)
class Place:
    """Put ``placement`` in force in ``cluster`` (an ordinary bundle message)."""

    cluster: str
    which: Literal["target", "previous"]
    seq: int
    at: dt.datetime


@dataclasses.dataclass(frozen=True)
class Remove:
    """Delete the bundle from ``cluster`` (pruned, or left in place with ``orphan``)."""

    cluster: str
    orphan: bool
    seq: int
    at: dt.datetime


Action = Place | Remove


@dataclasses.dataclass(frozen=True)
class Event:
    event: str
    clusters: tuple[str, ...] = ()
    message: str = ""
    phase: RolloutPhase | None = None
    """The rollout's phase right after this transition (a tick may make several)."""


@dataclasses.dataclass(frozen=True)
class Tick:
    state: RolloutState
    actions: tuple[Action, ...]
    events: tuple[Event, ...]

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.events)


class SpecError(ValueError):
    """A rollout step is neither a selector nor a percentage; the message names it."""


def check_steps(steps: Sequence[str]) -> None:
    """SpecError for a step that is neither ``N%`` (0 < N ≤ 100) nor a label selector."""
    for step in steps:
        if step.endswith("%"):
            try:
                pct = float(step[:-1])
            except ValueError:
                raise SpecError(f"rollout step {step!r}: not a percentage") from None
            if not 0 < pct <= 100:
                raise SpecError(f"rollout step {step!r}: a percentage is in (0, 100]")
            continue
        try:
            parse_selector(step)
        except SelectorError as exc:
            raise SpecError(f"rollout step {step!r}: {exc}") from None


def step_sets(steps: Sequence[str], members: Mapping[str, Mapping[str, str]]) -> list[set[str]]:
    """The clusters each step holds (cumulative: a step holds every earlier step's clusters);
    the last set is the whole fleet (the implicit last step). Percentages count clusters in
    name order, at least one when the fleet has any."""
    names = sorted(members)
    out: list[set[str]] = []
    held: set[str] = set()
    for step in steps:
        if step.endswith("%"):
            n = min(len(names), max(1, math.ceil(float(step[:-1]) / 100 * len(names))))
            held = held | set(names[:n])
        else:
            sel = parse_selector(step)
            held = held | {c for c in names if sel.matches(members[c])}
        out.append(held)
    out.append(set(names))
    return out
