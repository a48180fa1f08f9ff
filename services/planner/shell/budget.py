"""How much a replica takes on at once: rebuilding, counted in messages replayed and in
clusters (``WorkBudget``), and events waiting in its clusters' queues (``Backlog``).

Hundreds of clusters claimed together would all replay their streams at the same moment and
starve the replica's own heartbeats (it would then fence itself and drop them all). A fixed
number of clusters at a time (issue 31's eight) bounds that, but makes a big cluster's replay
as cheap to admit as an empty one's. The bound here is the work, and the clusters: a cluster's
replay takes as many units as the messages its streams keep for it (known from one request per
stream before any consumer exists), one larger than the whole budget still goes, alone; and at
most ``AT_ONCE`` clusters replay and go live together, since going live (each desired object
decided once, its messages sent) is the other half of the work and is not known in advance.
"""

from __future__ import annotations

import asyncio

REPLAY_BUDGET = 50_000
"""Messages of replays in progress at once in one replica (about a second of the planner's
folding, and a few MiB of buffered messages)."""
AT_ONCE = 32
"""Clusters replaying or going live at once in one replica: each is a burst of work on the one
event loop, and the replica's heartbeats must still go out between them."""
SIZING_AT_ONCE = 32
"""Clusters whose replay is being sized at once (five stream requests each): a thousand claims
in one round must not put five thousand requests in flight (nats-server refuses API requests
past 10,000 pending)."""


class WorkBudget:
    """Units of work taken and given back; ``take`` waits until they fit."""

    def __init__(self, limit: int = REPLAY_BUDGET, at_once: int = AT_ONCE) -> None:
        self.limit = limit
        self.at_once = at_once
        self.used = 0
        self.holders = 0
        self.sizing = asyncio.Semaphore(SIZING_AT_ONCE)
        """Held while a replay's size is asked of the bus (``SIZING_AT_ONCE``)."""
        self._waiters: list[asyncio.Future[None]] = []

    async def take(self, units: int) -> int:
        """Wait until ``units`` fit (at most the whole budget), take them; returns what was
        taken, to be given back with ``give``."""
        units = max(0, min(units, self.limit))
        while self.used + units > self.limit or self.holders >= self.at_once:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.used += units
        self.holders += 1
        return units

    def give(self, units: int) -> None:
        self.used -= units
        self.holders -= 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:  # each looks again whether it fits now
            if not waiter.done():
                waiter.set_result(None)


BACKLOG_LIMIT = 200_000
"""Events queued across every cluster of a replica before the hub's taps wait for room: bounded
memory (a few hundred MiB at most) without one busy cluster holding up the others' messages."""


class Backlog:
    """Events queued across a replica's clusters. The hub's taps wait (``room``) while it is
    full; nothing else does — a cluster's own loop never waits on its queue, so the queues are
    unbounded each and bounded together, and the loops that drain them always can."""

    def __init__(self, limit: int = BACKLOG_LIMIT) -> None:
        self.limit = limit
        self.queued = 0
        self._room = asyncio.Event()
        self._room.set()

    def add(self, n: int = 1) -> None:
        self.queued += n
        if self.queued >= self.limit:
            self._room.clear()

    def done(self, n: int = 1) -> None:
        self.queued -= n
        if self.queued < self.limit:
            self._room.set()

    async def room(self) -> None:
        """Return when the replica's queues have room (at once, nearly always)."""
        if not self._room.is_set():
            await self._room.wait()
