"""Freed heap memory goes back to the system after a burst (glibc's malloc_trim)."""

from __future__ import annotations

import gc
import os
import weakref

from bench.stack import rss_bytes
from services.common import heap


def _rss() -> int:
    return rss_bytes(os.getpid())


def test_a_freed_burst_of_manifest_sized_objects_is_handed_back() -> None:
    # what taking in a big revision leaves: ~600-byte copies freed, small survivors among them
    burst = [bytes(600) + i.to_bytes(4, "big") for i in range(100_000)]
    survivors = [str(i) for i in range(0, 100_000, 50)]
    del burst
    before = _rss()
    heap.release_freed()
    assert before - _rss() > 20 * 1024 * 1024, "under 20 MiB of the ~60 MiB freed came back"
    assert survivors[-1] == "99950"


def test_what_lives_now_is_left_out_of_later_collections_and_still_freed() -> None:
    gc.collect()
    long_lived = [[i] for i in range(10_000)]
    held = Holder()
    ref = weakref.ref(held)
    try:
        heap.keep_long_lived(heap.LONG_LIVED_AT - 1)  # a small burst: nothing frozen
        assert gc.get_freeze_count() == 0
        heap.keep_long_lived(heap.LONG_LIVED_AT)
        assert gc.get_freeze_count() >= 10_000
        assert len(gc.get_objects()) < 10_000  # a full collection no longer walks them
        del held
        assert ref() is None  # still freed when nothing refers to it
    finally:
        gc.unfreeze()
    del long_lived


class Holder:
    pass


def test_a_cycle_kept_long_lived_is_collected_once_forgotten() -> None:
    """A stopped cluster's planner is a reference cycle: kept long-lived it would stay forever;
    forgotten, the next collection frees it."""
    gc.collect()
    cycle = Holder()
    cycle.me = cycle  # type: ignore[attr-defined]
    ref = weakref.ref(cycle)
    try:
        heap.keep_long_lived(heap.LONG_LIVED_AT)
        del cycle
        gc.collect()
        assert ref() is not None  # frozen: the collector does not look at it
        heap.forget_long_lived()
        gc.collect()
        assert ref() is None
    finally:
        gc.unfreeze()


def test_young_objects_are_collected_less_often_and_a_higher_setting_stays() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # CPython's default
        heap.collect_young_rarely()
        assert gc.get_threshold() == (heap.YOUNG_EVERY, 10, 10)
        gc.set_threshold(heap.YOUNG_EVERY * 5, 10, 10)
        heap.collect_young_rarely()
        assert gc.get_threshold()[0] == heap.YOUNG_EVERY * 5
    finally:
        gc.set_threshold(*before)
