"""Handing freed heap memory back to the system after a burst of allocations, keeping what
a burst left alive out of the garbage collector's walks (``keep_long_lived``), and collecting
young objects less often than CPython's default (``collect_young_rarely``).

Taking in a big revision allocates and frees tens of megabytes of small objects (each manifest
decoded, checked and encoded). glibc keeps freed chunks in the heap for reuse, so the process's
resident size stays at the burst's peak long after; ``malloc_trim`` returns the free pages
inside the heap (measured in-process at 100,000 objects: 173 → 119 MiB). Elsewhere (musl,
macOS) there is no such call and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:  # no C library by that name here
        return None


def release_freed() -> None:
    """Return the heap's free pages to the system (glibc), a few milliseconds of work."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


LONG_LIVED_AT = 5_000
"""Objects (of a revision, of a cluster) from which what a burst leaves is kept long-lived."""


def keep_long_lived(objects: int) -> None:
    """After a burst about ``objects`` objects (a revision taken in, a cluster rebuilt), when
    they are ``LONG_LIVED_AT`` or more: the objects alive now are left out of every later
    garbage collection (``gc.freeze``).

    A planner holding a big cluster (every object's key, details and book entries) is a heap of
    long-lived containers; each full collection walked all of them, and held the event loop
    while it did: 0.25-0.35 s at 20,000 objects (``common.stalls``: the collector's share of
    each stall), over a second at 100,000, until the replica lost its claims. Frozen, they are
    still freed when nothing refers to them; a reference cycle among them stays until
    ``forget_long_lived`` (a cluster's planner is one such cycle: called when one stops)."""
    if objects >= LONG_LIVED_AT:
        gc.freeze()


def forget_long_lived() -> None:
    """What ``keep_long_lived`` kept goes back to the garbage collector (``gc.unfreeze``): a
    stopped cluster's planner, a cycle of its parts, is collected by the next full collection
    (one walk of the whole heap, once), and the clusters still planned are kept long-lived again
    after their next big burst."""
    gc.unfreeze()


YOUNG_EVERY = 10_000
"""Container allocations (net of frees) between two young collections; CPython's default is
700."""


def collect_young_rarely() -> None:
    """Collect the youngest generation every ``YOUNG_EVERY`` allocations, not every 700 (a
    setting that is higher already stays).

    A service's young objects are mostly messages, futures and tasks in flight: thousands of
    them alive at any moment, walked by every young collection and again by every tenth. In a
    1,000-cluster rollout (``python -m bench fleet-sim``, 2026-11-30, ``gc.callbacks``) the
    simulated members' collections took 16-28 % of their CPU. With young collections every
    10,000 allocations (four runs against two before), per CPU-second of nats-server (the same
    messages in every run, while the machine's speed varied by a third between runs) the
    planners spent ~15 % less CPU and the members ~20 % less. Reference counting still frees
    everything acyclic at once; what waits longer is only garbage in cycles, at most
    ``YOUNG_EVERY`` containers of it.
    """
    young, middle, old = gc.get_threshold()
    if 0 < young < YOUNG_EVERY:  # 0: collection is off (a caller's choice)
        gc.set_threshold(YOUNG_EVERY, middle, old)
