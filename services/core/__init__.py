"""The pure core: manifests, SHAs, health, scopes and YAML, with no I/O.

Objects and their hashes:

- ``manifest`` — desired manifests: the ownership label, validation, apply order.
- ``sha`` — raw object → pruned canonical bytes → SHA-256 (applySHA, serverSHA, manifestSHA).
- ``owned`` — a live object projected onto the fields driftbus owns (what the SHAs hash).
- ``ignore`` — ignored fields: what another controller manages, neither applied nor compared.
- ``adopt`` — objects made by kubectl adopted, so their fields become driftbus's.
- ``scope`` — which kinds are namespaced; a cluster-scoped manifest's stray namespace dropped.
- ``health`` — a live object's health from its status, in the style of kstatus.
- ``diff`` — field-level differences between two pruned objects (``driftbus plan``), masked.
- ``scrub`` — Secret values kept out of every message driftbus writes.
- ``hooks`` — Helm's and Argo CD's hooks and sync waves: each object's stage, delete policies.

Leases:

- ``lease`` — the lease rule the planners' claims and the rollout driver's lease follow: who is
  live, whose entry may be taken, how long a holder may act, what a lease entry names.

Work in steps:

- ``steps`` — a long pure computation as a generator of steps, and its value taken at once.

Reading as Kubernetes reads:

- ``kyaml`` — YAML to JSON exactly as Kubernetes reads it.

Sync windows, tenancy and selectors have packages of their own (``services/windows``,
``services/tenancy``, ``services/clusters``).
"""
