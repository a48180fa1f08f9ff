"""De-duplication and rate limits: whether a message is sent or dropped, and why (pure).

For each (provider, event) the gate answers one ``Verdict``:

- ``UNCHANGED`` — a bundle's phase in a cluster that is the phase last seen for it (its status
  is published again on every count change): no news;
- ``REPEAT`` — the same event (provider, cluster, bundle, kind, revision, object, detail) was
  sent less than ``dedupeSeconds`` ago: a flapping object, or a bundle going Ready, Degraded,
  Ready, sends one message per state within the window;
- ``RATE`` — the provider already had ``perMinute`` messages in the last 60 seconds;
- ``SEND`` — none of those: the message goes, and counts against the window and the rate.

Time is a number of seconds passed in (a monotonic clock in the service, any number in tests).
"""

from __future__ import annotations

import collections
import enum
from typing import Final

from schemas.notify import Limits
from services.notify.events import PHASE_KINDS, Event

RATE_WINDOW: Final = 60.0
MAX_REMEMBERED: Final = 20_000
"""Sent events remembered for de-duplication before the oldest expired ones are forgotten."""


class Verdict(enum.StrEnum):
    SEND = "send"
    UNCHANGED = "unchanged"
    REPEAT = "repeat"
    RATE = "rate-limited"


def dedupe_key(provider: str, e: Event) -> tuple[str, ...]:
    return (provider, e.cluster, e.bundle, e.kind, e.revision, e.object, e.detail)


class Gate:
    """The state of one configuration's providers: what was seen, sent, and when."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._phase: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._sent: dict[tuple[str, ...], float] = {}
        self._rate: dict[str, collections.deque[float]] = {}
        self.dropped: collections.Counter[tuple[str, Verdict]] = collections.Counter()
        """(provider, verdict) → messages dropped, for the logs and metrics."""

    def observe(self, provider: str, e: Event) -> bool:
        """Record a bundle's phase without sending (the replay at start-up); whether it is a
        change from the phase seen before."""
        if e.kind not in PHASE_KINDS:
            return True
        key, state = (provider, e.cluster, e.bundle), (str(e.kind), e.revision, e.detail)
        changed = self._phase.get(key) != state
        self._phase[key] = state
        return changed

    def admit(self, provider: str, e: Event, now: float) -> Verdict:
        """The verdict on sending ``e`` to ``provider`` at ``now``; a ``SEND`` is counted."""
        if not self.observe(provider, e):
            return self._drop(provider, Verdict.UNCHANGED)
        key = dedupe_key(provider, e)
        last = self._sent.get(key)
        if last is not None and now - last < self.limits.dedupe_seconds:
            return self._drop(provider, Verdict.REPEAT)
        times = self._rate.setdefault(provider, collections.deque())
        while times and now - times[0] >= RATE_WINDOW:
            times.popleft()
        if len(times) >= self.limits.per_minute:
            return self._drop(provider, Verdict.RATE)
        times.append(now)
        self._sent[key] = now
        if len(self._sent) > MAX_REMEMBERED:
            self._forget(now)
        return Verdict.SEND

    def _drop(self, provider: str, verdict: Verdict) -> Verdict:
        self.dropped[(provider, verdict)] += 1
        return verdict

    def _forget(self, now: float) -> None:
        """Forget sends older than the window; if that is not enough, the oldest half."""
        window = self.limits.dedupe_seconds
        self._sent = {k: t for k, t in self._sent.items() if now - t < window}
        if len(self._sent) > MAX_REMEMBERED:
            newest = sorted(self._sent.items(), key=lambda kv: kv[1])[len(self._sent) // 2 :]
            self._sent = dict(newest)
