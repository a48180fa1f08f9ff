"""Fencing: an applier drops the intents of a planner replica that lost its claim on the cluster.

A planner's claim on a cluster is a KV entry; the revision its claim got travels in every intent
as ``fencing_token``. Revisions only grow, so once anything newer is known — a later claim or a
release read from the bucket, or an intent carrying a higher token — an intent with a lower
token comes from a deposed planner (paused, partitioned, or slow to notice) and must not reach
the cluster. The planner that took over re-sends whatever was still in flight. The fence is read
before the first intent is taken, again as soon as the claim is written (a subscription on its
subject), and every ``fence_refresh`` seconds for a write made while the connection was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from services.common import bus

log = logging.getLogger("driftbus.applier")


@dataclasses.dataclass
class Fence:
    token: int = 0
    """The highest claim revision known for the cluster."""

    def admits(self, token: int) -> bool:
        """Whether an intent with ``token`` may be carried out (and remember it if higher)."""
        if token < self.token:
            return False
        self.token = token
        return True

    def raise_to(self, token: int | None) -> None:
        """The claim entry was read: its revision is the newest token anyone may hold."""
        if token is not None and token > self.token:
            self.token = token


async def read_claim(fence: Fence, js: bus.JetStream, cluster: str, *, max_backoff: float) -> None:
    """The cluster's planner claim before the first intent is taken (a deposed planner's
    late intents are refused from the start). A slow or absent NATS is waited out: an
    applier that exits over one timed-out request would lose the work it could do."""
    delay = 0.2
    while True:
        try:
            fence.raise_to(await bus.claim_revision(js, cluster))
            return
        except (bus.NatsError, TimeoutError) as exc:
            log.warning("reading the planner claim failed (%s); retrying in %.1fs", exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, max_backoff)


async def follow_claims(
    fence: Fence, js: bus.JetStream, nc: bus.Connection, cluster: str, *, every: float
) -> None:
    """Raise the fence to every newer claim (or release) of the cluster as it is written, so a
    deposed planner's intents are dropped even before the new one's arrive. A quiet cluster
    costs one read every ``every`` seconds: the safety net for a write this replica could not
    see (its connection was down), not the way changes arrive."""
    written = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        try:
            await stack.enter_async_context(bus.on_claim_change(nc, cluster, written.set))
        except Exception as exc:  # noqa: BLE001 - the reads on the timer still fence
            log.warning(
                "following the planner claim of %s as it is written failed: %s", cluster, exc
            )
        while True:
            written.clear()  # before the read: a write during it reads again
            with contextlib.suppress(Exception):  # NATS away: the intents' own tokens count
                fence.raise_to(await bus.claim_revision(js, cluster))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(written.wait(), every)
