"""Fast batches: many messages into one stream, acknowledged per window, not one by one.

nats-server 2.14 accepts "fast batch" publishing into a stream that allows it
(``allow_batched``): each message's reply subject names its batch, its place in the batch and
an operation (``<inbox>.<batch>.<flow>.fail.<seq>.<op>.$FI``); the server persists the messages
as usual (``Nats-Msg-Id`` deduplication included) and answers only every ``flow`` messages
("persisted up to N"), on an error, and once for the commit (a PubAck with the count persisted).
In "fail" mode a gap or an error ends the batch there, so the PubAck's count is exact: every
message up to it landed, none after it did.

So a batched publish resolves when a window or the commit covers it. Whatever the batch did not
confirm — an error (a refused compare-and-publish included: its one-by-one retry reports the
refusal), a lost connection, no answer within the ack timeout — is published again one by one
through the acknowledged path with the same message id: a copy that did land is dropped as a
repeat. Batching never decides whether a message lands, only how many answers it costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg

log = logging.getLogger("driftbus.bus")

FLOW = 128
"""Messages per flow acknowledgement we ask for (the server may grant fewer)."""
MAX_BATCH = 256
"""Messages in one batch before it is committed: bounds how long a publish waits for its ack."""
IDLE = 0.002
"""Seconds without a new publish after which the open batches are committed."""
BATCH_DISABLED = 10205
"""JetStream's error code for a batch into a stream that does not allow fast batches."""

RETRY_UNBATCHED = 60.0
"""Seconds before a stream that refused fast batches is tried in batches again (the planner
may have brought its configuration up to date meanwhile)."""

Fallback = Callable[[str, bytes, dict[str, str], float], Awaitable[object]]
"""Publish one message acknowledged: subject, data, headers, and when it was first sent (the
retries must stay inside the deduplication window counted from then)."""


@dataclasses.dataclass(slots=True)
class _Pending:
    subject: str
    data: bytes
    headers: dict[str, str]
    done: asyncio.Future[None]
    since: float
    """loop time of its first publish"""


@dataclasses.dataclass(slots=True)
class _Batch:
    stream: str
    id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = 0
    """batch sequence of the last message sent"""
    waiting: dict[int, _Pending] = dataclasses.field(default_factory=dict)
    """sent, not yet confirmed, by batch sequence"""
    committed: asyncio.Future[int] | None = None
    """resolved when the batch is over (its PubAck came, or it was given up)"""


class FastBatches:
    """One open batch per stream, committed when full or when publishing pauses; whatever a
    batch does not confirm is published again one by one.

    Each stream's newest message is held back until the stream's next publish or the pause:
    held, it can still become its batch's commit, so a batch always ends on a message of its
    own (no end-of-batch marker a core subscriber of the subject would see) and a lone message
    costs one message and one PubAck, as an ordinary publish does. One lock covers choosing what
    goes out and putting it on the wire, so the wire keeps publish order, within a batch and
    across streams (the planner's row before its intent): a held message published before the
    one being sent goes first, as its batch's commit. Only what falls back to the one-by-one path
    may land after messages published later."""

    def __init__(self, nc: Client, *, fallback: Fallback, ack_timeout: float) -> None:
        self._nc = nc
        self._fallback = fallback
        self._timeout = ack_timeout
        self._wire = asyncio.Lock()
        self._open: dict[str, _Batch] = {}
        self._by_id: dict[str, _Batch] = {}
        self._held: dict[str, tuple[int, _Batch, int]] = {}
        """per stream: (publish order, batch, batch sequence) of the message held back"""
        self._order = 0
        self._last_publish = 0.0
        self._idle: asyncio.Task[None] | None = None
        self._unbatched: dict[str, float] = {}
        """streams that refused fast batches, and when"""
        self._inbox = ""
        self._sub: object | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        self.fell_back = 0

    def allowed(self, stream: str) -> bool:
        refused = self._unbatched.get(stream)
        if refused is None:
            return True
        if asyncio.get_running_loop().time() - refused > RETRY_UNBATCHED:
            del self._unbatched[stream]
            return True
        return False

    async def publish(
        self, stream: str, subject: str, data: bytes, headers: dict[str, str]
    ) -> asyncio.Future[None]:
        """Queue ``data`` in the stream's open batch; the future resolves once it is durable."""
        async with self._wire:
            if self._sub is None:
                self._inbox = self._nc.new_inbox()
                self._sub = await self._nc.subscribe(f"{self._inbox}.>", cb=self._answer)
            loop = asyncio.get_running_loop()
            b = self._open.get(stream)
            if b is None:
                b = self._open[stream] = _Batch(stream)
                self._by_id[b.id] = b
                self.batches += 1
            b.seq += 1
            p = _Pending(subject, data, headers, loop.create_future(), loop.time())
            b.waiting[b.seq] = p
            if b.seq >= MAX_BATCH:  # full: this one commits it, and the next opens another
                del self._open[stream]
            self._order += 1
            previous = self._held.get(stream)
            self._held[stream] = (self._order, b, b.seq)
            self._last_publish = loop.time()
            if self._idle is None or self._idle.done():
                self._idle = asyncio.ensure_future(self._commit_when_idle())
            if previous is not None:
                order = previous[0]
                earlier = sorted(h for st, h in self._held.items() if st != stream and h[0] < order)
                for _, eb, _ in earlier:
                    del self._held[eb.stream]
                await self._send_all([(eb, eseq, True) for _, eb, eseq in earlier])
                await self._send_all([(previous[1], previous[2], False)])
            return p.done

    async def _send_all(self, sends: list[tuple[_Batch, int, bool]]) -> None:
        """Put messages on the wire in this order (``True``: it commits its batch). Whatever
        is not sent — the connection failed, or we were cancelled — goes the one-by-one way."""
        for i, (b, seq, commit) in enumerate(sends):
            try:
                await self._send(b, seq, commit=commit)
            except BaseException:
                for rest, _, _ in sends[i:]:
                    self._give_up(rest)
                raise

    async def _send(self, b: _Batch, seq: int, *, commit: bool = False) -> None:
        """Put message ``seq`` of ``b`` on the wire; ``commit``: it ends the batch (so does the
        last of a full batch)."""
        p = b.waiting.get(seq)
        if p is None:  # given up on meanwhile: the acked path has it
            return
        commit = commit or seq >= MAX_BATCH
        if commit and self._open.get(b.stream) is b:
            del self._open[b.stream]
        op = 2 if commit else 0 if seq == 1 else 1
        try:
            await self._nc.publish(
                p.subject, p.data, reply=self._reply(b, seq, op), headers=p.headers
            )
        except Exception:  # noqa: BLE001 - closed, or its buffer full: the acked path decides
            self._give_up(b)
            return
        if commit:
            self._spawn(self._await_commit(b))

    def _reply(self, b: _Batch, seq: int, op: int) -> str:
        return f"{self._inbox}.{b.id}.{FLOW}.fail.{seq}.{op}.$FI"

    async def _commit_when_idle(self) -> None:
        """Once publishing pauses for ``IDLE``, every held message commits its batch."""
        loop = asyncio.get_running_loop()
        while self._held:
            await asyncio.sleep(IDLE)
            async with self._wire:
                if loop.time() - self._last_publish < IDLE:
                    continue
                held = sorted(self._held.values())
                self._held.clear()
                await self._send_all([(b, seq, True) for _, b, seq in held])

    async def _await_commit(self, b: _Batch) -> None:
        if b.committed is None:
            b.committed = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(b.committed), self._timeout)
        self._give_up(b)

    async def _answer(self, msg: Msg) -> None:
        """A flow ack, gap, error or PubAck for one of our batches (a subscription callback)."""
        self._read(msg)

    def _read(self, msg: Msg) -> None:
        tokens = msg.subject.split(".")
        b = self._by_id.get(tokens[-6]) if len(tokens) >= 6 else None
        if b is None:
            return
        if not msg.data and (msg.headers or {}).get("Status") == "503":
            self._give_up(b)  # no stream takes the subject: the acked path reports it
            return
        try:
            doc = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            return
        kind = doc.get("type")
        if kind == "ack":
            self._confirm(b, int(doc.get("seq", 0)))
        elif kind in ("gap", "err"):
            log.debug("fast batch %s to %s: %s", b.id, b.stream, doc)
        elif "error" in doc:
            if (doc["error"] or {}).get("err_code") == BATCH_DISABLED:
                # an older stream configuration: one by one for a while
                self._unbatched[b.stream] = asyncio.get_running_loop().time()
            self._give_up(b)
        elif "stream" in doc:  # a PubAck: the batch is over, exactly ``count`` landed
            self._confirm(b, int(doc.get("count", 0) or 0))
            self._give_up(b)  # the rest (if it ended early) goes one by one

    def _confirm(self, b: _Batch, upto: int) -> None:
        for seq in [s for s in b.waiting if s <= upto]:
            p = b.waiting.pop(seq)
            if not p.done.done():
                p.done.set_result(None)

    def _give_up(self, b: _Batch) -> None:
        """End ``b`` here: publish what it did not confirm one by one, acknowledged, with the
        same message ids."""
        if self._open.get(b.stream) is b:
            del self._open[b.stream]
        if (held := self._held.get(b.stream)) is not None and held[1] is b:
            del self._held[b.stream]
        self._by_id.pop(b.id, None)
        if b.committed is None:
            b.committed = asyncio.get_running_loop().create_future()
        if not b.committed.done():
            b.committed.set_result(0)
        rest, b.waiting = b.waiting, {}
        for p in rest.values():
            self.fell_back += 1
            self._spawn(self._one_by_one(p))

    async def _one_by_one(self, p: _Pending) -> None:
        try:
            await self._fallback(p.subject, p.data, p.headers, p.since)
        except BaseException as exc:
            if not p.done.done():
                p.done.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if not p.done.done():
            p.done.set_result(None)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
