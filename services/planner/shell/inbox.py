"""One cluster's inbox: the single queue its run loop reads, fed by the replica's hub (live
messages and settings), by the cluster's own replay at start, and by its duties' alarms.

The replay (``replay``) reads the cluster's compacted streams as they are now, each with a
short-lived consumer of its own, while the hub's live messages for the cluster are held back;
then the held-back ones follow, and the mark that the rebuild is done. The two overlap (the hub
started following before the replay's consumers existed), and an ordered consumer reset resends:
``first_time`` keeps each stream message to one handling, by its stream sequence. A cluster with
a checkpoint (``rule.checkpoint``, written by the planner that held it) starts from it: the fact
streams are read only above its sequences, and what the hub holds back at or below them is
dropped the same way.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from schemas.checkpoint import CheckpointError, decode_part
from schemas.subjects import checkpoint_subject, cluster_filter
from services.common import bus
from services.planner.rule import checkpoint
from services.planner.shell.alarms import Alarms
from services.planner.shell.budget import Backlog, WorkBudget
from services.planner.shell.hub import CLUSTER_STREAMS
from services.planner.shell.yielding import stepped

CAUGHT_UP = "caught up"
"""What the replay puts last: everything before it is the cluster as it was."""
CHECKPOINT = "checkpoint read"
"""What the replay puts first when the cluster has a usable checkpoint (``rule.checkpoint``)."""

log = logging.getLogger("driftbus.planner")


class CountedQueue(asyncio.Queue[tuple[str, Any]]):
    """A cluster's queue: unbounded, counted in the replica's ``Backlog`` (every put and get
    of ``asyncio.Queue`` goes through ``put_nowait`` and ``get_nowait``). Once closed, what is
    put is dropped: the cluster's planner has stopped."""

    def __init__(self, backlog: Backlog) -> None:
        super().__init__()
        self._backlog = backlog
        self.closed = False

    def put_nowait(self, item: tuple[str, Any]) -> None:
        if self.closed:
            return
        super().put_nowait(item)
        self._backlog.add()

    def get_nowait(self) -> tuple[str, Any]:
        item = super().get_nowait()
        self._backlog.done()
        return item

    def close(self) -> None:
        self.closed = True
        self._backlog.done(self.qsize())
        while not self.empty():
            super().get_nowait()


class Inbox:
    """The queue of (kind, message) a cluster's run loop reads, one at a time."""

    def __init__(
        self,
        js: bus.JetStream,
        cluster: str,
        budget: WorkBudget,
        backlog: Backlog,
        *,
        use_checkpoint: bool = True,
    ) -> None:
        self.js = js
        self.cluster = cluster
        self.use_checkpoint = use_checkpoint
        """Start from the cluster's checkpoint when it has a usable one."""
        self._budget = budget
        self._taken: int | None = None
        """Units of the replica's replay budget this cluster holds until it is live (None:
        none held)."""
        self._backlog = backlog
        self.queue = CountedQueue(backlog)
        self.alarms = Alarms(self.ring)
        self._held_back: collections.deque[tuple[str, bus.Message]] | None = collections.deque()
        """The hub's live messages while the replay runs (None once it is done)."""
        self._due: collections.deque[str] = collections.deque()
        """Duties rung while the queue had messages: they go before the next one."""
        self._seen: dict[str, int] = {}
        """Kind -> stream sequence of the last message of it handled."""

    def deliver(self, kind: str, msg: bus.Message) -> None:
        """A live message of one of the cluster's streams; held back while the replay runs.
        Never waits: the hub's tap serves every cluster (it waits on the replica's backlog)."""
        if self.queue.closed:
            return
        if self._held_back is not None:
            self._held_back.append((kind, msg))
            self._backlog.add()
            return
        self.queue.put_nowait((kind, msg))

    def ring(self, duty: str) -> None:
        """A duty is due (its alarm rang, or something asked for it): it runs before the next
        message, not behind a burst of them (the status of what was folded goes out on time)."""
        if self.queue.closed or duty in self._due:
            return
        if self.queue.empty():
            self.queue.put_nowait((duty, None))  # the loop may be waiting on the queue: wake it
        else:
            self._due.append(duty)

    async def get(self) -> tuple[str, Any]:
        """The next duty due, else the next message (waiting for one)."""
        if self._due:
            return self._due.popleft(), None
        return await self.queue.get()

    def first_time(self, kind: str, msg: bus.Message) -> bool:
        """Whether this stream message is handled for the first time (replay and live overlap;
        a reset tap resends). Messages of one stream come in stream order."""
        if kind not in CLUSTER_STREAMS:
            return True
        seq = bus.stream_sequence(msg)
        if seq <= self._seen.get(kind, 0):
            return False
        self._seen[kind] = seq
        return True

    def read_up_to(self) -> dict[str, int]:
        """Per stream kind, the sequence of the last of the cluster's messages handled."""
        return dict(self._seen)

    async def replay(self) -> None:
        """The cluster's compacted streams as they are now (each its own consumer, gone once
        read), then what the hub held back meanwhile, then ``CAUGHT_UP``. With a usable
        checkpoint (``use_checkpoint``), the checkpoint goes first (``CHECKPOINT``) and the fact
        streams are read only above its sequences (nothing at all where no message of the
        cluster is there). Waits for its share of the replica's replay budget first
        (``budget``), held until ``replayed``."""

        async def count(stream: str, subjects: str) -> int:
            return sum((await bus.stream_subjects(self.js, stream, subjects)).values())

        filters = {k: (s, cluster_filter(k, self.cluster)) for k, s in CLUSTER_STREAMS.items()}
        starts: dict[str, int] = {}
        # a few requests per stream, no consumer: a new cluster has nothing in most of them (and
        # the replica's clusters ask at most so many at once: a claim burst of 1,000 must not)
        async with self._budget.sizing:
            found = await self.checkpoint() if self.use_checkpoint else None
            if found is not None:
                for kind in checkpoint.FACT_KINDS:
                    starts[kind] = found.read_up_to.get(kind, 0) + 1
                    self._seen[kind] = max(self._seen.get(kind, 0), starts[kind] - 1)
                    stream, subjects = filters[kind]
                    if await bus.next_message(self.js, stream, subjects, starts[kind]) is None:
                        del filters[kind]  # nothing of the cluster above the checkpoint
            counts = await asyncio.gather(*(count(s, f) for s, f in filters.values()))
        folded = len(found.entries) if found is not None else 0
        self._taken = await self._budget.take(sum(counts) + folded)
        if found is not None:
            self.queue.put_nowait((CHECKPOINT, found))

        async def replay(kind: str, stream: str, subjects: str) -> None:
            n = 0
            follower = bus.Follower(self.js, stream, subjects, start_seq=starts.get(kind))
            if kind not in starts:
                follower = bus.Follower(self.js, stream, subjects)
            async for msg in follower.snapshot():
                self.queue.put_nowait((kind, msg))  # bounded by the replay budget
                n += 1
                if n % 1000 == 0:  # a buffered consumer never yields: let the others run
                    await asyncio.sleep(0)

        await asyncio.gather(
            *(replay(k, s, f) for (k, (s, f)), n in zip(filters.items(), counts, strict=True) if n)
        )
        held, self._held_back = self._held_back, None
        if held:
            self._backlog.done(len(held))  # counted again as they are queued
            for item in held:
                self.queue.put_nowait(item)
        self.queue.put_nowait((CAUGHT_UP, None))

    async def checkpoint(self) -> checkpoint.Checkpoint | None:
        """The cluster's last checkpoint, if it is whole and of this build's version, and no
        sequence in it is above what its stream holds (the streams made anew since): else
        None, and the streams are replayed whole (named in the log)."""
        cluster = self.cluster
        try:
            head = await bus.last_message(self.js, bus.CHECKPOINTS, checkpoint_subject(cluster, 0))
        except bus.StreamMissing:
            return None
        if head is None:
            return None
        try:
            parts = [decode_part(head.data or b"")]
            for i in range(1, parts[0].parts):
                got = await bus.last_message(
                    self.js, bus.CHECKPOINTS, checkpoint_subject(cluster, i)
                )
                if got is not None:
                    parts.append(decode_part(got.data or b""))
        except CheckpointError as exc:
            log.warning("cluster %s: checkpoint not used (%s); replaying its streams", cluster, exc)
            return None
        good, unusable = await stepped(checkpoint.assembling(parts))
        found = good.get(cluster)
        if found is None:
            why = unusable.get(cluster, "it names another cluster")
            log.warning("cluster %s: checkpoint not used (%s); replaying its streams", cluster, why)
            return None
        for kind in checkpoint.FACT_KINDS:
            held = await bus.last_sequence(self.js, CLUSTER_STREAMS[kind])
            if found.read_up_to.get(kind, 0) > held:
                log.warning(
                    "cluster %s: checkpoint not used (it covers %s up to %d, the stream holds "
                    "%d: made anew?); replaying its streams",
                    cluster,
                    kind,
                    found.read_up_to.get(kind, 0),
                    held,
                )
                return None
        return found

    def replayed(self) -> None:
        """The replay was folded and the cluster went live: its budget goes to the next."""
        taken, self._taken = self._taken, None
        if taken is not None:
            self._budget.give(taken)

    def close(self) -> None:
        """The cluster's planner stopped: no more alarms, and what waits is dropped (given back
        to the replica's backlog and replay budget)."""
        self.replayed()
        self.alarms.cancel_all()
        if self._held_back:
            self._backlog.done(len(self._held_back))
        self._held_back = None
        self.queue.close()
