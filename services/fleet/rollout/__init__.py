"""The rollout rule (pure, by contract; DESIGN §13, docs/fleet.md).

- ``engine`` — one tick (``advance``): from a rollout's state, the members and their status, the
  next state, the placements to make and the transitions to record.
- ``tick`` — the rules of one tick (``OpenTick``), one per row of the state table.
- ``leave`` — a cluster leaving the fleet: the bundle deleted there, unless more leave at once
  than the fleet prune budget lets through (then ``driftbus approve``).
- ``rollback`` — a rollback's end: RolledBack once the previous revision is Ready again on every
  cluster it went back to, else RollbackFailed, naming them.
- ``steps`` — what the rule reads and returns (observed status, actions, events), and a
  rollout's steps.
- ``substitute`` — ``${cluster.name}`` and ``${cluster.labels.KEY}`` replaced per cluster.
- ``steer`` — ``rollout pause``, ``resume`` and ``promote`` requests applied to a rollout's
  state (the driver's, at the start of a tick).
- ``view`` — the rollout view (``FleetStatus``): a row per cluster, what ``driftbus rollout
  status`` and the status page both show.
"""
