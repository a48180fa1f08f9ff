"""The rollout driver's lease: one process at a time drives every rollout.

The ``driver`` entry of the rollouts bucket names the holder, who rewrites it every ``interval``
with compare-and-set. The others watch it and take it (compare-and-set again, so only one can)
once it has not changed for ``timeout`` on their own clock: the lease rule the planners' shard
claims follow too (``services.core.lease``), read and written through the same compare-and-set
(``services.common.bus.lease``); no clock is compared across machines. A holder whose renewals
have failed for ``timeout`` minus one ``interval`` stops holding before anyone else can take
over.

Its fencing ``token`` is the KV revision of the write that made the lease ours (revisions only
grow, so a later holder's is higher): every placement carries it, and a planner refuses one whose
token is lower than a token it has already taken for that bundle (a driver deposed while it was
stalled). ``check`` is asked before every publish; a process that stalled past its lease (a
stopped process, a starved event loop) wakes up not holding it, on its own monotonic clock.
Each renewal writes the token into the lease entry (``core.lease.lease_token`` reads it), so a
planner rebuilding a cluster can tell a placement made before the current holder's term, and
only then reads the bundle's history for a newer token (``services.planner.shell.fencing``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from schemas.subjects import ROLLOUT_DRIVER_KEY
from services.common import bus
from services.core.lease import Term, lease_value, live, may_claim

log = logging.getLogger("driftbus.fleet")


class LeaseLost(RuntimeError):
    """The driver no longer holds its lease: it must not publish (the message says since when)."""


class Lease:
    """The driver's lease, held by ``hold()`` (forever); ``held`` says whether it is ours now;
    ``taken`` is called when it becomes ours."""

    def __init__(
        self,
        js: bus.JetStream,
        *,
        holder: str,
        interval: float,
        timeout: float,
        taken: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.js = js
        self.holder = holder
        self.term = Term(interval, timeout, clock)
        self._taken = taken
        self.token = 0
        """The KV revision of the write that made the lease ours (0: never held)."""

    @property
    def held(self) -> bool:
        return self.term.holds

    def check(self) -> int:
        """The fencing token to publish with; LeaseLost when the lease is not ours now."""
        late = self.term.late()
        if late >= 0 or not self.token:
            raise LeaseLost(f"the rollout driver lease ran out {late:.1f}s ago")
        return self.token

    async def hold(self) -> None:
        term = self.term
        seen_rev, seen_at = -1, term.clock()
        while True:
            # a renewal names our token; a take cannot yet (it is the revision the write gets)
            value = lease_value(self.holder, self.token if self.held else 0)
            try:
                kv = await bus.bucket(self.js, bus.ROLLOUTS_BUCKET)
                lease = await bus.read_lease(kv, ROLLOUT_DRIVER_KEY, "driver")
                started = term.clock()
                if lease is None:
                    rev = await bus.take(kv, ROLLOUT_DRIVER_KEY, value, last=None)
                    if rev is not None:
                        self._take(started, rev, "no driver yet")
                elif lease.holder == self.holder:
                    rev = await bus.take(kv, ROLLOUT_DRIVER_KEY, value, last=lease.revision)
                    if rev:
                        if not self.held:  # a new term (a restart, or renewals had failed)
                            self._take(started, rev, "ours already")
                        term.last_ok = started
                    else:
                        term.last_ok = float("-inf")  # someone else took it
                else:
                    if lease.revision != seen_rev:
                        seen_rev, seen_at = lease.revision, started
                    alive = live({lease.holder: seen_at}, started, term.timeout)
                    if may_claim(lease.holder, self.holder, alive):
                        rev = await bus.take(kv, ROLLOUT_DRIVER_KEY, value, last=lease.revision)
                        if rev:
                            silent = f"driver {lease.holder} silent {started - seen_at:.0f}s"
                            self._take(started, rev, silent)
            except Exception as exc:  # noqa: BLE001 - NATS away: the lease runs out by itself
                log.warning("rollout driver lease not renewed: %s", exc)
            await asyncio.sleep(term.interval)

    def _take(self, at: float, token: int, why: str) -> None:
        log.info(
            "driving the rollouts (%s), fencing token %d", why, token, extra={"driver": self.holder}
        )
        self.token = int(token)
        self.term.last_ok = at
        self._taken()
