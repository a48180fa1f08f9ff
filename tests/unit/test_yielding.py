"""Long work paced: ``in_order`` sorts as ``sorted`` does, stable, and lets the loop run."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.planner.shell import yielding


@given(st.lists(st.tuples(st.integers(0, 5), st.text(max_size=3))))
def test_in_order_is_sorted_by_the_key_and_stable(items: list[tuple[int, str]]) -> None:
    got = asyncio.run(yielding.in_order(iter(items), lambda item: item[0]))
    assert got == sorted(items, key=lambda item: item[0])


def test_in_order_lets_the_loop_run_while_it_computes_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yielding, "SLICE", 0.0)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def main() -> list[int]:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        got = await yielding.in_order(range(10_000, 0, -1), lambda n: n)
        task.cancel()
        return got

    assert asyncio.run(main()) == list(range(1, 10_001))
    assert turns > 10_000 // yielding._CHECK_EVERY - 2
