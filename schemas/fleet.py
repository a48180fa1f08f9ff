"""Fleets (DESIGN §13): the cluster registry, the fleet bundle, and the rollout that places it.

* ``ClusterRecord`` — one entry per cluster in the KV bucket ``driftbus-clusters`` (key: the
  cluster's subject token). Written by a watcher when its cluster first registers (labels from
  ``--cluster-labels``), by ``driftbus clusters label`` (admin role) and deleted by ``driftbus
  clusters remove``. Who serves a cluster and when it was last seen come from the heartbeats
  (``MemberHeartbeat``), not from this entry: a quiet cluster's entry does not change.
* ``FleetBundle`` — one revision for every cluster its ``selector`` (or ``clusters``) names
  (user → ``driftbus.fleet.<tenant>.<name>``). Its manifests are stored once (Object Store); the
  rollout driver places the revision in each cluster as an ordinary ``Bundle`` that refers to
  them.
* ``RolloutState`` — where the rollout of a fleet bundle stands (KV bucket ``driftbus-rollouts``,
  key ``rollout.<tenant>.<name>``), written by the rollout driver only, with compare-and-set;
  ``RolloutEvent`` — each transition, appended to ``driftbus.rollout.<tenant>.<name>`` (the audit
  log of rollouts).
* ``RolloutControl`` — ``rollout pause``, ``resume`` or ``promote`` (admin →
  ``driftbus.rollout-control.<tenant>.<name>.<action>``), which the driver applies on its next
  tick.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from schemas.base import Message, Name, tag
from schemas.bundle import BundleOptions, ObjectStoreRef

LabelKey = Annotated[
    str,
    Meta(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=317,
        description="a Kubernetes label key: [prefix/]name",
    ),
]
LabelValue = Annotated[
    str,
    Meta(
        pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$",
        max_length=63,
        description="a Kubernetes label value (may be empty)",
    ),
]
ClusterName = Annotated[
    str,
    Meta(
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="a cluster's name in a fleet: a DNS label",
    ),
]
Seconds = Annotated[float, Meta(ge=0, le=30 * 86400)]
AwareTime = Annotated[dt.datetime, Meta(tz=True)]
"""A time with its zone: the driver subtracts these, and a naive one cannot be."""
OnFailure = Literal["halt", "rollback"]
OnLeave = Literal["prune", "orphan"]


class ClusterRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A registered cluster: its labels (what selectors match) and what its watcher reported."""

    name: Name
    labels: dict[LabelKey, LabelValue] = {}
    kube_version: str = ""
    """``gitVersion`` of the API server, as the watcher last registered it."""
    registered_at: dt.datetime | None = None
    registered_by: str = ""
    """The watcher replica that registered it, or ``cli``."""
    labelled_at: dt.datetime | None = None
    """When its labels last changed (``driftbus clusters label``)."""


class RolloutSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a revision reaches the fleet: ordered steps, each gated on the revision's Ready."""

    steps: Annotated[list[Annotated[str, Meta(max_length=1024)]], Meta(max_length=32)] = []
    """Label selectors within the fleet, or ``N%`` of its clusters (by name order); each step
    holds every cluster of the steps before it. The whole fleet is the implicit last step."""
    bake: Seconds = 0.0
    """Every cluster of a step is Ready on the revision for this long before the next starts."""
    max_unavailable: Annotated[int, Meta(ge=0, le=100_000)] = 0
    """At most this many clusters of a step are on their way to the revision at once (0: all)."""
    step_timeout: Seconds = 600.0
    """A step whose clusters are not all Ready on the revision by then halts the rollout."""
    on_failure: OnFailure = "halt"
    """``rollback``: a halted rollout puts the clusters already on the revision back on the one
    before it."""


class FleetBundle(Message, frozen=True, tag=tag("fleet-bundle")):
    """A revision for every cluster of a fleet (``driftbus publish --selector`` / ``--cluster``
    repeated)."""

    bundle: Name
    revision: Annotated[str, Meta(min_length=1, max_length=256)]
    selector: Annotated[str, Meta(max_length=4096)] = ""
    """Label selector over the registry (kubectl syntax); with ``clusters`` empty and the
    selector empty, every registered cluster."""
    clusters: Annotated[list[ClusterName], Meta(max_length=10_000)] = []
    """Named clusters (``--cluster`` repeated); both given: a cluster must satisfy both."""
    options: BundleOptions = BundleOptions()
    manifests_ref: ObjectStoreRef | None = None
    """The manifests, stored once for the whole fleet (None only with ``delete``)."""
    kinds: list[str] = []
    substitute: bool = False
    """Replace ``${cluster.name}`` and ``${cluster.labels.KEY}`` in every string of the
    manifests, per cluster; a cluster lacking a label it names is refused, named."""
    on_leave: OnLeave = "prune"
    """What a cluster that leaves the fleet (relabelled, removed) gets: its objects pruned with
    every prune safeguard, or left in place (``orphan``)."""
    rollout: RolloutSpec = RolloutSpec()
    published_at: dt.datetime | None = None
    source: str = ""
    delete: bool = False
    """Delete the fleet bundle from every cluster it reached (pruned, or orphaned by
    ``on_leave``)."""
    rollback_of: Annotated[str, Meta(max_length=256)] = ""
    """Set on a revision republished by ``driftbus rollout undo``: the revision it replaces."""


class RolloutPhase(enum.StrEnum):
    PROGRESSING = "Progressing"
    """Steps are being taken."""
    PAUSED = "Paused"
    """``rollout pause``: no step starts and no cluster gets the revision until resumed."""
    HALTED = "Halted"
    """A cluster of a step failed, or the step timed out: later steps never get the revision."""
    ROLLING_BACK = "RollingBack"
    """Halted, and the clusters already on the revision were given the previous one back: not
    an end, it waits until that revision is Ready again on each of them."""
    ROLLED_BACK = "RolledBack"
    """Halted, and the previous revision is Ready again on every cluster it went back to."""
    ROLLBACK_FAILED = "RollbackFailed"
    """Halted, and the previous revision did not become Ready again on some cluster it went
    back to (Failed there, or not Ready within the step timeout); the message names them."""
    COMPLETE = "Complete"
    """Every cluster of the fleet is on the revision (new members get it as they join)."""
    DELETED = "Deleted"
    """The fleet bundle was deleted from every cluster."""


class Placement(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """A revision as the driver places it in a cluster (kept in the state so a rollback never
    depends on the bundle stream's history)."""

    revision: str
    options: BundleOptions = BundleOptions()
    manifests_ref: ObjectStoreRef | None = None
    kinds: list[str] = []
    substitute: bool = False
    source: str = ""
    published_at: dt.datetime | None = None


ClusterStep = Literal["assigned", "ready", "failed", "refused", "removed"]
"""``removed``: the cluster left the fleet and the bundle was deleted there (kept so that a driver
taking over can finish a deletion its predecessor did not send)."""


class ClusterRollout(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """One cluster in a rollout: the revision placed there, and how it stands."""

    revision: str
    """The revision the driver placed in the cluster."""
    state: ClusterStep = "assigned"
    step: Annotated[int, Meta(ge=-1, le=64)] = 0
    """The step that placed it (-1: a member that joined outside the steps)."""
    at: AwareTime | None = None
    message: str = ""
    seq: Annotated[int, Meta(ge=0)] = 0
    """The placement's number (part of its message id, so a placement repeated after a driver
    was killed is deduplicated, and a later one is not)."""
    window: str = ""
    """The sync window holding the placement's writes in the cluster now ("" none)."""


class RolloutState(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    """Where a fleet bundle's rollout stands: the driver's whole memory, on the bus."""

    bundle: str
    target: Placement
    previous: Placement | None = None
    """The revision in force before ``target`` (what a rollback puts back)."""
    spec: RolloutSpec = RolloutSpec()
    selector: str = ""
    clusters_named: list[str] = []
    on_leave: OnLeave = "prune"
    tenant: str = ""
    phase: RolloutPhase = RolloutPhase.PROGRESSING
    step: Annotated[int, Meta(ge=0, le=64)] = 0
    """Index of the current step (``len(steps)`` is the implicit whole-fleet step)."""
    step_started_at: AwareTime | None = None
    held: list[str] = []
    """The clusters of the current step, chosen when it started (the last step's are always
    the whole fleet as it is)."""
    held_step: Annotated[int, Meta(ge=-1, le=64)] = -1
    """The step ``held`` was chosen for."""
    ready_since: AwareTime | None = None
    """When every cluster of the current step was first Ready on the target (the bake)."""
    clusters: dict[str, ClusterRollout] = {}
    excluded: dict[str, str] = {}
    """Clusters the selector names that the bundle may not reach, and why (tenant limits)."""
    paused: bool = False
    promote: bool = False
    """``rollout promote``: end the current step's bake now (cleared when the step moves)."""
    control_seq: Annotated[int, Meta(ge=0)] = 0
    """The stream sequence of the last ``RolloutControl`` the driver took (applied or refused):
    a driver taking over applies only later ones."""
    window_hold: str = ""
    """Sync windows hold writes in clusters of the current step (``"freeze" in prod-1``): the
    step's time stops, and starts again when they end ("" none)."""
    rollback: list[str] = []
    """The clusters a rollback put ``previous`` back on (RollingBack waits for each to be Ready
    on that placement)."""
    rollback_started_at: AwareTime | None = None
    """When that rollback's placements were made (its time runs for ``spec.step_timeout``)."""
    message: str = ""
    events: Annotated[int, Meta(ge=0)] = 0
    """Transitions recorded so far (the next ``RolloutEvent.seq``)."""
    placements: Annotated[int, Meta(ge=0)] = 0
    """Placements made so far (the next ``ClusterRollout.seq``)."""
    first_seq: Annotated[int, Meta(ge=0)] = 0
    """The first placement of this rollout: a cluster is on the target only through a placement
    numbered from here (an earlier placement of a revision of the same name does not count)."""
    source_seq: Annotated[int, Meta(ge=0)] = 0
    """The fleet stream's sequence of the ``FleetBundle`` this rollout places."""
    updated_at: AwareTime | None = None
    leave_held: list[str] = []
    """Clusters that left the fleet whose prune waits for ``driftbus approve``: more of them at
    once than the fleet prune budget lets through (docs/fleet.md). They keep what they have."""
    leave_approved: list[str] = []
    """Of those, the clusters an approval let through (pruned on the next tick)."""
    left_at: dict[str, AwareTime] = {}
    """Clusters that left the fleet and are not pruned yet, and when each was first seen gone:
    those leaving within the budget's ``settle`` of each other are one change."""
    recent: list[RolloutEvent] = []
    """The last transitions (at most 20), kept so a driver that takes over publishes those its
    predecessor recorded in the state but did not get into the log."""


class RolloutEvent(Message, frozen=True, tag=tag("rollout-event")):
    """One transition of a rollout: a decision record (``driftbus rollout history``, the page)."""

    bundle: str
    revision: str
    seq: int
    event: str
    """What happened: ``started``, ``step``, ``baked``, ``halted``, ``rolling-back``,
    ``rolled-back``, ``rollback-failed``, ``complete``, ``paused``, ``resumed``, ``promoted``,
    ``joined``, ``left``, ``refused``."""
    phase: RolloutPhase
    step: int
    clusters: list[str] = []
    """The clusters the transition concerns."""
    message: str = ""
    at: dt.datetime | None = None
    driver: str = ""


RolloutAction = Literal["pause", "resume", "promote", "approve"]


class RolloutControl(Message, frozen=True, tag=tag("rollout-control")):
    """``driftbus rollout pause|resume|promote``: a request the rollout driver applies on its next
    tick (admin → ``driftbus.rollout-control.<tenant>.<name>.<action>``; the stream keeps the last
    of each action, so a driver taking over applies what its predecessor had not, in order).
    Only a Progressing or Paused rollout is steered; a ``promote`` only of the revision it
    names (``pause`` holds across revisions, as kubectl's does)."""

    bundle: Name
    action: RolloutAction
    revision: Annotated[str, Meta(max_length=256)] = ""
    """The revision being rolled out when it was asked (the target the user saw)."""
    at: dt.datetime | None = None
    clusters: Annotated[list[str], Meta(max_length=10_000)] = []
    """Of an ``approve`` (``driftbus approve B``): the clusters whose prune, held by the fleet
    prune budget, it lets through — those the user saw held (``RolloutState.leave_held``)."""


class ClusterList(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus clusters -o json``."""

    clusters: list[ClusterView]


class ClusterView(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    labels: dict[str, str]
    kube_version: str
    watchers: list[str]
    appliers: list[str]
    last_seen: dt.datetime | None
    served: bool
    """A watcher and an applier heartbeat within the last 30 s."""


class FleetRow(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One cluster of a fleet bundle in ``driftbus status --bundle B -o json``."""

    cluster: str
    phase: str
    """The bundle's phase there (``BundlePhase``), ``Refused``, or ``NoStatus``."""
    revision: str
    """The revision the driver placed there ("" while it waits for its step)."""
    rollout: str
    """How the cluster stands in the rollout (``ClusterStep``), ``waiting`` for a later step, or
    ``prune-held``: it left the fleet and its prune waits for ``driftbus approve``."""
    step: int
    """The step (index from 0) that placed it, or that will; -1: joined outside the steps."""
    message: str = ""
    reported_revision: str = ""
    """The revision of the cluster's last bundle status ("" none)."""


class FleetStatus(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus status --bundle B -o json`` for a fleet bundle."""

    bundle: str
    revision: str
    """The revision being rolled out (the target)."""
    phase: RolloutPhase
    step: int
    """The current step, an index from 0 (``steps - 1`` is the implicit whole-fleet step)."""
    steps: int
    ready: int
    """Clusters Ready on ``revision``."""
    total: int
    """Clusters of the fleet (removed ones, and those whose prune is held after they left, not
    counted)."""
    clusters: list[FleetRow]
    excluded: dict[str, str] = {}
    """Clusters the selector names that the bundle may not reach, and why."""
    message: str = ""
    previous: str = ""
    """The revision in force before ``revision`` (what a rollback puts back)."""
    rollback: list[str] = []
    """The clusters a rollback put ``previous`` back on."""
    rollback_ready: int = 0
    """Of those, the clusters Ready again on ``previous``."""
    paused: bool = False
    promote: bool = False
    """``rollout promote`` asked, not yet acted on (the step is not Ready yet)."""
    updated_at: dt.datetime | None = None
    prune_held: list[str] = []
    """Clusters that left the fleet whose prune waits for ``driftbus approve`` (more left at
    once than the fleet prune budget lets through; docs/fleet.md)."""


class RolloutHistory(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``driftbus rollout history B -o json``: every transition on the bus, oldest first."""

    bundle: str
    events: list[RolloutEvent]
