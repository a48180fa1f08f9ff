"""Fleets (DESIGN §13, docs/fleet.md): a fleet bundle's revision placed in its clusters step by
step. The clusters themselves (registry, selectors, heartbeats) are ``services/clusters``.

- ``rollout/`` (pure, by contract) — the rollout rule: one tick from a rollout's state, the
  members and their status to the next state, its placements and transitions; the steps,
  substitution, a rollback's end, and the rollout view (``FleetStatus``) the CLI and the status
  page both render.
- ``driver/`` — the rollout driver, a peer service run beside every planner replica (``driftbus
  planner``): the lease holder takes every rollout a tick further.
- ``publish`` — publishing a fleet bundle revision (``publish_fleet``), for the CLI and sources.
- ``rollout_flags`` — the rollout flags, declared once for ``publish`` and ``source``.
"""
