"""The planner's settings: one declaration per setting (flag, env var, help, docs)."""

from __future__ import annotations

import dataclasses

from services.common import bus, telemetry
from services.common.settings import setting


@dataclasses.dataclass(frozen=True)
class PlannerSettings(telemetry.TelemetrySettings, bus.NatsSettings):
    planner_id: str = setting(
        "", "name of this replica in intents and decisions (default: <hostname>-<pid>)"
    )
    status_interval: float = setting(
        0.2, "seconds between bundle status recomputations; changes are coalesced within it"
    )
    stats_interval: float = setting(
        30.0, "seconds between log lines with hit/miss counts by reason (only when changed)"
    )
    stream_replicas: int = setting(1, "replicas of the JetStream streams (3 on a NATS cluster)")
    heartbeat_interval: float = setting(
        2.0, "seconds between this replica's heartbeats (and claim rounds) in the shards bucket"
    )
    heartbeat_timeout: float = setting(
        10.0,
        "seconds without a heartbeat after which a replica counts as dead and others take its "
        "clusters over (at least twice the interval)",
    )
    intent_timeout: float = setting(
        60.0,
        "seconds an intent may go without any word (applied, failed, still waiting) while no "
        "longer queued before the planner sends it again: nothing stays lost",
    )
    members_interval: float = setting(
        5.0,
        "seconds between looks at every cluster's watcher/applier heartbeats for those gone "
        "stale (a new heartbeat is taken in as it comes; prune waits for the watcher's initial "
        "lists; a cluster nobody serves is named in the bundle status)",
    )
    batch_intents: int = setting(
        32,
        "most apply intents one NATS message carries (those decided within 5 ms of each other, "
        "for objects with nothing in flight); 1 sends every intent alone, as before issue 44",
    )
    checkpoint_interval: float = setting(
        10.0,
        "seconds after the facts of a burst are folded before the cluster's checkpoint is "
        "written (longer for a big cluster: 1 s per 100 kB of it); 0: no checkpoints "
        "(driftbus plan then reads every object's facts, and SERVER keeps every batch of "
        "facts)",
    )
    checkpoint_purge_after: float = setting(
        60.0,
        "seconds a checkpoint is kept before the SERVER batches it covers are purged (a reader "
        "that took the checkpoint before has that long to read the facts after it)",
    )
    prune_budget_share: float = setting(
        0.5,
        "a revision deleting more than this share of a bundle's objects on a cluster at once "
        "is held (PruneHeld) until approved (driftbus approve, publish --allow-prune)",
    )
    prune_budget_min: int = setting(
        5,
        "a revision deleting at most this many objects of a bundle on a cluster is never held "
        "for its share (a Namespace or CRD deletion always is)",
    )
    fleet_prune_share: float = setting(
        0.1,
        "a fleet membership change (relabel, removal) pruning a fleet bundle on more than this "
        "share of its clusters at once waits for driftbus approve",
    )
    fleet_prune_min: int = setting(
        1,
        "a fleet membership change pruning a fleet bundle on at most this many clusters at "
        "once never waits for approval",
    )
    fleet_prune_settle: float = setting(
        5.0,
        "seconds: clusters leaving a fleet within this of each other are one membership change "
        "(their prune waits until none left for this long)",
    )
    fleet_prune_window: float = setting(
        600.0,
        "seconds: clusters pruned for leaving a fleet this recently count with those leaving "
        "now against the fleet prune budget",
    )
