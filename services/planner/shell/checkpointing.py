"""One cluster's checkpoint: after the facts of a burst are folded, what they left in the
entries goes to CHECKPOINTS (``rule.checkpoint``), with the stream sequences it covers; and when
a planner takes the cluster, its rebuild starts from it (``restore``; the inbox replays only
the facts above it).

A quiet cluster writes nothing: the alarm is set by a fact folded live, and rings
``settings.checkpoint_interval`` seconds later (longer for a big cluster: a checkpoint is
rewritten whole, so one of 10 MB waits 100 s), once for every fact of the burst. Facts folded
after it are on their streams above its sequences, where a reader finds them.

A checkpoint is also what lets SERVER and APPLIED forget: the watchers' and appliers' batches of
facts (``ServerFacts``, ``AppliedFacts``) stay on their streams until a checkpoint of their
cluster covers them, and are purged then
(``purge``) — not at once, but below the newest checkpoint written at least ``purge_after``
seconds before (``--checkpoint-purge-after``), so a reader that took an earlier checkpoint (the
watcher's seed, ``driftbus plan``, a planner taking the cluster over) still finds every fact
after it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Callable, Mapping

from schemas.subjects import batch_filter
from services.common import bus
from services.planner.memory.cluster import ClusterState
from services.planner.rule import checkpoint, messages
from services.planner.rule.decide import Desired, restore
from services.planner.shell.alarms import Alarms
from services.planner.shell.yielding import pace

log = logging.getLogger("driftbus.planner")

BATCHED = {"server": bus.SERVER, "applied": bus.APPLIED}
"""The fact streams whose batches a checkpoint lets go, by the kind the planner reads them as."""
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
        js: bus.JetStream | None = None,
        purge_after: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.purge_after = purge_after
        self.js = js
        """Where SERVER's covered batches are purged (None: never)."""
        self.clock = clock
        self._covered: collections.deque[tuple[float, dict[str, int]]] = collections.deque()
        """(when, the sequence it covers per fact kind) of each checkpoint written, oldest
        first."""
        self.purged_below: dict[str, int] = {}
        self.state = state
        self.publisher = publisher
        self.alarms = alarms
        self.read_up_to = read_up_to
        self.interval = interval
        self.dirty = False
        self.last_bytes = 0
        self.written = 0
        """Checkpoints written since start: with ``_prefix``, each write's generation."""
        self._prefix = uuid.uuid4().hex[:12]
        self._parts = 1
        """How many parts the last checkpoint took: the next tries as many first."""

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
        # taken as it is now, then encoded in steps and deflated beside the event loop: at
        # 100,000 objects this was 2-3 s in one piece, longer than the replica's lease lasts
        frozen = st.entries.frozen(st.cluster)
        kept = st.details.kept(st.cluster)
        up_to = dict(self.read_up_to())
        now = messages.now()
        objects = []
        for i, o in enumerate(
            checkpoint.objects_of(frozen.items(), lambda k: kept.get(k, checkpoint.NOTHING_KEPT))
        ):
            await pace(i)
            objects.append(o)
        found = await asyncio.to_thread(
            checkpoint.split,
            st.cluster,
            objects,
            up_to,
            now=now,
            generation=generation,
            count=max(1, self._parts // 2),  # a cluster that shrank needs fewer
        )
        self._parts = len(found)
        for subject, data in found:
            await self.publisher.publish(subject, data, msg_id=f"{subject}/{generation}")
        self.last_bytes = sum(len(data) for _, data in found)
        self._covered.append((self.clock(), up_to))
        await self.purge()
        log.debug(
            "cluster %s: checkpoint %s written (%d parts, %d bytes)",
            st.cluster,
            generation,
            len(found),
            self.last_bytes,
        )

    def purgeable(self) -> dict[str, int]:
        """Per batched fact kind (``BATCHED``), the sequence below which the cluster's batches
        may go: one past what the newest checkpoint written ``purge_after`` seconds ago or
        longer covers (none: nothing yet)."""
        old_enough = self.clock() - self.purge_after
        while len(self._covered) > 1 and self._covered[1][0] <= old_enough:
            self._covered.popleft()
        if not self._covered or self._covered[0][0] > old_enough:
            return {}
        covered = self._covered[0][1]
        return {kind: covered[kind] + 1 for kind in BATCHED if covered.get(kind, 0) > 0}

    async def purge(self) -> None:
        """Purge the cluster's batches of facts that a checkpoint covers (``purgeable``). A
        failure only leaves them for the next write."""
        if self.js is None:
            return
        for kind, below in self.purgeable().items():
            if below - 1 <= self.purged_below.get(kind, 0):
                continue
            try:
                await bus.purge_below(
                    self.js, BATCHED[kind], batch_filter(kind, self.state.cluster), below
                )
            except Exception as exc:  # noqa: BLE001 - kept for the next checkpoint to purge
                log.warning("cluster %s: %s batches not purged: %s", self.state.cluster, kind, exc)
                continue
            self.purged_below[kind] = below - 1

    async def restore(self, found: checkpoint.Checkpoint) -> None:
        """Start the rebuild from the cluster's checkpoint: its entries and what the facts left
        beside them, as if the facts up to its sequences had been replayed (the replay brings
        only those above them)."""
        st = self.state
        for i, (key, e) in enumerate(found.entries.items()):
            await pace(i)  # 100,000 of them: heartbeats go on meanwhile
            slot = (st.cluster, key)
            known = st.entries.get(slot)  # none: the replay puts the checkpoint first
            if known is not None and known.manifest_sha is not None:  # keep what is desired
                desired = Desired(
                    known.bundle, known.revision, known.manifest_sha, known.prune,
                    known.correct_drift,
                )  # fmt: skip
                e = restore(e, desired)
            st.entries[slot] = e
        for i, (key, (health, message, outcome)) in enumerate(found.kept.items()):
            await pace(i)
            slot = (st.cluster, key)
            if health is not None:
                st.details.set_health(slot, health, message)
            if outcome is not None:
                st.details.set_outcome(slot, outcome)
        for kind, stream in (("applied", bus.APPLIED), ("outcome", bus.OUTCOMES)):
            covered = found.read_up_to.get(kind, 0)
            st.read_up_to[stream] = max(st.read_up_to.get(stream, 0), covered)
        log.info(
            "cluster %s: rebuilding from its checkpoint of %s (%d objects)",
            st.cluster,
            found.written_at.isoformat(timespec="seconds"),
            len(found.entries),
        )
