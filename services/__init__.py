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
- ``fleet/`` — fleet bundles: the rollout rule (``rollout/``, pure, with the rollout view the
  CLI and the page show) and the rollout driver (``driver/``, a peer service ``driftbus
  planner`` runs beside every planner replica) that places them cluster by cluster.
- ``cli/`` — the ``driftbus`` command line, ``driftbus up`` (the whole stack locally) included.
- ``ui/`` — the status page: a read-only web view of bundles and objects, fed from the bus.

The concepts they share, each in its own package:

- ``inputs/`` — reading what users publish: files, charts, kustomizations, Git, OCI, SOPS; it
  never touches the bus.
- ``revisions/`` — a bundle revision published on the bus, and its status followed.
- ``tenancy/`` — the tenant policy: what each tenant may write where, and its store.
- ``windows/`` — sync windows: when a bundle's writes may happen.
- ``clusters/`` — the cluster registry, label selectors, and who serves each cluster.
- ``access/`` — NATS permissions per role and the nats-server configuration granting them.
- ``stored/`` — settings kept on the bus (tenant policy, sync windows, notifications), one
  ``Document[T]`` for all: a file read and checked with FILE:LINE, stored, followed live.

The doors and the floor:

- ``common/`` — process plumbing (settings, logs, telemetry, binaries, heap) and ``bus/``, the
  one door to NATS.
- ``kube/`` — the one door to the Kubernetes API: a thin client on aiohttp.
- ``runtime`` — what every service process opens at start and closes at exit.
- ``core/`` (pure) — manifests, SHAs, health, scopes, YAML, hooks and diffs, and the lease rule.
- ``controlplane/`` — a local control plane built from pinned Go modules (etcd, kube-apiserver,
  nats-server, kubectl, helm), for ``driftbus up`` and the tests.

The wire contract they speak is the sibling package ``schemas``.
"""
