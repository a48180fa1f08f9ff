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
- ``windows`` — sync windows: when automated writes are allowed or denied; the windows file.
- ``window`` — one sync window: the bundles and clusters it names, and when it is open.

Reading as Kubernetes reads:

- ``kyaml`` — YAML to JSON exactly as Kubernetes reads it.
- ``selector`` — label selectors, label changes and cluster specs, as kubectl reads them.

Tenancy:

- ``tenancy`` — the tenant policy: the tenants file read, and what it allows a bundle.
- ``tenant_clusters`` — which clusters a tenant may use.
- ``tenant_rights`` — what a tenant may ask beyond its limits (``--override-window``, the
  platform's commit statuses on a repository), only if its policy grants it.
- ``tenant_rbac`` — the RBAC that lets the applier impersonate exactly a tenant's
  ServiceAccounts.
"""
