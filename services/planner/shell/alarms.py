"""One cluster's periodic duties as alarms on the event loop's own timer heap.

A replica planning 1,000 clusters must not run 1,000 × five sleeping loops (each a task and a
timer that wakes whether or not there is work): every duty of a cluster — the status tick, the
lost-intent check, the queue depth, the sync windows' clock, the weekly status refresh — is at
most one ``loop.call_at`` handle, set when there is something to do and gone once it rang. The
event loop keeps all of them in one heap; a quiet cluster has none but its daily refresh, and a
replica holding only quiet clusters sleeps until a message or a heartbeat comes.

A ringing alarm does not run the duty: it puts the duty's name on the cluster's queue, so each
duty runs in the cluster's run loop between two messages, never beside it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Alarms:
    """At most one pending alarm per duty; ``ring(duty)`` is called when it is due."""

    def __init__(self, ring: Callable[[str], None]) -> None:
        self._ring = ring
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def set(self, duty: str, delay: float) -> None:
        """Ring ``duty`` in ``delay`` seconds, unless it already rings sooner (changes within
        the delay are coalesced into one ring)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        handle = self._handles.get(duty)
        if handle is not None:
            if handle.when() <= when:
                return
            handle.cancel()
        self._handles[duty] = loop.call_at(when, self._rang, duty)

    def move(self, duty: str, delay: float) -> None:
        """Ring ``duty`` in ``delay`` seconds, sooner or later than it was set to."""
        self.cancel(duty)
        self.set(duty, delay)

    def cancel(self, duty: str) -> None:
        if (handle := self._handles.pop(duty, None)) is not None:
            handle.cancel()

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()

    def pending(self) -> frozenset[str]:
        """The duties with an alarm set (what a quiet cluster costs: see the module doc)."""
        return frozenset(self._handles)

    def _rang(self, duty: str) -> None:
        self._handles.pop(duty, None)
        self._ring(duty)
