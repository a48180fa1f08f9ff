"""Notifications: ``driftbus notify`` tells chat, webhooks and Git hosts what happened on the bus
(docs/notifications.md).

- ``service`` — the process: follows the configurations, then the three streams.
- ``consume`` — each stream through a durable consumer the replicas share (what was published
  while the service was down is sent when it is back; two replicas send each message once),
  decided by a view of the whole stream every replica reads.
- ``notifier`` — the configurations in force: an event matched, gated, rendered and queued.
- ``config`` (pure) — a notifications file read and checked, a tenant's reach refused beyond
  its own bundles; the bucket's keys (``platform``, ``tenant.<tenant>``).
- ``store`` — the configurations on the bus (each a ``services.stored`` document in its
  bucket): put, read, remove, and the keys of its stream.
- ``events`` (pure) — an ``Event`` made from a bundle status, a decision or a rollout
  transition.
- ``match`` (pure) — which providers an event goes to: alert filters, the tenant's scope, and
  the rights a platform commit status for a tenant's bundle needs.
- ``rights`` — the tenant policy followed (what it grants tenants' bundles), and the messages
  refused for want of a right, counted and logged once.
- ``gate`` (pure) — de-duplication and rate limits: send, or why not.
- ``render`` (pure) — the HTTP request each provider documents (webhook signed with
  HMAC-SHA256, Slack, Teams, GitHub and GitLab commit statuses).
- ``egress`` — where a tenant's requests may go: public addresses and the platform's
  allowance, checked on the addresses connected to (server-side request forgery refused).
- ``send`` — secrets read from their files, a POST with retries and backoff, an outbox per
  provider.
- ``shares`` — each tenant's own connections and queue (the platform's too): one tenant's slow
  receivers never hold up another's notifications.
"""
