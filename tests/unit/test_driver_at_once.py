"""Which of a tick's placements the rollout driver publishes together (``at_once``)."""

from __future__ import annotations

import datetime as dt

import pytest

from services.fleet.driver.drive import PLACEMENTS_AT_ONCE, at_once
from services.fleet.rollout.steps import Place, Remove

AT = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def place(cluster: str, seq: int = 1) -> Place:
    return Place(cluster, "target", seq, AT)


def remove(cluster: str, seq: int = 1) -> Remove:
    return Remove(cluster, False, seq, AT)


@pytest.mark.parametrize(
    ("actions", "groups"),
    [
        ([], []),
        ([place("a")], [["a"]]),
        ([place("a"), place("b"), remove("c")], [["a", "b", "c"]]),
        # two of one cluster never together: they land on one subject, in the order made
        ([remove("a"), place("b"), place("a", 2)], [["a", "b"], ["a"]]),
        ([place(f"c{i}") for i in range(PLACEMENTS_AT_ONCE + 1)],
         [[f"c{i}" for i in range(PLACEMENTS_AT_ONCE)], [f"c{PLACEMENTS_AT_ONCE}"]]),
    ],
)  # fmt: skip
def test_at_once(actions: list[Place | Remove], groups: list[list[str]]) -> None:
    got = list(at_once(actions))
    assert [[a.cluster for a in g] for g in got] == groups
    assert [a for g in got for a in g] == actions  # every one, in order
