"""Handing freed heap memory back to the system after a burst of allocations.

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
