"""The rollout driver's rest between ticks: its share of the replica stays bounded."""

from __future__ import annotations

import pytest

from services.fleet.driver.drive import TICK_SHARE, rest_after


@pytest.mark.parametrize(
    ("spent", "interval", "rest"),
    [
        (0.0, 1.0, 0.0),  # nothing to do: no rest, the next wake ticks at once
        (0.001, 1.0, 0.004),  # a small fleet: 4 ms
        (0.1, 1.0, 0.4),  # 1,000 clusters: at most a fifth of the loop
        (0.5, 1.0, 1.0),  # never longer than a tick interval
        (-0.1, 1.0, 0.0),  # a clock that went back rests nothing
    ],
)
def test_rest_after(spent: float, interval: float, rest: float) -> None:
    assert rest_after(spent, interval) == pytest.approx(rest)


def test_the_share_it_keeps() -> None:
    spent = 0.05
    assert spent / (spent + rest_after(spent, 10.0)) == pytest.approx(TICK_SHARE)
