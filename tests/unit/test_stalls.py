"""The stall watch names the code that holds the event loop, and says nothing while it turns."""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import time

import pytest

from services.common import stalls


def _hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # a step that never yields


@pytest.mark.parametrize(
    ("raw", "expected"), [("", None), ("0", None), ("-1", None), ("x", None), ("0.2", 0.2)]
)
def test_threshold_from_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: float | None
) -> None:
    monkeypatch.setenv(stalls.ENV, raw)
    assert stalls.from_environment() == expected
    assert len(list(stalls.watched())) == (expected is not None)


def test_summary_shares_most_frequent_first() -> None:
    samples = collections.Counter({("a:f:1",): 3, ("b:g:2",): 1})
    assert stalls.summary(samples) == [
        {"share": 0.75, "stack": ["a:f:1"]},
        {"share": 0.25, "stack": ["b:g:2"]},
    ]


def test_a_held_loop_is_reported_with_its_code(caplog: pytest.LogCaptureFixture) -> None:
    watch = stalls.StallWatch(0.1, packages=(*stalls.OURS, "tests"))

    async def main() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.3)  # turning: no stall
        assert watch.stalls == 0
        _hold_the_loop(0.5)
        await asyncio.sleep(0.3)  # the watch sees it turn again
        task.cancel()

    with caplog.at_level(logging.WARNING, logger="driftbus.stalls"):
        asyncio.run(main())
    assert watch.stalls == 1
    (record,) = caplog.records
    assert 0.3 < record.held_s < 0.8  # type: ignore[attr-defined]
    top = record.where[0]  # type: ignore[attr-defined]
    assert top["stack"][0].startswith("tests.unit.test_stalls:_hold_the_loop:")


def _until_reported(watch: stalls.StallWatch) -> None:
    deadline = time.monotonic() + 10
    while watch.stalls == 0 and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_stall_in_the_garbage_collector_says_so(caplog: pytest.LogCaptureFixture) -> None:
    watch = stalls.StallWatch(0.1, packages=(*stalls.OURS, "tests"))
    heap = [[i] for i in range(2_000_000)]  # containers the collector walks

    async def main() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.2)
        started = time.monotonic()
        while time.monotonic() - started < 0.3:
            gc.collect()
        await asyncio.sleep(0.3)  # the loop turns: the watch reports (a census takes a while)
        await asyncio.to_thread(_until_reported, watch)
        task.cancel()

    with caplog.at_level(logging.WARNING, logger="driftbus.stalls"):
        asyncio.run(main())
    del heap
    (record,) = caplog.records
    assert record.gc_s > 0.2  # type: ignore[attr-defined]
    assert record.gc_s <= record.held_s + 0.1  # type: ignore[attr-defined]
    # what the collector walked: the test's two million lists first
    tracked = record.tracked  # type: ignore[attr-defined]
    assert tracked["total"] >= 2_000_000
    assert next(k for k in tracked if k != "total") == "list"
