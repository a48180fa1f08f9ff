"""What the tenant policy grants tenants' bundles in ``driftbus notify``: the policy followed
live, and the messages refused for want of a right, counted and logged.

The platform's commit-status providers post with the platform's token; for a tenant's bundle the
repository comes from the bundle's ``source``, which its publisher writes. So such a status is
posted only on a repository the tenant's policy grants (``rights.commitStatusRepositories``;
``match.platform_token_refusal`` decides). An unusable policy grants nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Protocol

from opentelemetry.metrics import Counter

from schemas.notify import Provider
from schemas.tenants import TenantPolicy
from services.common import bus
from services.notify.events import Event
from services.tenancy import store as tenant_policy

log = logging.getLogger(__name__)
REMEMBERED: Final = 10_000
"""Refusals remembered so that each is logged once (forgotten all at once past this)."""


class Holder(Protocol):
    tenants: TenantPolicy | None


class Refusals:
    """Messages refused for want of a right: each counted (``verdict="refused"``), and logged
    once per provider, cluster, revision and reason (a status comes again on every change)."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter
        self._said: set[tuple[str, ...]] = set()

    def note(self, where: str, p: Provider, event: Event, why: str) -> None:
        self._counter.add(1, {"type": str(p.type), "verdict": "refused"})
        said = (where, event.cluster, event.revision, why)
        if said in self._said:
            return
        if len(self._said) >= REMEMBERED:
            self._said.clear()
        self._said.add(said)
        log.warning(
            "commit status refused: %s (%s provider %s, cluster %s)",
            why,
            p.type,
            where,
            event.cluster,
        )


async def follow_policy(js: bus.JetStream, holder: Holder, known: asyncio.Event) -> None:
    """Keep ``holder.tenants`` the tenant policy in force; ``known`` is set once it is read.
    No bucket yet (the planner makes it): no policy was ever applied, so the empty one, which
    grants nothing, is known at once, and the bucket is followed once it exists."""
    try:  # one look: there now or not
        await bus.wait_for_stream(js, bus.TENANTS_STREAM, asyncio.get_running_loop().time())
    except bus.BusError:  # not there (yet): nothing granted meanwhile
        holder.tenants = TenantPolicy()
        known.set()
        await bus.wait_for_stream(js, bus.TENANTS_STREAM)
    follower = bus.Follower(js, bus.TENANTS_STREAM, tenant_policy.POLICY_SUBJECT)
    if holder.tenants is None:
        holder.tenants = TenantPolicy()  # replaced by the stored one, if any, before ``known``
    watching = asyncio.create_task(_set_when(follower.caught_up, known))
    try:
        async for msg in follower.messages():
            try:
                holder.tenants = tenant_policy.policy_of(msg)
            except ValueError as exc:  # PolicyError: the closed side, nothing granted
                log.error("tenant policy unusable: no commit status for tenants' bundles: %s", exc)
                holder.tenants = None
    finally:
        watching.cancel()


async def _set_when(source: asyncio.Event, target: asyncio.Event) -> None:
    await source.wait()
    target.set()
