"""Fencing: an applier drops the intents of a planner replica that lost its claim on the cluster.

A planner's claim on a cluster is a KV entry; the revision its claim got travels in every intent
as ``fencing_token``. Revisions only grow, so once anything newer is known — a later claim or a
release read from the bucket, or an intent carrying a higher token — an intent with a lower
token comes from a deposed planner (paused, partitioned, or slow to notice) and must not reach
the cluster. The planner that took over re-sends whatever was still in flight.
"""

from __future__ import annotations

import dataclasses


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
