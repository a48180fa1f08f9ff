"""De-duplication and rate limits: whether a message is sent or dropped, and why (pure).

For each (provider, event) the gate answers one ``Verdict``:

- ``UNCHANGED`` — a bundle's phase in a cluster that is the phase last sent to the provider
  (its status is published again on every count change), or ``Progressing`` again for a
  revision already sent ``Ready`` (a drift being corrected re-reconciles it: the revision is
  still in force, and a commit status must not fall back to pending): no news. A phase that
  differs from the last one sent is always news, so the provider's last message is the state in
  force (a commit status, a chat channel), however often it flaps (the rate limit bounds that);
- ``REPEAT`` — the same event of another kind (drift corrected, rollout step: provider,
  cluster, bundle, kind, revision, object, detail) was sent less than ``dedupeSeconds`` ago: an
  object changed by hand again and again sends one message per window;
- ``RATE`` — the provider already had ``perMinute`` messages in the last 60 seconds (drift
  corrections and rollout steps only: a bundle's new phase is always sent, so a provider's last
  message is never a Ready that stopped being true);
- ``SEND`` — none of those: the message goes, and counts against the window and the rate.

``REFUSED`` is not the gate's: the service's, for a commit status the platform's token may not
post for a tenant's bundle (``match.platform_token_refusal``), never sent however often it comes.

Time is a number of seconds passed in (a monotonic clock in the service, any number in tests).
"""

from __future__ import annotations

import collections
import enum
from typing import Final

from schemas.notify import EventKind, Limits
from services.notify.events import PHASE_KINDS, Event

RATE_WINDOW: Final = 60.0
MAX_REMEMBERED: Final = 20_000
"""Sent events remembered for de-duplication before the oldest expired ones are forgotten."""


class Verdict(enum.StrEnum):
    SEND = "send"
    UNCHANGED = "unchanged"
    REPEAT = "repeat"
    RATE = "rate-limited"
    REFUSED = "refused"


def _state(e: Event) -> tuple[str, str, str]:
    return (str(e.kind), e.revision, e.detail)


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

    def observe(self, provider: str, e: Event) -> None:
        """Record a bundle's phase as sent without sending it (the replay at start-up: what
        the last life of the service sent)."""
        if e.kind in PHASE_KINDS:
            self._phase[(provider, e.cluster, e.bundle)] = _state(e)

    def _news(self, provider: str, e: Event) -> bool:
        last = self._phase.get((provider, e.cluster, e.bundle))
        if last is None:
            return True
        if e.kind is EventKind.PROGRESSING and last[:2] == (EventKind.READY, e.revision):
            return False
        return last != _state(e)

    def admit(self, provider: str, e: Event, now: float) -> Verdict:
        """The verdict on sending ``e`` to ``provider`` at ``now``; a ``SEND`` is counted
        (``check`` then ``record``)."""
        verdict = self.check(provider, e, now)
        if verdict is Verdict.SEND:
            self.record(provider, e, now)
        return verdict

    def check(self, provider: str, e: Event, now: float) -> Verdict:
        """The verdict, counting nothing sent yet: the shell records a message once it is
        on its way (its secrets read), so one that could not even be made is tried again."""
        if e.kind in PHASE_KINDS:
            if not self._news(provider, e):
                return self._drop(provider, Verdict.UNCHANGED)
            # a new phase is never rate-limited: a dropped one would not come again (the
            # planner publishes a status when it changes), and the provider's last word would
            # stay a Ready that is no longer true; it still counts against the rate
            return Verdict.SEND
        last = self._sent.get(dedupe_key(provider, e))
        if last is not None and now - last < self.limits.dedupe_seconds:
            return self._drop(provider, Verdict.REPEAT)
        times = self._rate.setdefault(provider, collections.deque())
        while times and now - times[0] >= RATE_WINDOW:
            times.popleft()
        if len(times) >= self.limits.per_minute:
            return self._drop(provider, Verdict.RATE)
        return Verdict.SEND

    def record(self, provider: str, e: Event, now: float) -> None:
        """Count ``e`` as sent to ``provider`` at ``now``."""
        self._rate.setdefault(provider, collections.deque()).append(now)
        if e.kind in PHASE_KINDS:
            self._phase[(provider, e.cluster, e.bundle)] = _state(e)
        else:
            self._sent[dedupe_key(provider, e)] = now
        if len(self._sent) > MAX_REMEMBERED:
            self._forget(now)

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
