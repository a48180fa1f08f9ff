"""Bounded, deduplicated, timed publishing: a ``Nats-Msg-Id`` on every message (a retried publish
is dropped as a repeat) and a timeout on every ack (nats-py's futures have none).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    APIError,
)

from services.common import telemetry
from services.common.bus.batching import FastBatches
from services.common.bus.streams import COMPARE_REFUSED, DEDUPE_WINDOW, PUBLISH_RETRIED, BusError

log = logging.getLogger("driftbus.bus")

T = TypeVar("T")


class Publisher:
    """Bounded, deduplicated, timed JetStream publishing."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        max_inflight: int = 512,
        ack_timeout: float = 10.0,
        retry_for: float = 90.0,
    ) -> None:
        self._js = js
        self._slots = asyncio.Semaphore(max_inflight)
        self._timeout = ack_timeout
        # Long enough to ride out a reconnect or a stream leader election on a NATS cluster,
        # and within the dedupe window, so a retry of a publish that did land is dropped.
        self._retry_for = min(retry_for, DEDUPE_WINDOW - ack_timeout)
        self._pending: set[asyncio.Task[Any]] = set()
        self._batches: FastBatches | None = None
        self.errors = 0

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str | None,
        headers: dict[str, str] | None = None,
    ) -> asyncio.Task[js_api.PubAck]:
        """Queue a publish; returns a task resolving to the ack (retried with the same id).
        The current trace context travels along in the headers. ``msg_id`` None: no dedupe
        id, for a message whose repeat is harmless (a heartbeat: its stream keeps the last per
        subject) — the server keeps no id for it, and a message with no header at all is the
        cheapest for every reader to parse."""
        headers = telemetry.inject(headers)
        await self._slots.acquire()
        task = asyncio.create_task(self._publish(subject, data, msg_id, headers))
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task

    async def publish_batched(
        self,
        stream: str,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        headers: dict[str, str] | None = None,
    ) -> asyncio.Task[Any]:
        """Like ``publish``, in the stream's open fast batch (``batching``): acknowledged per
        window rather than per message; the task resolves once the message is durable (or
        raises what its one-by-one retry met: a refused expected sequence included). What
        it cannot give is the message's stream sequence."""
        hdrs = {"Nats-Msg-Id": msg_id, **(telemetry.inject(headers) or {})}
        if self._batches is None:
            # the connection under the JetStream context: fast batches speak core NATS
            self._batches = FastBatches(
                self._js._nc,
                fallback=lambda subject, data, h, since: self.retrying(
                    f"publish to {subject}",
                    lambda: self._js.publish(subject, data, headers=h, timeout=self._timeout),
                    since=since,
                ),
                ack_timeout=self._timeout,
            )
        if not self._batches.allowed(stream):
            return await self.publish(subject, data, msg_id=msg_id, headers=headers)
        await self._slots.acquire()
        try:
            durable = await self._batches.publish(stream, subject, data, hdrs)
        except BaseException:
            self._slots.release()
            raise
        task: asyncio.Task[None] = asyncio.ensure_future(durable)
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task

    def fell_back(self) -> int:
        """Batched publishes that had to go one by one (a batch did not confirm them)."""
        return 0 if self._batches is None else self._batches.fell_back

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        self._slots.release()
        if not task.cancelled() and (exc := task.exception()) is not None:
            if isinstance(exc, APIError) and exc.err_code in COMPARE_REFUSED:
                return  # a refused compare-and-publish: the caller compares again
            self.errors += 1
            # Never silent: a lost publish is a lost fact (the caller may also await the task).
            log.error("publish failed: %s: %s", type(exc).__name__, exc)

    async def _publish(
        self, subject: str, data: bytes, msg_id: str | None, headers: dict[str, str] | None
    ) -> js_api.PubAck:
        hdrs = {"Nats-Msg-Id": msg_id, **(headers or {})} if msg_id else (headers or None)
        # Unknown outcome on a timeout: retrying with the same Nats-Msg-Id cannot duplicate it.
        return await self.retrying(
            f"publish to {subject}",
            lambda: self._js.publish(subject, data, headers=hdrs, timeout=self._timeout),
        )

    async def retrying(
        self, what: str, call: Callable[[], Awaitable[T]], *, since: float | None = None
    ) -> T:
        """``call()`` again, with backoff, while the bus is away or a stream has no leader (a
        reconnect, a NATS cluster node lost), for as long as a publish is retried, counted from
        ``since`` (loop time) when the message was first sent earlier (in a batch): every copy
        must go out inside the deduplication window of the first."""
        delay = 0.2
        loop = asyncio.get_running_loop()
        give_up = (loop.time() if since is None else since) + self._retry_for
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except PUBLISH_RETRIED as exc:
                if loop.time() + delay > give_up:
                    raise BusError(
                        f"{what} failed after {attempt} tries: {type(exc).__name__}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def flush(self) -> None:
        """Wait for every queued publish; raises the first failure."""
        while self._pending:
            done = await asyncio.gather(*list(self._pending), return_exceptions=True)
            for result in done:
                if isinstance(result, BaseException):
                    raise result
