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
        await asyncio.sleep(0)
        _hold_the_loop(0.5)
        await asyncio.to_thread(watch.reported.wait, 30)  # logged once the loop turns again
        task.cancel()

    with caplog.at_level(logging.WARNING, logger="driftbus.stalls"):
        asyncio.run(main())
    # a loaded machine may stall the loop elsewhere too: the one the test made is among them
    held = [r for r in caplog.records if r.where and r.where[0]["stack"]]  # type: ignore[attr-defined]
    assert any(
        r.where[0]["stack"][0].startswith("tests.unit.test_stalls:_hold_the_loop:")  # type: ignore[attr-defined]
        and r.held_s >= watch.threshold  # type: ignore[attr-defined]
        for r in held
    )


COLLECTIONS = 3
"""Full collections of the test's heap that hold the loop (each walks two million lists)."""


def test_a_stall_in_the_garbage_collector_says_so(caplog: pytest.LogCaptureFixture) -> None:
    watch = stalls.StallWatch(0.1, packages=(*stalls.OURS, "tests"))
    heap = [[i] for i in range(2_000_000)]  # containers the collector walks

    async def main() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0)
        for _ in range(COLLECTIONS):
            gc.collect()
        await asyncio.to_thread(watch.reported.wait, 30)  # a census takes a while
        task.cancel()

    with caplog.at_level(logging.WARNING, logger="driftbus.stalls"):
        asyncio.run(main())
    del heap
    record = max(caplog.records, key=lambda r: r.gc_s)  # type: ignore[attr-defined]
    # the collector, not the code around it, held the loop: most of the stall is its
    assert record.gc_s >= record.held_s / 2  # type: ignore[attr-defined]
    assert len(record.collections) >= 1  # type: ignore[attr-defined]
    # what the collector walked: the test's two million lists first
    tracked = record.tracked  # type: ignore[attr-defined]
    assert tracked["total"] >= 2_000_000
    assert next(k for k in tracked if k != "total") == "list"
