"""The lease rule (pure, no clock of its own): one holder at a time of a KV entry, taken over
only from a holder gone silent, and the fencing token its holder publishes with (DESIGN §8, §13).

Two leases follow it: the planners' claims on clusters (``services.planner.sharding``: each
replica's heartbeat entry says it is alive, each cluster's claim names its planner) and the
rollout driver's lease (``services.fleet.driver.lease``: the ``driver`` entry of the rollouts
bucket, its own heartbeat). Both are written only by compare-and-set (``services.common.bus.
lease``), so two writers never both win; the revision the winning write got is the holder's
fencing token. This module answers the questions the two loops ask, each a table row in the
tests:

* ``live(last_change, now, timeout)`` — the holders whose entry changed within ``timeout`` *as
  observed locally* (one process's monotonic clock: no clock is compared across machines);
* ``may_claim(holder, me, alive)`` — may ``me`` overwrite an entry naming ``holder``: released,
  its own, or held by one that is not live;
* ``lease_holds(last_ok, now, …)`` — may a holder whose last good write was sent at ``last_ok``
  still act (it stops one interval before the others may take over); ``Term`` keeps that
  question for a holder, on the monotonic clock it is given;
* ``holder_of(data, field)`` — who an entry names; ``lease_value`` and ``lease_token`` — the
  driver's entry, which also names its holder's fencing token once known, so a planner can tell
  a placement made before the current holder's term (``services.planner.shell.fencing``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping

import msgspec


def live(last_change: Mapping[str, float], now: float, timeout: float) -> set[str]:
    """Holders whose entry changed at most ``timeout`` seconds before ``now``."""
    return {p for p, at in last_change.items() if now - at <= timeout}


def may_claim(holder: str, me: str, alive: Collection[str]) -> bool:
    """May ``me`` overwrite an entry that names ``holder`` ("" once released, or unreadable)?
    Only a free one: released, already its own, or held by one that is not live."""
    return holder in ("", me) or holder not in alive


def lease_until(last_ok: float, *, interval: float, timeout: float) -> float:
    """Until when a holder whose last good write was sent at ``last_ok`` may act. Others see
    that write no earlier than it was sent and wait ``timeout`` after it; stopping one interval
    sooner leaves room for clock rates and scheduling."""
    return last_ok + timeout - interval


def lease_holds(last_ok: float, now: float, *, interval: float, timeout: float) -> bool:
    """May a holder whose last good write was sent at ``last_ok`` still act at ``now``?"""
    return now < lease_until(last_ok, interval=interval, timeout=timeout)


@dataclasses.dataclass
class Term:
    """A holder's term: it may act until one interval before the others may take over after its
    last good write (``lease_holds``), on the clock it is given, so a stall (a stopped process,
    a starved loop) shows as time passed."""

    interval: float
    """Seconds between the holder's writes (renewals, heartbeats)."""
    timeout: float
    """Seconds others wait, on their own clocks, after the holder's entry last changed."""
    clock: Callable[[], float]
    """Monotonic seconds (a test passes its own)."""
    last_ok: float = float("-inf")
    """When the last write that kept the lease was sent, on ``clock`` (-inf: none)."""

    @property
    def holds(self) -> bool:
        return lease_holds(self.last_ok, self.clock(), interval=self.interval, timeout=self.timeout)

    def late(self) -> float:
        """Seconds since the term ended (negative while it holds)."""
        return self.clock() - lease_until(
            self.last_ok, interval=self.interval, timeout=self.timeout
        )


def holder_of(data: bytes | None, field: str) -> str | None:
    """Who an entry names in ``field`` ("" when it names nobody); None when it is not a JSON
    object."""
    try:
        value = msgspec.json.decode(data or b"{}")
    except msgspec.DecodeError:
        return None
    return str(value.get(field, "")) if isinstance(value, dict) else None


def lease_value(holder: str, token: int) -> bytes:
    """The driver's lease entry: its holder, and its fencing token once known (0: not written,
    as in a take: the token is the revision the write gets)."""
    value: dict[str, object] = {"driver": holder}
    if token:
        value["token"] = token
    return msgspec.json.encode(value)


def lease_token(data: bytes | None) -> int | None:
    """The holder's fencing token the driver's lease entry names (None: unreadable, or not named
    yet — a holder between its take and its first renewal, or a driver older than this one)."""
    try:
        value = msgspec.json.decode(data or b"{}")
    except msgspec.DecodeError:
        return None
    token = value.get("token") if isinstance(value, dict) else None
    return token if isinstance(token, int) and not isinstance(token, bool) and token > 0 else None
