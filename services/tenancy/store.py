"""The tenant policy on the bus: stored in the tenants KV bucket by ``driftbus tenants apply``,
read by ``driftbus tenants`` and ``plan``, followed live by every planner (docs/tenancy.md).

The policy is state on the bus, not a file each process reads, so a change reaches every planner
at once and needs no restart; the bucket keeps the last ten policies for an audit.

Beside it (key ``credentials``) the admin records the clusters each tenant's NATS publisher may
publish to (``driftbus nats-config --tenant … --record``): the rollout driver, which publishes
for every tenant, holds a tenant's fleet placements to them.
"""

from __future__ import annotations

from typing import Final

import msgspec

from schemas.tenants import TenantCredentials, TenantPolicy
from services.common import bus
from services.stored.bucket import Kept, removed
from services.tenancy.document import TENANTS

STORED: Final = Kept(
    TENANTS,
    bucket=bus.TENANTS_BUCKET,
    key=bus.TENANTS_KEY,
    ensure=bus.ensure_tenants_bucket,
)
"""The policy in its bucket."""
POLICY_SUBJECT = STORED.subject
"""The subject the policy's KV entry is stored under (what a planner follows)."""
CREDENTIALS_KEY = "credentials"
"""The key of the tenants' NATS cluster lists (``TenantCredentials``), beside the policy."""
CREDENTIALS_SUBJECT = f"$KV.{bus.TENANTS_BUCKET}.{CREDENTIALS_KEY}"


async def read_policy(js: bus.JetStream) -> TenantPolicy:
    """The policy in force; the empty policy (no tenants, no lockdown) when none was applied.
    ``Unreadable`` when the bus does not say (a refused read times out in nats-py)."""
    return await STORED.read(js)


async def put_policy(js: bus.JetStream, policy: TenantPolicy) -> int:
    """Store ``policy`` as the one in force; returns its revision (the KV sequence)."""
    return await STORED.put(js, policy)


def policy_of(msg: bus.Message) -> TenantPolicy:
    """The policy a message of the bucket's stream carries (a deleted entry: the empty one).
    Raises ``PolicyError`` (a ValueError) for a stored policy that is not one: the policy
    fails closed, never back to a previous, perhaps wider, one."""
    return STORED.value_of(msg)


async def put_credentials(js: bus.JetStream, credentials: TenantCredentials) -> int:
    """Record the clusters of each tenant's NATS publisher (``nats-config --record``, the
    admin); returns the revision."""
    await bus.ensure_tenants_bucket(js)
    return await bus.kv_put(
        js, bus.TENANTS_BUCKET, CREDENTIALS_KEY, msgspec.json.encode(credentials)
    )


def credentials_of(msg: bus.Message) -> TenantCredentials | None:
    """The tenants' NATS cluster lists a message of the bucket's stream carries (None: the
    record was deleted). Raises ``msgspec.ValidationError``/``DecodeError`` for one that is
    not such a record."""
    if removed(msg):
        return None
    return msgspec.json.decode(msg.data or b"", type=TenantCredentials)
