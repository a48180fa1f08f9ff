"""Transient trouble is retried with capped exponential backoff, honouring Retry-After."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.applier.classify import FIRST_DELAY, RETRY_AFTER_CAP, retry_delay

CASES: list[tuple[str, int, float, float | None, float]] = [
    # (case, attempt, cap, retry_after, delay)
    ("first-failure-waits-one-second", 1, 60.0, None, 1.0),
    ("second-waits-two", 2, 60.0, None, 2.0),
    ("third-waits-four", 3, 60.0, None, 4.0),
    ("sixth-waits-thirty-two", 6, 60.0, None, 32.0),
    ("seventh-is-capped", 7, 60.0, None, 60.0),
    ("a-thousandth-is-capped-without-overflow", 1000, 60.0, None, 60.0),
    ("attempt-zero-waits-the-first-delay", 0, 60.0, None, FIRST_DELAY),
    ("a-negative-attempt-waits-the-first-delay", -3, 60.0, None, FIRST_DELAY),
    ("a-cap-below-the-first-delay-wins", 1, 0.5, None, 0.5),
    ("a-huge-cap-still-grows-by-doubling", 20, 1e9, None, 2.0**19),
    ("retry-after-longer-than-the-backoff-is-honoured", 1, 60.0, 30.0, 30.0),
    ("retry-after-above-the-backoff-cap-is-honoured", 2, 60.0, 300.0, 300.0),
    ("retry-after-is-capped", 1, 60.0, 3600.0, RETRY_AFTER_CAP),
    ("an-infinite-retry-after-is-capped", 1, 60.0, math.inf, RETRY_AFTER_CAP),
    ("retry-after-shorter-than-the-backoff-is-ignored", 5, 60.0, 3.0, 16.0),
    ("retry-after-equal-to-the-backoff", 3, 60.0, 4.0, 4.0),
    ("retry-after-zero-is-ignored", 2, 60.0, 0.0, 2.0),
    ("a-negative-retry-after-is-ignored", 2, 60.0, -5.0, 2.0),
    ("a-nan-retry-after-is-ignored", 2, 60.0, math.nan, 2.0),
    ("retry-after-up-to-a-cap-above-its-own-cap", 1, 900.0, 800.0, 800.0),
]


@pytest.mark.parametrize(
    ("case", "attempt", "cap", "retry_after", "delay"), CASES, ids=[c[0] for c in CASES]
)
def test_retry_delay(
    case: str, attempt: int, cap: float, retry_after: float | None, delay: float
) -> None:
    assert retry_delay(attempt, cap=cap, retry_after=retry_after) == delay


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-5, 10_000),
    st.floats(0.1, 3600.0),
    st.none() | st.floats(allow_nan=True, allow_infinity=True),
)
def test_delay_is_bounded_and_never_shorter_than_asked(
    attempt: int, cap: float, retry_after: float | None
) -> None:
    delay = retry_delay(attempt, cap=cap, retry_after=retry_after)
    backoff = retry_delay(attempt, cap=cap)
    assert 0 < backoff <= cap
    assert delay >= backoff
    assert delay <= max(cap, RETRY_AFTER_CAP)
    if retry_after is not None and retry_after == retry_after:  # not NaN
        assert delay >= min(retry_after, RETRY_AFTER_CAP)


@settings(max_examples=100, deadline=None)
@given(st.floats(1.0, 3600.0))
def test_backoff_never_shrinks_between_attempts(cap: float) -> None:
    delays = [retry_delay(a, cap=cap) for a in range(1, 60)]
    assert delays == sorted(delays)
    assert delays[-1] == cap
