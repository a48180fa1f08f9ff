"""The watcher: list+watch of driftbus-owned objects per kind, publishing serverSHA and health.

The only component that reads the cluster continuously (DESIGN §5).

- ``service`` — the process: one ``Watcher`` wired to NATS and the API server, its readiness,
  heartbeats and the cluster's entry in the fleet registry; ``settings`` its settings.
- ``watch`` — the ``Watcher``: one list+watch per kind, publishing only what changed, relisting
  on ``410 Gone``.
- ``facts`` — what it says about an object (pure): a server fact or a tombstone, only when new.
- ``bursts`` — watch events taken in bursts, and facts cut into messages by count and size:
  one ``ServerFacts`` per list page or burst (issue 44).
"""
