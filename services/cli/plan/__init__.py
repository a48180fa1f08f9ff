"""``driftbus plan``: what a publish would do, and why, without writing anything — to one
cluster or to every cluster of a fleet (docs/plan.md).

- ``verdict`` — one cluster's rows from recorded state: the planner's rule and limits (pure).
- ``state`` — the recorded state read from the bus, one snapshot per stream for any number of
  clusters.
- ``explain`` — one cluster's plan, with the server's dry-run diff when asked.
- ``fleet`` — a fleet's plan: members, tenant refusals, steps, values, windows (pure).
- ``gather`` — what a fleet plan reads from the bus (the registry, policy, windows, rollout).
- ``render`` — one cluster's plan for machines and pull requests (pure).
- ``fleetview`` — a fleet's plan as a table, a typed document and a PR comment (pure).
- ``command``, ``fleetcmd`` — the command: its flags, connections and output.
"""
