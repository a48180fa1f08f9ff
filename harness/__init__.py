"""The test and benchmark harness (not shipped: the wheel holds ``services`` and ``schemas``).

- ``pipeline`` — the real pipeline on the local control plane: services as ``driftbus``
  subprocesses (a nats-server of its own per test), bundles, status, API write counts.
- ``fleet`` — several clusters on one bus: an etcd + kube-apiserver pair, a watcher and an
  applier pool per cluster, and any number of planner replicas.
- ``warm`` — the services a test starts, forked from a server per test process that imported
  driftbus once, instead of each paying a cold interpreter's imports.
- ``webhook`` — a real validating admission webhook (HTTPS, its own CA) served from the test or
  bench process, answering as the test switches it: allow, error or deny, after a delay.
"""
