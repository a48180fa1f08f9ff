"""Each tenant's share of the notify service's egress: its own connections and queue.

One tenant's webhooks at a receiver that accepts and never answers (a tarpit) must not hold
every connection the service has, nor fill every queue, while the other tenants' messages time
out waiting behind them and are dropped after their retries. So every tenant sends through its
own connection pool, at most ``connections`` requests open at once (the others wait for one of
its own connections, not anyone else's), and has at most ``queued`` messages waiting in all its
outboxes together (a message beyond that is dropped, and the log says whose). The platform's own
configuration has a share of its own, so no tenant delays the platform's alerts either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp

log = logging.getLogger(__name__)


class Share:
    """One tenant's (or the platform's, ``who`` "") session and count of queued messages."""

    def __init__(self, who: str, session: aiohttp.ClientSession, queued: int) -> None:
        self.who = who
        self.session = session
        self.limit = queued
        self.waiting = 0

    def take(self) -> bool:
        """Count one more message waiting; False (nothing counted) when the share is full."""
        if self.waiting >= self.limit:
            return False
        self.waiting += 1
        return True

    def give(self, n: int = 1) -> None:
        """``n`` messages waiting no more (sent, refused, or dropped with their outbox)."""
        self.waiting = max(0, self.waiting - n)


class Shares:
    """The platform's share and each tenant's, a tenant's made when it first sends."""

    def __init__(
        self,
        platform: aiohttp.ClientSession,
        tenant_session: Callable[[], aiohttp.ClientSession],
        *,
        tenant_queued: int = 1000,
        platform_queued: int = 10_000,
        owned: bool = True,
    ) -> None:
        self._owned = owned  # whether the tenants' sessions are this object's to close
        self._platform = Share("", platform, platform_queued)
        self._make = tenant_session
        self._tenant_queued = tenant_queued
        self._tenants: dict[str, Share] = {}

    def of(self, tenant: str) -> Share:
        if not tenant:
            return self._platform
        share = self._tenants.get(tenant)
        if share is None:
            share = self._tenants[tenant] = Share(tenant, self._make(), self._tenant_queued)
        return share

    async def close(self) -> None:
        """Close the tenants' sessions (the platform's belongs to whoever made it)."""
        if not self._owned:
            return
        sessions = {id(s.session): s.session for s in self._tenants.values()}
        for session in sessions.values():
            await session.close()
        self._tenants.clear()
