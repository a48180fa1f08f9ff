"""How long to wait before trying an intent again (pure).

Transient trouble — 429, 5xx (an admission webhook that is down answers 500), timeouts, a CRD or
Namespace that is not there yet — is retried for as long as it lasts, with capped exponential
backoff, never silently given up: a webhook down for ten minutes must end with the object
applied once it is back, without anybody publishing again. The server's ``Retry-After`` is
honoured (up to ``RETRY_AFTER_CAP``) when it asks for longer than the backoff.
"""

from __future__ import annotations

from typing import Final

FIRST_DELAY: Final = 1.0
RETRY_AFTER_CAP: Final = 600.0


def retry_delay(attempt: int, *, cap: float, retry_after: float | None = None) -> float:
    """Seconds before delivery ``attempt + 1`` of an intent whose ``attempt``-th failed:
    1, 2, 4, … up to ``cap``; at least ``retry_after`` (itself at most ``RETRY_AFTER_CAP``)."""
    delay = min(cap, FIRST_DELAY * 2.0 ** max(0, min(attempt - 1, 30)))
    if retry_after is not None and retry_after > delay:
        delay = min(retry_after, max(cap, RETRY_AFTER_CAP))
    return delay
