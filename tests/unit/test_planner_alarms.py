"""The planner's alarms (one handle per duty, coalesced) and its replay budget (work, not a
count of clusters): pure enough to test on the event loop alone."""

from __future__ import annotations

import asyncio

import pytest

from services.planner.shell.alarms import Alarms
from services.planner.shell.budget import WorkBudget


async def test_an_alarm_rings_once_for_many_sets_within_its_delay() -> None:
    rang: list[str] = []
    alarms = Alarms(rang.append)
    for _ in range(100):
        alarms.set("status", 0.05)
    assert alarms.pending() == {"status"}
    await asyncio.sleep(0.1)
    assert rang == ["status"]
    assert alarms.pending() == frozenset()


@pytest.mark.parametrize(
    ("first", "second", "rings_at"),
    [
        (0.2, 0.02, "second"),  # set keeps the sooner one
        (0.02, 0.2, "first"),
    ],
)
async def test_set_keeps_the_sooner_alarm(first: float, second: float, rings_at: str) -> None:
    rang: list[str] = []
    alarms = Alarms(rang.append)
    alarms.set("resend", first)
    alarms.set("resend", second)
    await asyncio.sleep(0.1)
    assert rang == ["resend"]  # rang by 0.1 s, so the 0.02 s one was kept
    await asyncio.sleep(0.15)
    assert rang == ["resend"], f"a second ring: the {rings_at} was not the only one"


async def test_move_can_make_an_alarm_later_and_cancel_all_silences_them() -> None:
    rang: list[str] = []
    alarms = Alarms(rang.append)
    alarms.set("windows clock", 0.02)
    alarms.move("windows clock", 0.3)
    alarms.set("refresh", 0.02)
    await asyncio.sleep(0.1)
    assert rang == ["refresh"]
    alarms.cancel_all()
    await asyncio.sleep(0.3)
    assert rang == ["refresh"]


async def test_budget_lets_empty_replays_through_and_holds_what_does_not_fit() -> None:
    budget = WorkBudget(100)
    assert await budget.take(0) == 0
    assert await budget.take(60) == 60
    waiting = asyncio.create_task(budget.take(50))
    await asyncio.sleep(0.01)
    assert not waiting.done()  # 60 + 50 > 100
    assert await budget.take(0) == 0  # a new cluster with nothing to replay never waits
    budget.give(60)
    assert await asyncio.wait_for(waiting, 1) == 50
    assert budget.used == 50


async def test_a_replay_larger_than_the_budget_goes_alone() -> None:
    budget = WorkBudget(100)
    assert await budget.take(1_000_000) == 100
    small = asyncio.create_task(budget.take(1))
    await asyncio.sleep(0.01)
    assert not small.done()
    budget.give(100)
    assert await asyncio.wait_for(small, 1) == 1
