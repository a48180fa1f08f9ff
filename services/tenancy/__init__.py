"""Tenants (docs/tenancy.md): who may write what where.

Pure, by contract (no I/O):

- ``policy`` — the tenant policy: what it allows a bundle.
- ``document`` — the tenants file read and checked (``FILE:LINE``, in words), the stored policy
  read back: the policy as a ``services.stored`` document.
- ``clusters`` — which clusters a tenant may use.
- ``rights`` — what a tenant may ask beyond its limits (``--override-window``, the platform's
  commit statuses on a repository), only if its policy grants it.
- ``rbac`` — the RBAC that lets the applier impersonate exactly a tenant's ServiceAccounts.

On the bus:

- ``store`` — the policy in its KV bucket, followed live by every planner.
"""
