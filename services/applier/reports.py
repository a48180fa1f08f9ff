"""An applier's applied facts, sent together (issue 44: objects share messages).

Every intent carried out ends in an applied fact, durable before the intent is acked. Alone,
each was a message, its acknowledgement, and a message delivered to the planner. Here the facts
of the intents that finish within ``LINGER`` seconds of the first are one ``AppliedFacts``
message on ``driftbus.applied.<cluster>.batch.<id>``: ``add`` returns once that message is
acknowledged (or raises what publishing it raised, for each fact in it), so the caller's order —
fact durable, then the status row, then the ack — is unchanged. The status rows of one report
are published in the same instant, so the STATUS fast batch takes them together too.

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
from schemas.messages import AppliedEvent, AppliedFacts
from schemas.subjects import batch_subject
from services.common import bus

LINGER: Final = 0.01
"""Seconds a report waits after its first fact for others: the ack of an intent comes at most
this much later, and four appliers finishing an object every few milliseconds send a few
reports a second each, not a message per object."""
MOST: Final = 256
"""The most facts one report carries (≈ 120 KB)."""
REMEMBERED: Final = 100_000
"""Intents remembered as carried out (about 10 MB at most)."""


class AppliedReports:
    """Collects one applier's applied facts into reports (module doc)."""

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
        self._waiting: list[tuple[AppliedEvent, asyncio.Future[None]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._done: collections.OrderedDict[tuple[int, int], None] = collections.OrderedDict()

    async def add(self, fact: AppliedEvent, ident: tuple[int, int] = (0, -1)) -> None:
        """Send ``fact`` in the next report; returns once the report is durable. ``ident``:
        the intent it carried out (``Claim.ident``), remembered as carried out then."""
        loop = asyncio.get_running_loop()
        durable: asyncio.Future[None] = loop.create_future()
        self._waiting.append((fact, durable))
        if len(self._waiting) >= self.most:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self.linger, self._flush)
        await durable
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
        batch, self._waiting = self._waiting, []
        if batch:
            task = asyncio.create_task(self._send(batch), name="applied report")
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[AppliedEvent, asyncio.Future[None]]]) -> None:
        subject = batch_subject("applied", self.cluster, bus.unique_id())
        report = AppliedFacts(
            cluster=self.cluster, events=[f for f, _ in batch], applier=self.applier_id
        )
        try:
            # a new subject per report, and its Nats-Msg-Id: a retry across a reconnect lands once
            await (await self.pub.publish(subject, encode(report), msg_id=subject))
        except BaseException as exc:  # each waiting intent raises it (unacked: redelivered)
            for _, durable in batch:
                if not durable.done():
                    durable.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        self.sent += 1
        for _, durable in batch:
            if not durable.done():
                durable.set_result(None)
