"""An applier's applied facts and status rows, sent together (issue 44: objects share
messages).

Every intent carried out ends in an applied fact (for the planner) and a status row (for
users), both durable before the intent is acked; an intent that failed or waits ends in a row
only (its outcome fact goes alone, on the object's compacted subject). Alone, each was a
message, its acknowledgement, and a message delivered to every reader. Here what the intents
that finish within ``LINGER`` seconds of the first say is one report: one ``AppliedFacts`` on
``driftbus.applied.<cluster>.batch.<id>`` and, per bundle, one ``ObjectRows`` on
``driftbus.status.<cluster>.<bundle>.rows.<id>`` (a tenant reads its bundles' status by
subject, so rows of two bundles never share a message). ``add`` returns once every message of
its report is acknowledged (or raises what publishing one raised, for each intent in it), so the
caller's order — fact and row durable, then the ack — is unchanged.

The applier remembers the intents whose facts it sent (``carried_out``, the last
``REMEMBERED``): an intent redelivered to it because its ack was lost (NATS restarted) is acked
without a second apply. One redelivered to another applier is applied again — a server-side
apply of the same manifest, which changes nothing.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

from schemas.codec import encode
from schemas.messages import AppliedEvent, AppliedFacts, ObjectRows, ObjectStatus
from schemas.subjects import batch_subject, object_rows_subject
from services.common import bus

LINGER: Final = 0.01
"""Seconds a report waits after its first fact for others: the ack of an intent comes at most
this much later, and four appliers finishing an object every few milliseconds send a few
reports a second each, not a message per object."""
MOST: Final = 256
"""The most intents one report speaks for (≈ 120 KB of facts, as much again of rows)."""
MAX_BYTES: Final = 512 * 1024
"""About the most bytes of rows one report carries (NATS refuses a message above 1 MiB): a
row's message is an API server's error text, which may run to kilobytes."""
ROW_ENVELOPE: Final = 1024
"""Bytes of a fact and a row besides the row's message (keys, SHAs, names)."""
REMEMBERED: Final = 100_000
"""Intents remembered as carried out (about 10 MB at most)."""


class AppliedReports:
    """Collects one applier's applied facts and status rows into reports (module doc)."""

    def __init__(
        self,
        publisher: bus.Publisher,
        *,
        cluster: str,
        applier_id: str,
        linger: float = LINGER,
        most: int = MOST,
    ) -> None:
        self.pub = publisher
        self.cluster = cluster
        self.applier_id = applier_id
        self.linger = linger
        self.most = most
        self.sent = 0
        """Reports published (each acknowledged)."""
        self._waiting: list[tuple[AppliedEvent | None, ObjectStatus, asyncio.Future[None]]] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._done: collections.OrderedDict[tuple[int, int], None] = collections.OrderedDict()

    async def add(
        self, fact: AppliedEvent | None, row: ObjectStatus, ident: tuple[int, int] = (0, -1)
    ) -> None:
        """Send ``fact`` (None: an intent that failed or waits) and ``row`` in the next report;
        returns once the report is durable. ``ident``: the intent carried out (``Claim.ident``),
        remembered as carried out then when it has a fact."""
        loop = asyncio.get_running_loop()
        durable: asyncio.Future[None] = loop.create_future()
        size = len(row.message) + ROW_ENVELOPE
        if self._waiting and self._bytes + size > MAX_BYTES:
            self._flush()
        self._waiting.append((fact, row, durable))
        self._bytes += size
        if len(self._waiting) >= self.most:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.linger, self._flush)
        await durable
        if fact is not None:
            self.remember(ident)

    def carried_out(self, ident: tuple[int, int]) -> bool:
        """Whether this applier sent the applied fact of intent ``ident`` (``Claim.ident``)."""
        return ident in self._done

    def remember(self, ident: tuple[int, int]) -> None:
        if ident[0]:
            self._done[ident] = None
            while len(self._done) > REMEMBERED:
                self._done.popitem(last=False)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._waiting, self._bytes = self._waiting, [], 0
        if batch:
            task = asyncio.create_task(self._send(batch), name="applied report")
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(
        self, batch: list[tuple[AppliedEvent | None, ObjectStatus, asyncio.Future[None]]]
    ) -> None:
        facts = [f for f, _, _ in batch if f is not None]
        rows: dict[str, list[ObjectStatus]] = {}
        for _, row, _ in batch:
            rows.setdefault(row.bundle, []).append(row)
        sends = []
        if facts:
            report = AppliedFacts(cluster=self.cluster, events=facts, applier=self.applier_id)
            sends.append((batch_subject("applied", self.cluster, bus.unique_id()), encode(report)))
        for bundle, of_bundle in rows.items():
            together = ObjectRows(
                cluster=self.cluster, bundle=bundle, rows=of_bundle, applier=self.applier_id
            )
            subject = object_rows_subject(self.cluster, bundle, bus.unique_id())
            sends.append((subject, encode(together)))
        try:
            # a new subject per message, and its Nats-Msg-Id: a retry across a reconnect lands once
            acks = [await self.pub.publish(s, data, msg_id=s) for s, data in sends]
            await asyncio.gather(*acks)
        except BaseException as exc:  # each waiting intent raises it (unacked: redelivered)
            for _, _, durable in batch:
                if not durable.done():
                    durable.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.sent += 1
        for _, _, durable in batch:
            if not durable.done():
                durable.set_result(None)
