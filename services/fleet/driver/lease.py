"""The rollout driver's lease: one process at a time drives every rollout.

The ``driver`` entry of the rollouts bucket names the holder, who rewrites it every ``interval``
with compare-and-set. The others watch it and take it (compare-and-set again, so only one can)
once it has not changed for ``timeout`` on their own clock, the rule the planners' shard claims
follow: no clock is compared across machines. A holder whose renewals have failed for ``timeout``
minus one ``interval`` stops holding before anyone else can take over.

Its fencing ``token`` is the KV revision of the write that made the lease ours (revisions only
grow, so a later holder's is higher): every placement carries it, and a planner refuses one whose
token is lower than a token it has already taken for that bundle (a driver deposed while it was
stalled). ``check`` is asked before every publish; a process that stalled past its lease (a
stopped process, a starved event loop) wakes up not holding it, on its own monotonic clock.
Each renewal writes the token into the lease entry (``lease_token`` reads it), so a planner
rebuilding a cluster can tell a placement made before the current holder's term, and only then
reads the bundle's history for a newer token (``services.planner.shell.intake``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

import msgspec

from schemas.subjects import ROLLOUT_DRIVER_KEY
from services.common import bus

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
        self._clock = clock
        """Monotonic seconds: a stall shows on it as time passed (a test passes its own)."""
        self.holder = holder
        self.interval = interval
        self.timeout = timeout
        self._taken = taken
        self._until = 0.0
        self.token = 0
        """The KV revision of the write that made the lease ours (0: never held)."""

    @property
    def held(self) -> bool:
        return self._clock() < self._until

    def check(self) -> int:
        """The fencing token to publish with; LeaseLost when the lease is not ours now."""
        late = self._clock() - self._until
        if late >= 0 or not self.token:
            raise LeaseLost(f"the rollout driver lease ran out {late:.1f}s ago")
        return self.token

    async def hold(self) -> None:
        seen_rev, seen_at = -1, self._clock()
        b, key = bus.ROLLOUTS_BUCKET, ROLLOUT_DRIVER_KEY
        while True:
            # a renewal names our token; a take cannot yet (it is the revision the write gets)
            value = lease_value(self.holder, self.token if self.held else 0)
            try:
                entry = await bus.kv_get(self.js, b, key)
                started = self._clock()
                if entry is None:
                    rev = await bus.kv_create(self.js, b, key, value)
                    if rev is not None:
                        self._take(started, rev, "no driver yet")
                else:
                    holder = holder_of(entry.value)
                    if holder == self.holder:
                        rev = await bus.kv_update(self.js, b, key, value, last=entry.revision)
                        if rev:
                            if not self.held:  # a new term (a restart, or renewals had failed)
                                self._take(started, rev, "ours already")
                            self._until = started + self.timeout - self.interval
                        else:
                            self._until = 0.0  # someone else took it
                    elif entry.revision != seen_rev:
                        seen_rev, seen_at = entry.revision, started
                    elif started - seen_at > self.timeout:
                        rev = await bus.kv_update(self.js, b, key, value, last=entry.revision)
                        if rev:
                            silent = f"driver {holder} silent {started - seen_at:.0f}s"
                            self._take(started, rev, silent)
            except Exception as exc:  # noqa: BLE001 - NATS away: the lease runs out by itself
                log.warning("rollout driver lease not renewed: %s", exc)
            await asyncio.sleep(self.interval)

    def _take(self, at: float, token: int, why: str) -> None:
        log.info(
            "driving the rollouts (%s), fencing token %d", why, token, extra={"driver": self.holder}
        )
        self.token = int(token)
        self._until = at + self.timeout - self.interval
        self._taken()


def holder_of(data: bytes | None) -> str:
    """Who the lease entry names ("" for anything unreadable)."""
    try:
        value = msgspec.json.decode(data or b"{}")
    except msgspec.DecodeError:
        return ""
    return str(value.get("driver", "")) if isinstance(value, Mapping) else ""


def lease_value(holder: str, token: int) -> bytes:
    """The lease entry: its holder, and its fencing token once known (0: not written)."""
    value: dict[str, object] = {"driver": holder}
    if token:
        value["token"] = token
    return msgspec.json.encode(value)


def lease_token(data: bytes | None) -> int | None:
    """The holder's fencing token the lease entry names (None: unreadable, or not named yet —
    a holder between its take and its first renewal, or a driver older than this one)."""
    try:
        value = msgspec.json.decode(data or b"{}")
    except msgspec.DecodeError:
        return None
    token = value.get("token") if isinstance(value, Mapping) else None
    return token if isinstance(token, int) and not isinstance(token, bool) and token > 0 else None
