"""The lease rule (services/core/lease.py) the planners' shard claims and the rollout driver's
lease both follow: who is live on the local clock, whose entry may be taken, how long a holder
may still act, and what a lease entry names. One table row per case."""

from __future__ import annotations

import pytest

from services.core.lease import (
    Term,
    holder_of,
    lease_holds,
    lease_token,
    lease_until,
    lease_value,
    live,
    may_claim,
)


@pytest.mark.parametrize(
    ("last_change", "now", "expected"),
    [
        pytest.param({}, 100.0, set(), id="nobody"),
        pytest.param({"a": 95.0, "b": 89.0}, 100.0, {"a"}, id="b-missed-its-heartbeats"),
        pytest.param({"a": 90.0}, 100.0, {"a"}, id="exactly-the-timeout-is-still-live"),
        pytest.param({"a": 100.0, "b": 99.9}, 100.0, {"a", "b"}, id="both"),
        pytest.param({"driver-a": 89.9}, 100.0, set(), id="a-driver-silent-past-the-timeout"),
    ],
)
def test_live(last_change: dict[str, float], now: float, expected: set[str]) -> None:
    assert live(last_change, now, timeout=10.0) == expected


@pytest.mark.parametrize(
    ("last_ok", "now", "holds"),
    [
        pytest.param(float("-inf"), 0.0, False, id="never-written-no-lease"),
        pytest.param(100.0, 100.0, True, id="just-sent"),
        pytest.param(100.0, 107.9, True, id="within-timeout-minus-one-interval"),
        pytest.param(100.0, 108.0, False, id="stops-one-interval-before-others-take-over"),
        pytest.param(100.0, 110.0, False, id="others-may-take-over-now"),
    ],
)
def test_lease_holds(last_ok: float, now: float, holds: bool) -> None:
    assert lease_holds(last_ok, now, interval=2.0, timeout=10.0) is holds
    assert (now < lease_until(last_ok, interval=2.0, timeout=10.0)) is holds


@pytest.mark.parametrize(
    ("holder", "takes"),
    [
        pytest.param("", True, id="released-or-unreadable-is-free"),
        pytest.param("me", True, id="own-entry-is-free"),
        pytest.param("dead", True, id="held-by-one-not-live-is-free"),
        pytest.param("other", False, id="held-by-a-live-one-waits"),
    ],
)
def test_may_claim(holder: str, takes: bool) -> None:
    assert may_claim(holder, "me", {"me", "other"}) is takes


@pytest.mark.parametrize(
    ("data", "field", "holder"),
    [
        pytest.param(b'{"planner": "p-1", "at": "t"}', "planner", "p-1", id="a-claim"),
        pytest.param(b'{"planner": ""}', "planner", "", id="a-released-claim"),
        pytest.param(lease_value("planner-a", 57), "driver", "planner-a", id="the-driver-lease"),
        pytest.param(b"{}", "driver", "", id="names-nobody"),
        pytest.param(None, "planner", "", id="empty"),
        pytest.param(b"[1]", "planner", None, id="not-an-object"),
        pytest.param(b"not json", "planner", None, id="not-json"),
    ],
)
def test_holder_of(data: bytes | None, field: str, holder: str | None) -> None:
    assert holder_of(data, field) == holder


@pytest.mark.parametrize(
    ("data", "token"),
    [
        pytest.param(lease_value("planner-a", 57), 57, id="a-renewal-names-its-token"),
        pytest.param(lease_value("planner-a", 0), None, id="a-take-does-not-know-it-yet"),
        pytest.param(b'{"driver": "planner-a"}', None, id="an-older-driver"),
        pytest.param(b'{"driver": "planner-a", "token": "57"}', None, id="not-a-number"),
        pytest.param(b'{"driver": "planner-a", "token": true}', None, id="a-boolean"),
        pytest.param(b'{"driver": "planner-a", "token": -3}', None, id="not-positive"),
        pytest.param(b"not json", None, id="not-json"),
        pytest.param(None, None, id="no-entry"),
    ],
)
def test_lease_token(data: bytes | None, token: int | None) -> None:
    assert lease_token(data) == token


@pytest.mark.parametrize(
    ("last_ok", "now", "holds", "late"),
    [
        pytest.param(float("-inf"), 100.0, False, float("inf"), id="never-written"),
        pytest.param(100.0, 107.0, True, -1.0, id="renewed-lately"),
        pytest.param(100.0, 108.5, False, 0.5, id="a-stall-past-its-end"),
    ],
)
def test_a_term_holds_on_the_clock_it_is_given(
    last_ok: float, now: float, holds: bool, late: float
) -> None:
    term = Term(interval=2.0, timeout=10.0, clock=lambda: now, last_ok=last_ok)
    assert (term.holds, term.late()) == (holds, late)
