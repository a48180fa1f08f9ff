"""The rollout driver's lease: one process at a time drives every rollout.

The ``driver`` entry of the rollouts bucket names the holder, who rewrites it every ``interval``
with compare-and-set. The others watch it and take it (compare-and-set again, so only one can)
once it has not changed for ``timeout`` on their own clock, the rule the planners' shard claims
follow: no clock is compared across machines. A holder whose renewals have failed for ``timeout``
minus one ``interval`` stops holding before anyone else can take over.
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
    ) -> None:
        self.js = js
        self.holder = holder
        self.interval = interval
        self.timeout = timeout
        self._taken = taken
        self._until = 0.0

    @property
    def held(self) -> bool:
        return time.monotonic() < self._until

    async def hold(self) -> None:
        seen_rev, seen_at = -1, time.monotonic()
        value = msgspec.json.encode({"driver": self.holder})
        b, key = bus.ROLLOUTS_BUCKET, ROLLOUT_DRIVER_KEY
        while True:
            try:
                entry = await bus.kv_get(self.js, b, key)
                started = time.monotonic()
                if entry is None:
                    if await bus.kv_create(self.js, b, key, value) is not None:
                        self._take(started, "no driver yet")
                else:
                    holder = holder_of(entry.value)
                    if holder == self.holder:
                        if await bus.kv_update(self.js, b, key, value, last=entry.revision):
                            first = not self.held
                            self._until = started + self.timeout - self.interval
                            if first:
                                self._take(started, "ours already")
                        else:
                            self._until = 0.0  # someone else took it
                    elif entry.revision != seen_rev:
                        seen_rev, seen_at = entry.revision, started
                    elif started - seen_at > self.timeout and await bus.kv_update(
                        self.js, b, key, value, last=entry.revision
                    ):
                        self._take(started, f"driver {holder} silent {started - seen_at:.0f}s")
            except Exception as exc:  # noqa: BLE001 - NATS away: the lease runs out by itself
                log.warning("rollout driver lease not renewed: %s", exc)
            await asyncio.sleep(self.interval)

    def _take(self, at: float, why: str) -> None:
        log.info("driving the rollouts (%s)", why, extra={"driver": self.holder})
        self._until = at + self.timeout - self.interval
        self._taken()


def holder_of(data: bytes | None) -> str:
    """Who the lease entry names ("" for anything unreadable)."""
    try:
        value = msgspec.json.decode(data or b"{}")
    except msgspec.DecodeError:
        return ""
    return str(value.get("driver", "")) if isinstance(value, Mapping) else ""
