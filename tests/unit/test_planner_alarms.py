"""The planner's alarms (one handle per duty, coalesced) and its replay budget (work, not a
count of clusters): pure enough to test on the event loop alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.planner.shell.alarms import Alarms
from services.planner.shell.budget import Backlog, WorkBudget
from services.planner.shell.inbox import Inbox


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


async def test_the_backlog_holds_the_taps_and_never_a_clusters_own_loop() -> None:
    """A cluster's queue is unbounded (its loop's own puts — a duty's release, a re-check —
    never wait on it), counted in the replica's backlog, which the hub's taps wait on."""
    backlog = Backlog(limit=3)
    inbox = Inbox(None, "c", WorkBudget(), backlog)  # type: ignore[arg-type]
    inbox.queue.put_nowait(("caught up", None))  # the replay is over: delivered, not held
    await inbox.queue.get()
    for i in range(5):  # past the limit: nothing waits
        inbox.queue.put_nowait(("recheck", i))
    assert backlog.queued == 5
    room = asyncio.create_task(backlog.room())
    await asyncio.sleep(0.01)
    assert not room.done()  # a tap would wait here
    for _ in range(3):
        await inbox.queue.get()
    await asyncio.wait_for(room, 1)
    assert backlog.queued == 2


async def test_a_closed_inbox_gives_its_backlog_back_and_takes_nothing_more() -> None:
    backlog = Backlog(limit=100)
    inbox = Inbox(None, "c", WorkBudget(), backlog)  # type: ignore[arg-type]
    msg: Any = object()
    inbox.deliver("server", msg)  # held back: the replay has not ended
    inbox.ring("status")
    assert backlog.queued == 2
    inbox.close()
    assert backlog.queued == 0
    inbox.deliver("server", msg)
    inbox.ring("status")
    assert backlog.queued == 0
    assert inbox.queue.empty()


async def test_the_budget_admits_at_most_so_many_clusters_at_once() -> None:
    budget = WorkBudget(100, at_once=2)
    await budget.take(0)
    await budget.take(0)
    third = asyncio.create_task(budget.take(0))  # nothing to replay, but going live is work
    await asyncio.sleep(0.01)
    assert not third.done()
    budget.give(0)
    assert await asyncio.wait_for(third, 1) == 0


async def test_a_duty_goes_before_the_messages_already_queued() -> None:
    inbox = Inbox(None, "c", WorkBudget(), Backlog())  # type: ignore[arg-type]
    inbox.ring("status")  # nothing queued: through the queue, which wakes a waiting loop
    assert await inbox.get() == ("status", None)
    for i in range(3):
        inbox.queue.put_nowait(("recheck", i))
    inbox.ring("status")
    inbox.ring("status")  # once, however often it rings before it runs
    assert [await inbox.get() for _ in range(4)] == [
        ("status", None),
        ("recheck", 0),
        ("recheck", 1),
        ("recheck", 2),
    ]
