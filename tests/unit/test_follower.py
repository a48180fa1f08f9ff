"""A follower subscribes again when its consumer vanished (a NATS restart between creating it
and the first question about it), and still raises for a stream that does not exist."""

from __future__ import annotations

import pytest
from nats.js.errors import NotFoundError

from services.common.bus.follower import _consumer_lost


@pytest.mark.parametrize(
    ("exc", "lost"),
    [
        (NotFoundError(code=404, err_code=10014, description="consumer not found"), True),
        (NotFoundError(code=404, err_code=10059, description="stream not found"), False),
        (NotFoundError(), False),
        (TimeoutError(), False),
    ],
)
def test_only_a_vanished_consumer_is_subscribed_again(exc: BaseException, lost: bool) -> None:
    assert _consumer_lost(exc) is lost
