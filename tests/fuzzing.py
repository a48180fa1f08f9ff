"""How many examples a fuzz target runs: its default in ``make test``, or every target's count
from ``DRIFTBUS_FUZZ_EXAMPLES`` when set (a long run on demand).

    @settings(max_examples=examples(100), deadline=DEADLINE)
"""

from __future__ import annotations

import os

VARIABLE = "DRIFTBUS_FUZZ_EXAMPLES"


def examples(default: int) -> int:
    """``default``, or the count ``DRIFTBUS_FUZZ_EXAMPLES`` names for every target."""
    return int(os.environ.get(VARIABLE) or default)


DEADLINE = None
"""No per-example deadline: a shared 2-core machine's pauses are not findings."""
