"""The rollout driver, a peer service run beside every planner replica (``driftbus planner``
runs both in one process; neither imports the other, by contract): the lease holder takes every
rollout a tick further.

- ``drive`` — the driver's loop: each tick written, then carried out.
- ``deciding`` — what a rollout's tick decides: its inputs gathered from the views, the
  steering requests applied, the pure rule asked.
- ``lease`` — its lease: one process at a time drives, and its fencing token on every placement.
- ``views`` — what it reads, followed live: fleet bundles, rollout states, bundle status, the
  registry, the tenant policy and the clusters of each tenant's NATS publisher.
- ``placing`` — what a tick asks for, done on the bus: place, remove, transitions logged.
- ``recovery`` — what a driver taking over must still publish.
"""
