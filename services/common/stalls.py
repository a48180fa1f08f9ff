"""Where a process's event loop is held: a thread that names the code holding it.

A planner whose loop is held longer than its heartbeat timeout loses its lease (issue 44's
``memory`` bench, 100,000 objects). asyncio's debug mode says which task step was slow, not
where inside it, and a sampling profiler says where the time goes, not which of it came in one
piece. This watch does the second half: a thread samples the loop thread's stack while the loop
has not turned for ``threshold`` seconds, and when it turns again logs how long it was held and
the code it was held in (the most frequent stacks of the samples, driftbus's own frames only)
and how much of it the cyclic garbage collector took (it stops the loop wherever it starts).

Off unless ``DRIFTBUS_STALL_REPORT`` is a number of seconds (the benches set it). Costs a thread
waking every ``threshold / 4`` and a loop callback as often; nothing while the loop turns.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

log = logging.getLogger("driftbus.stalls")

ENV = "DRIFTBUS_STALL_REPORT"
OURS = ("services", "schemas")
"""Packages whose frames name a stall (the rest is the library or the interpreter under it)."""
DEPTH = 6
"""Frames kept of each sample, innermost first."""
SHOWN = 3
"""Stacks logged per stall."""
SHOWN_COLLECTIONS = 5
"""Long garbage collections logged with a stall (the last ones)."""


def from_environment() -> float | None:
    """The threshold ``DRIFTBUS_STALL_REPORT`` sets, or None (off, or not a positive number)."""
    raw = os.environ.get(ENV, "")
    try:
        threshold = float(raw)
    except ValueError:
        return None
    return threshold if threshold > 0 else None


def our_frames(frame: FrameType | None, packages: tuple[str, ...] = OURS) -> tuple[str, ...]:
    """The sample's frames in ``packages``, innermost first: ``module:function:line``."""
    out: list[str] = []
    while frame is not None and len(out) < DEPTH:
        module = frame.f_globals.get("__name__", "")
        if module.split(".", 1)[0] in packages:
            out.append(f"{module}:{frame.f_code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return tuple(out)


def summary(samples: collections.Counter[tuple[str, ...]]) -> list[dict[str, object]]:
    """The most frequent stacks of a stall, with their share of its samples."""
    total = sum(samples.values()) or 1
    return [
        {"share": round(n / total, 2), "stack": list(stack)}
        for stack, n in samples.most_common(SHOWN)
    ]


def census(top: int = 8) -> dict[str, int]:
    """The objects the garbage collector tracks, by type: the most numerous ``top`` and the
    total."""
    counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
    return {"total": sum(counts.values()), **dict(counts.most_common(top))}


class StallWatch:
    """Samples the loop thread while its loop is held; logs each stall when it ends."""

    def __init__(self, threshold: float, packages: tuple[str, ...] = OURS) -> None:
        self.threshold = threshold
        self.packages = packages
        self._beat = time.monotonic()
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self.stalls = 0
        self.reported = threading.Event()
        """Set once a stall was logged."""
        self._gc_started: float | None = None
        self._next_census = 0.0
        self.gc_seconds = 0.0
        """Seconds spent in the cyclic garbage collector since start (any thread)."""
        self._gc_at_beat = 0.0
        self.collections: list[tuple[int, float, int]] = []
        """The last collections that took 10 ms or more: (generation, seconds, collected)."""

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        # the collector stops every thread while it walks the heap: a stall may be its doing
        if phase == "start":
            self._gc_started = time.perf_counter()
        elif self._gc_started is not None:  # not one that began before the watch did
            took = time.perf_counter() - self._gc_started
            self._gc_started = None
            self.gc_seconds += took
            if took >= 0.01:  # the long ones: which generation, and what it found
                self.collections.append((info["generation"], round(took, 3), info["collected"]))
                del self.collections[:-SHOWN_COLLECTIONS]

    async def run(self) -> None:
        """The loop's side: stamp the time on every turn of ``threshold / 4``."""
        thread = threading.Thread(target=self._watch, name="stall-watch", daemon=True)
        thread.start()
        gc.callbacks.append(self._gc)
        try:
            while True:
                self._beat, self._gc_at_beat = time.monotonic(), self.gc_seconds
                await asyncio.sleep(self.threshold / 4)
        finally:
            self._stop.set()
            gc.callbacks.remove(self._gc)

    def _watch(self) -> None:
        interval = min(0.02, self.threshold / 4)
        samples: collections.Counter[tuple[str, ...]] = collections.Counter()
        held_since: float | None = None
        gc_before = 0.0
        while not self._stop.wait(interval):
            beat, gc_at_beat = self._beat, self._gc_at_beat
            held = time.monotonic() - beat
            if held > self.threshold:
                if held_since is None:
                    gc_before = gc_at_beat  # what the collector took since the last turn
                held_since = beat
                frame = sys._current_frames().get(self._loop_thread)
                samples[our_frames(frame, self.packages)] += 1
            elif held_since is not None:
                # the beats around the stall are one sleep apart, plus the stall
                in_gc = self.gc_seconds - gc_before
                self._report(beat - held_since - self.threshold / 4, in_gc, samples)
                samples = collections.Counter()
                held_since = None

    def _report(
        self, held: float, in_gc: float, samples: collections.Counter[tuple[str, ...]]
    ) -> None:
        extra: dict[str, object] = {}
        if in_gc > held / 2 and time.monotonic() >= self._next_census:
            # what the collector walks: at most once a minute, it walks the heap too
            self._next_census = time.monotonic() + 60
            extra["tracked"] = census()
        if in_gc:
            extra["collections"] = list(self.collections)
        log.warning(
            "the event loop was held %.2fs (%.2fs of it collecting garbage)",
            held,
            in_gc,
            extra={
                "held_s": round(held, 3),
                "gc_s": round(in_gc, 3),
                "where": summary(samples),
                **extra,
            },
        )
        self.stalls += 1
        self.reported.set()


def watched() -> Iterator[StallWatch]:
    """A watch for this process if ``DRIFTBUS_STALL_REPORT`` asks for one."""
    threshold = from_environment()
    if threshold is not None:
        yield StallWatch(threshold)
