"""One cluster's checkpoint writer: after the facts of a burst are folded, what they left in the
entries goes to CHECKPOINTS (``rule.checkpoint``), with the stream sequences it covers.

A quiet cluster writes nothing: the alarm is set by a fact folded live, and rings
``settings.checkpoint_interval`` seconds later (longer for a big cluster: a checkpoint is
rewritten whole, so one of 10 MB waits 100 s), once for every fact of the burst. Facts folded
after it are on their streams above its sequences, where a reader finds them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.planner.rule import checkpoint, messages
from services.planner.shell.alarms import Alarms

log = logging.getLogger("driftbus.planner")

BYTES_PER_SECOND = 100_000
"""How much checkpoint a cluster may write per second of delay (``delay``)."""


class Checkpointer:
    """Writes ``state``'s checkpoint when facts changed it, at most once per delay."""

    def __init__(
        self,
        *,
        state: ClusterState,
        publisher: bus.Publisher,
        alarms: Alarms,
        read_up_to: Callable[[], Mapping[str, int]],
        interval: float,
    ) -> None:
        self.state = state
        self.publisher = publisher
        self.alarms = alarms
        self.read_up_to = read_up_to
        self.interval = interval
        self.dirty = False
        self.last_bytes = 0
        self.written = 0
        """Checkpoints written since start (what the tests and the stats count)."""
        self._prefix = uuid.uuid4().hex[:12]

    def delay(self) -> float:
        return max(self.interval, self.last_bytes / BYTES_PER_SECOND)

    def folded(self) -> None:
        """A fact was folded live: write within the delay (coalesced with the rest of its
        burst). A non-positive interval writes none (checkpoints off)."""
        if self.interval <= 0:
            return
        self.dirty = True
        self.alarms.set("checkpoint", self.delay())

    async def write(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        st = self.state
        self.written += 1
        generation = f"{self._prefix}-{self.written}"
        found = checkpoint.parts(
            st.cluster,
            ((slot[1], e) for slot, e in st.entries.items(cluster=st.cluster)),
            self.read_up_to(),
            now=messages.now(),
            generation=generation,
        )
        for subject, data in found:
            await self.publisher.publish(subject, data, msg_id=f"{subject}/{generation}")
        self.last_bytes = sum(len(data) for _, data in found)
        log.debug(
            "cluster %s: checkpoint %s written (%d parts, %d bytes)",
            st.cluster,
            generation,
            len(found),
            self.last_bytes,
        )
