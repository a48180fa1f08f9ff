"""driftbus: keeps Kubernetes clusters equal to published manifests; see docs/architecture.md.

The services, each a process of its own (``driftbus watcher|planner|applier|source``):

- ``watcher/`` — reads the cluster: list+watch of driftbus-owned objects, publishing serverSHA
  and health.
- ``planner/`` — the decision rule over the streams: apply and delete intents, bundle status.
- ``applier/`` — the only writer to the cluster: server-side apply of the intents.
- ``source/`` — follows Git repositories and publishes each new commit as a bundle.

Around them:

- ``notify/`` — ``driftbus notify``: status, decision and rollout events sent to webhooks, Slack,
  Teams and Git commit statuses, filtered, de-duplicated and rate limited (docs/notifications.md).
- ``fleet/`` — fleets: the cluster registry, fleet bundles, and the rollout driver (run in every
  planner replica) that places them cluster by cluster.
- ``cli/`` — the ``driftbus`` command line, ``driftbus up`` (the whole stack locally) included.
- ``ui/`` — the status page: a read-only web view of bundles and objects, fed from the bus.
- ``core/`` (pure) — manifests, SHAs, health, scopes, YAML, selectors and the tenant policy.
- ``common/`` — what the services share at their edges: the bus, the Kubernetes client, reading
  manifests, settings, telemetry, permissions, members and process start-up.
- ``controlplane/`` — a local control plane built from pinned Go modules (etcd, kube-apiserver,
  nats-server, kubectl, helm), for ``driftbus up`` and the tests.

The wire contract they speak is the sibling package ``schemas``.
"""
