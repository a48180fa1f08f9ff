"""Work done in steps: a generator that yields between pieces of a long pure computation and
returns its value. A planner runs one in its event loop, letting the loop turn at each yield
(``planner/shell/yielding.stepped``); everyone else takes the value at once (``finished``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")


def finished(steps: Generator[None, None, T]) -> T:
    """The value of ``steps``, every step taken without a pause."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
