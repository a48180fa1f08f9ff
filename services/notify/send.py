"""Sending: a provider's secrets read from their files, one POST with retries, and an outbox
per provider so a slow receiver holds up only its own messages.

A request is retried, with exponential backoff (``RetryPolicy``), when the connection fails, the
receiver times out or answers 5xx; a 429 waits what its ``Retry-After`` says (seconds or an
HTTP date, at most ``max_wait``). Any other answer ends it: 2xx delivered, 4xx refused (logged
with the status, never the body, which may echo a token). Nothing here logs a URL of a chat
webhook, a token or a key: requests are named by ``Request.what``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import email.utils
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp

from schemas.notify import Provider
from services.notify.egress import EgressRefused
from services.notify.render import Request, Secrets
from services.notify.shares import Share

log = logging.getLogger(__name__)


class SecretUnreadable(OSError):
    """A file a provider names cannot be read; the message names the file, not its content."""


def read_secrets(p: Provider, within: Path | None = None) -> Secrets:
    """What the files ``p`` names hold (trailing newline stripped), read now: a rotated secret
    is used from the next message on. ``within``: a tenant's directory, which every file a
    tenant's provider names must resolve inside (links followed), so a tenant's configuration
    never reads the platform's secrets (or any other file the service can read)."""

    def read(path: str | None, what: str) -> bytes:
        if not path:
            return b""
        file = Path(path)
        if within is not None:
            file = (within / path).resolve()
            if not file.is_relative_to(within.resolve()):
                raise SecretUnreadable(
                    f"provider {p.name}: {what} {path} is outside the tenant's directory"
                )
        try:
            return file.read_bytes().strip()
        except OSError as exc:
            raise SecretUnreadable(
                f"provider {p.name}: {what} {path} cannot be read: {exc.strerror}"
            ) from None

    return Secrets(
        url=read(p.url_file, "urlFile").decode(errors="replace"),
        token=read(p.token_file, "tokenFile").decode(errors="replace"),
        key=read(p.secret_file, "secretFile"),
    )


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    """Tries in all, the first included."""
    base: float = 1.0
    """Seconds before the second try; doubled before each next one."""
    cap: float = 60.0
    """The longest backoff between two tries."""
    max_wait: float = 300.0
    """The longest a 429's Retry-After is honoured for."""


def retry_delay(
    status: int | None, headers: Mapping[str, str], attempt: int, policy: RetryPolicy
) -> float | None:
    """Seconds to wait before try ``attempt + 1`` after try ``attempt`` (1-based) ended in
    ``status`` (None: no answer: the connection failed or timed out); None: do not retry."""
    if attempt >= policy.attempts:
        return None
    backoff = min(policy.cap, policy.base * float(2 ** (attempt - 1)))
    if status is None or status >= 500:
        return backoff
    if status == 429:
        after = _retry_after(headers.get("Retry-After", ""))
        return backoff if after is None else min(after, policy.max_wait)
    return None


def _retry_after(value: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds())


@dataclasses.dataclass(frozen=True)
class Delivery:
    ok: bool
    status: int | None
    attempts: int


async def deliver(
    session: aiohttp.ClientSession, req: Request, policy: RetryPolicy, seconds: float
) -> Delivery:
    """POST ``req`` until it is answered 2xx, refused, or the tries run out."""
    attempt = 0
    while True:
        attempt += 1
        status: int | None = None
        headers: Mapping[str, str] = {}
        try:
            async with session.post(
                req.url,
                data=req.body,
                headers=req.headers,
                timeout=aiohttp.ClientTimeout(total=seconds),
                allow_redirects=False,
            ) as resp:
                status, headers = resp.status, resp.headers
                await resp.read()
        except EgressRefused as exc:  # a tenant's address it may not reach: no retry
            log.error("notification not sent", extra={"to": req.what, "why": str(exc)})
            return Delivery(False, None, attempt)
        except aiohttp.InvalidURL:  # it will not parse the next time either (never logged:
            # a chat webhook's URL is its credential)
            log.error("notification not sent", extra={"to": req.what, "why": "invalid URL"})
            return Delivery(False, None, attempt)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            why = type(exc).__name__
        else:
            if 200 <= status < 300:
                return Delivery(True, status, attempt)
            why = f"HTTP {status}"
        wait = retry_delay(status, headers, attempt, policy)
        if wait is None:
            log.warning(
                "notification not delivered",
                extra={"to": req.what, "why": why, "attempts": attempt},
            )
            return Delivery(False, status, attempt)
        log.info("notification to %s: %s; retrying in %.1fs", req.what, why, wait)
        await asyncio.sleep(wait)


Done = Callable[[], None]
"""Called once a queued message is over: delivered, refused, given up on, or dropped."""


class Outbox:
    """One provider's queue and the task sending it, in order, one message at a time, through
    its owner's ``Share`` (the tenant's connections, counted against the tenant's queue)."""

    def __init__(
        self,
        provider: Provider,
        share: Share,
        policy: RetryPolicy,
        timeout: float,
        size: int = 1000,
    ) -> None:
        self.provider = provider
        self._share, self._policy, self._timeout = share, policy, timeout
        self._queue: asyncio.Queue[tuple[Request, Done | None]] = asyncio.Queue(maxsize=size)
        self._task: asyncio.Task[None] | None = None
        self._sending: Done | None = None
        """The ``done`` of the message being sent."""
        self.delivered = 0
        self.failed = 0

    def put(self, req: Request, done: Done | None = None) -> bool:
        """Queue ``req`` (``done`` called once it is over); False (and a log line) when the
        queue, or its owner's share of queued messages, is full."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"notify-{self.provider.name}")
        if self._queue.full():
            log.warning("notification dropped: %s has %d queued", req.what, self._queue.qsize())
            return False
        if not self._share.take():
            log.warning(
                "notification dropped: the tenant's share of the queue is full",
                extra={"to": req.what, "tenant": self._share.who, "queued": self._share.waiting},
            )
            return False
        self._queue.put_nowait((req, done))
        return True

    async def _run(self) -> None:
        while True:
            req, done = await self._queue.get()
            got: Delivery | None = None
            self._sending = done
            try:
                got = await deliver(self._share.session, req, self._policy, self._timeout)
            except asyncio.CancelledError:  # stopped while sending: not over (``done`` not
                self._queue.task_done()  # called here: ``drain`` says)
                self._share.give()
                raise
            except Exception:  # one broken message never ends the outbox
                log.exception("sending to %s failed", req.what)
            self._sending = None
            self._queue.task_done()
            self._share.give()
            if done is not None:
                done()
            if got is not None and got.ok:
                self.delivered += 1
                log.info(
                    "notification delivered",
                    extra={"to": req.what, "status": got.status, "attempts": got.attempts},
                )
            else:
                self.failed += 1

    async def drain(self, within: float, *, retired: bool = False) -> None:
        """Wait (at most ``within`` seconds) for what is queued, then stop. What is left is not
        sent: ``retired`` (its provider changed or was removed) it is over, each ``done``
        called; else (the service stopping) not, so a durable consumer delivers it again."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), within)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        left = []
        while not self._queue.empty():
            left.append(self._queue.get_nowait()[1])
        self._share.give(len(left))
        if self._sending is not None:
            left.append(self._sending)
        if retired:
            for done in left:
                if done is not None:
                    done()
