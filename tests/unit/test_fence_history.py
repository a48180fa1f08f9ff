"""The rollout driver's fence on a rebuild (issue 41 item 12, the fence's former known limit):
when a planner with no memory of a bundle's fence reads its history (``history_needed``), and
which message of that history is in force (``in_force_of``: the fence replayed); the lease
entry that carries the holder's token (``lease_value``, ``lease_token``). The black-box test is
tests/integration/test_fleet.py::
test_a_stale_placement_that_lands_while_no_planner_serves_is_refused_on_rebuild."""

from __future__ import annotations

import pytest

from schemas.bundle import Bundle
from services.core.lease import holder_of, lease_token, lease_value
from services.planner.rule.revision import history_needed, in_force_of, republishable


def placement(token: int, *, fleet: bool = True) -> Bundle:
    return Bundle(cluster="c", bundle="web", revision="r", fleet=fleet, fencing_token=token)


@pytest.mark.parametrize(
    ("message", "fences", "lease", "needed"),
    [
        (placement(57), {}, 57, False),  # the holder's own term: a normal rebuild, no read
        (placement(61), {}, 57, False),  # newer than the entry says (renewed since): no read
        (placement(41), {}, 57, True),  # an older term's: perhaps after a newer one
        (placement(41), {}, None, True),  # the lease does not say: read
        (placement(41), {"web": 41}, 57, False),  # remembered: the memory's fence decides
        (placement(41), {"api": 57}, 57, True),  # another bundle's memory says nothing
        (placement(0), {}, 57, False),  # no token: never fenced
        (placement(41, fleet=False), {}, 57, False),  # a user's publish: never fenced
    ],
)
def test_the_history_is_read_only_for_a_placement_older_than_the_lease_holder(
    message: Bundle, fences: dict[str, int], lease: int | None, needed: bool
) -> None:
    assert history_needed(message, fences, lease) is needed


F, U = True, False  # a fleet placement, a message that is not the driver's
TABLE = [
    ([(F, 41)], 0, 41),  # one placement: in force
    ([(F, 41), (F, 57)], 1, 57),  # a newer driver's: in force
    ([(F, 41), (F, 57), (F, 41)], 1, 57),  # the deposed driver's, late: r2 stays
    ([(F, 57), (F, 57), (F, 41)], 1, 57),  # the newest of the highest token
    ([(F, 57), (U, 0), (F, 41)], 1, 57),  # a user's publish after r2 stays in force
    ([(F, 57), (F, 41), (U, 0)], 2, 57),  # a user's publish after the stale one: taken
    ([(F, 57), (F, 41), (F, 63)], 2, 63),  # a third driver's placement: taken
    ([(F, 57), (F, 41), (F, 57)], 2, 57),  # r2 published again by a planner that refused
    ([(U, 0), (F, 0)], 1, 0),  # no tokens (older drivers): the last, as ever
    ([(F, 41), (F, 57), (F, 41), (F, 41)], 1, 57),  # sent twice: both refused
]


@pytest.mark.parametrize(("history", "index", "highest"), TABLE)
def test_the_message_in_force_is_the_last_the_fence_lets_through(
    history: list[tuple[bool, int]], index: int, highest: int
) -> None:
    assert in_force_of(history) == (index, highest)


def test_an_empty_history_holds_nothing_in_force() -> None:
    assert in_force_of([]) == (-1, 0)


@pytest.mark.parametrize(
    ("data", "token"),
    [
        (lease_value("planner-a", 57), 57),
        (lease_value("planner-a", 0), None),  # a take: the token is not known yet
        (b'{"driver": "planner-a"}', None),  # a driver older than this one
        (b'{"driver": "planner-a", "token": "57"}', None),
        (b'{"driver": "planner-a", "token": true}', None),
        (b'{"driver": "planner-a", "token": -3}', None),
        (b"[57]", None),
        (b"not json", None),
        (None, None),
    ],
)
def test_the_lease_entry_names_its_holders_token(data: bytes | None, token: int | None) -> None:
    assert lease_token(data) == token


def test_the_lease_entry_still_names_its_holder() -> None:
    assert holder_of(lease_value("planner-a", 57), "driver") == "planner-a"


@pytest.mark.parametrize(
    ("in_force", "highest", "again"),
    [
        ((True, 57), 57, True),  # the newest driver's placement: published again
        ((True, 57), 41, True),  # above the fence
        ((False, 0), 57, True),  # a user's publish is never fenced
        ((True, 0), 57, True),  # a placement without a token (an older driver's)
        # a newer driver's placement (61) raised the fence and was refused: the older one in
        # force would be dropped in turn and published again, round and round
        ((True, 57), 61, False),
    ],
)
def test_the_message_in_force_is_published_again_only_if_the_fence_lets_it_through(
    in_force: tuple[bool, int], highest: int, again: bool
) -> None:
    assert republishable(in_force, highest) is again
