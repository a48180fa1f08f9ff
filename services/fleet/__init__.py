"""Fleets (DESIGN §13, docs/fleet.md): the cluster registry, fleet bundles, and the rollout driver
that places a fleet bundle's revision in its clusters step by step.

The rollout rule (pure):

- ``rollout`` — one tick (``advance``): from a rollout's state, the members and their status,
  the next state, the placements to make and the transitions to record.
- ``tick`` — the rules of one tick (``OpenTick``), one per row of the state table.
- ``rollback`` — a rollback's end: RolledBack once the previous revision is Ready again on
  every cluster it went back to, else RollbackFailed, naming them.
- ``steps`` — what the rule reads and returns (observed status, actions, events), and a
  rollout's steps.
- ``substitute`` — ``${cluster.name}`` and ``${cluster.labels.KEY}`` replaced per cluster.

The driver (run in every planner replica):

- ``driver`` — the lease holder takes every rollout a tick further.
- ``lease`` — its lease: one process at a time drives, and its fencing token on every placement.
- ``views`` — what it reads, followed live: fleet bundles, rollout states, bundle status, the
  registry, the tenant policy and the clusters of each tenant's NATS publisher.
- ``placing`` — what a tick asks for, done on the bus: place, remove, transitions logged.
- ``recovery`` — what a driver taking over must still publish.

For everyone:

- ``registry`` — the cluster registry: one ``ClusterRecord`` per cluster, and a live view of it.
- ``publish`` — publishing a fleet bundle revision (``publish_fleet``).
- ``rollout_flags`` — the rollout flags, declared once for ``publish`` and ``source``.
"""
