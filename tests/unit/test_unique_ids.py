"""``bus.unique_id``: ids unique across processes, forked ones too."""

from __future__ import annotations

import os

from services.common import bus


def test_a_forked_process_hands_out_ids_of_its_own() -> None:
    """``unique_id`` names batch subjects, which are also their messages' Nats-Msg-Id: a
    process forked after the import (a pre-forking server, the suite's warm starts) that handed
    out its parent's next ids would have its messages dropped by JetStream as duplicates."""
    bus.unique_id()  # the state a child inherits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id, to the parent
        os.write(write, bus.unique_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as child:
        childs = child.read().decode()
    assert len(childs) == 22
    assert childs != bus.unique_id()
