"""Numbers read off a JetStream message's reply subject without nats-py's full metadata parse
(``bus.stream_sequence``, ``bus.num_pending``): the same as ``Msg.metadata`` for every form."""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from services.common import bus

V1 = "$JS.ACK.DRIFTBUS_SERVER.ord-1.1.4711.12.1764412345000000000.3"
V2 = "$JS.ACK._.ACCHASH.DRIFTBUS_SERVER.ord-1.1.4711.12.1764412345000000000.3.rnd"


def msg(reply: str) -> Msg:
    return Msg(None, subject="driftbus.server.c.x", reply=reply, data=b"")  # type: ignore[arg-type]


@pytest.mark.parametrize("reply", [V1, V2], ids=["v1", "v2 (domain, account hash)"])
def test_the_fast_reads_agree_with_the_metadata(reply: str) -> None:
    m = msg(reply)
    assert bus.stream_sequence(m) == m.metadata.sequence.stream == 4711
    assert bus.num_pending(m) == m.metadata.num_pending == 3


@pytest.mark.parametrize("reply", ["", "_INBOX.abc", "$JS.ACK.too.short"])
def test_a_message_without_jetstream_metadata_is_refused_as_before(reply: str) -> None:
    with pytest.raises(Exception):  # noqa: B017, PT011 - nats-py's NotJSMessageError, as before
        bus.stream_sequence(msg(reply))
