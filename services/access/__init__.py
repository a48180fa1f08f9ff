"""Who may do what on the bus (docs/security.md): NATS permission sets per role and the
nats-server configuration granting them.

- ``permissions`` — the roles (watcher, planner, applier, publisher, …), their permission sets and
  the generated nats-server configuration.
- ``grants`` — the building blocks: subjects and API calls one right needs.
"""
