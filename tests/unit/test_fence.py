"""The applier's fence: intents of a deposed planner (a lower claim revision) are dropped."""

from __future__ import annotations

import pytest

from services.applier.fence import Fence


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        pytest.param([("intent", 5)], [True], id="first-intent-sets-the-fence"),
        pytest.param([("intent", 5), ("intent", 5)], [True, True], id="same-planner-again"),
        pytest.param(
            [("intent", 5), ("intent", 9), ("intent", 5)],
            [True, True, False],
            id="late-intent-of-the-deposed-planner",
        ),
        pytest.param(
            [("claim", 9), ("intent", 5)], [None, False], id="claim-moved-before-any-new-intent"
        ),
        pytest.param([("claim", 9), ("intent", 9)], [None, True], id="the-new-planner"),
        pytest.param(
            [("intent", 12), ("claim", 9), ("intent", 12)],
            [True, None, True],
            id="an-older-claim-read-never-lowers-it",
        ),
        pytest.param([("claim", None), ("intent", 0)], [None, True], id="never-claimed-cluster"),
    ],
)
def test_fence(steps: list[tuple[str, int | None]], expected: list[bool | None]) -> None:
    fence = Fence()
    got: list[bool | None] = []
    for kind, token in steps:
        if kind == "claim":
            fence.raise_to(token)
            got.append(None)
        else:
            assert token is not None
            got.append(fence.admits(token))
    assert got == expected
