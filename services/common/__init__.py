"""What every process shares: its plumbing, and the bus.

- ``bus/`` — JetStream: streams, connection, publishing, following, KV buckets, the Object Store,
  facts published only if newer (DESIGN §12: no ``nats`` import outside it, by contract).

A process:

- ``settings`` — settings models: one declaration per setting gives its flag, environment
  variable, help and docs.
- ``logs`` — structured logs: one JSON object per line on stderr.
- ``telemetry`` — metrics, traces and the health endpoints.
- ``stalls`` — where the event loop is held: a thread names the code holding it
  (``DRIFTBUS_STALL_REPORT``).
- ``heap`` — freed heap memory handed back to the system after a burst of allocations.
- ``binaries`` — where the binaries driftbus runs are found (servers, kubectl, helm, sops).

What used to live here has a package of its own: ``services/inputs`` (reading manifests, OCI,
SOPS), ``services/access`` (permissions), ``services/revisions`` (publishing a bundle, following
its status), ``services/clusters`` (members), ``services/tenancy`` (the policy's store),
``services/kube`` (the Kubernetes client) and ``services/runtime`` (process start-up).
"""
