"""A cluster's decision records, sent together (issue 44: objects share messages).

Alone, each record was a message and its share of an acknowledgement: one per object decided,
as many as the objects of a cold apply. Here records are sent together, one ``DecisionRecords``
per shelf (``schemas.subjects.decision_shelf``: a hex digit of the object's namespace and name)
on ``driftbus.decision.<c>.batch.<shelf>.<id>``, so ``driftbus why`` reads one shelf of the
cluster's log, not all of it.

A record is on the bus before what it explains: the records waiting are published (queued in
the DECISIONS fast batch: ``send_waiting``) before a batch of intents (``IntentBatches
.before_send``) and before a bundle status, which the fast batches then put on the wire after
them; a record of a decision whose intent goes alone goes alone too, before it (``sending``).
What writes nothing (a hit, a hold) waits at most ``LINGER`` for others.

The messages go in the DECISIONS fast batch (``bus.batching``: the shelves of a moment share
one answer), and the fast batches keep publish order across streams, so a batch's records
reach the server before the batch. Publishing is not awaited otherwise (the single record's
publish was not either); a message that did not land is logged with the number of records it
held. ``drain`` sends what waits when the planner stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Final

from schemas.codec import encode
from schemas.decision import DecisionRecord, DecisionRecords
from schemas.subjects import decision_batch_subject, decision_shelf
from services.common import bus

log = logging.getLogger("driftbus.planner")

LINGER: Final = 0.2
"""Seconds the records of decisions that write nothing wait for others (no one waits for
them); a batch of intents or a bundle status sends them sooner."""
MOST: Final = 1024
"""The most records waiting at once (≈ 1 KB each, spread over 16 shelves: a few tens of KB a
message, far below NATS's 1 MiB)."""
MOST_BYTES: Final = 512 * 1024
"""The most bytes of one message: a shelf's records that encode bigger (long error texts) are
split in two until each part fits, far below NATS's 1 MiB payload limit."""
DRAIN: Final = 2.0
"""Seconds a stopping cluster planner waits for its last records to land."""


class DecisionBatches:
    """Collects one cluster's decision records into a message per shelf (module doc)."""

    def __init__(
        self,
        publisher: bus.Publisher,
        *,
        cluster: str,
        planner_id: str,
        linger: float = LINGER,
        most: int = MOST,
        most_bytes: int = MOST_BYTES,
    ) -> None:
        self.pub = publisher
        self.cluster = cluster
        self.planner_id = planner_id
        self.linger = linger
        self.most = max(1, most)
        self.most_bytes = most_bytes
        self.sent = 0
        """Messages published."""
        self._waiting: dict[str, list[DecisionRecord]] = {}
        self._count = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def add(self, record: DecisionRecord) -> None:
        """Send ``record`` with the others of the moment on its object's shelf."""
        shelf = decision_shelf(record.key.namespace, record.key.name)
        self._waiting.setdefault(shelf, []).append(record)
        self._count += 1
        if self._count >= self.most:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger, self.flush)

    def flush(self) -> None:
        """Publish what waits, soon (the linger's end, a full batch)."""
        self._spawn(self.send_waiting(), "decision records")

    async def send_waiting(self) -> None:
        """Publish what waits, now: a message per shelf, records in the order made. Returns
        once each message is queued in the DECISIONS fast batch, so whatever is published
        after this returns (a batch of intents, a bundle status) reaches the server after it;
        its answer is awaited apart (a failure logged)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting, self._count = self._waiting, {}, 0
        for shelf, records in waiting.items():
            for part, data in self._encoded(records):
                subject = decision_batch_subject(self.cluster, shelf, bus.unique_id())
                # a new subject per message, and its Nats-Msg-Id: a retry across a reconnect
                # lands once
                answer = await self.pub.publish_batched(
                    bus.DECISIONS, subject, data, msg_id=subject
                )
                self._spawn(self._answered(answer, part), "decision records answered")

    def _encoded(self, records: list[DecisionRecord]) -> list[tuple[int, bytes]]:
        """``records`` as messages of at most ``MOST_BYTES`` each (a record bigger than that
        alone goes alone: NATS refuses it, and the loss is logged), with their record counts."""
        data = encode(
            DecisionRecords(cluster=self.cluster, records=records, planner=self.planner_id)
        )
        if len(data) <= self.most_bytes or len(records) == 1:
            return [(len(records), data)]
        half = len(records) // 2
        return self._encoded(records[:half]) + self._encoded(records[half:])

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _answered(self, answer: asyncio.Task[Any], count: int) -> None:
        try:
            await answer
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - an audit gap is logged; planning goes on
            log.error(
                "cluster %s: %d decision records were not published: %s", self.cluster, count, exc
            )
            return
        self.sent += 1

    async def drain(self, within: float = DRAIN) -> None:
        """Publish what waits and wait for it, at most ``within`` seconds (a planner stopping);
        what did not land by then is logged."""
        await self.send_waiting()
        sending = list(self._sending)
        if sending:
            _, late = await asyncio.wait(sending, timeout=within)
            for task in late:
                task.cancel()
            if late:
                log.error(
                    "cluster %s: %d messages of decision records not published before stopping",
                    self.cluster,
                    len(late),
                )
