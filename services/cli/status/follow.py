"""``driftbus status -f``: after the current state, every status message as it comes, until
told to stop — saying when the bus goes away, reconnecting, and giving up when it stays away.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.revisions.watch import StatusEvent


async def subscribe_status(nc: Any, args: argparse.Namespace) -> asyncio.Queue[Any]:
    """Queue every status message of the followed bundle (its summary and its objects), or the
    summaries of all bundles of the cluster (of one tenant's with ``--tenant``). One
    subscription, so nothing arrives twice."""
    from schemas.subjects import bundle_status_filter, bundle_statuses_filter
    from services.common import bus

    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def on_msg(msg: Any) -> None:
        queue.put_nowait(msg)

    subject = (
        bundle_status_filter(args.cluster, args.bundle)
        if args.bundle
        else bundle_statuses_filter(args.cluster, args.tenant)
    )
    # a slow terminal must not make the server drop messages: no limit on what waits here
    await bus.subscribe(nc, subject, on_msg, unbounded=True)
    return queue


def status_lines(subject: str, data: bytes, output: str) -> list[str]:
    """How ``status -f`` shows one status message: a line per status it carries (a batch of
    object rows is several); none for what it cannot read."""
    from services.revisions.watch import decode_statuses

    return [_line(event, output) for event in decode_statuses(subject, data)]


def _line(event: StatusEvent, output: str) -> str:
    from schemas.codec import encode
    from schemas.messages import BundleStatus, ObjectStatus
    from services.cli.table import colour

    if isinstance(event, BundleStatus):
        line = f"{event.bundle}@{event.revision}: {colour(str(event.phase))} {event.message}"
    elif isinstance(event, ObjectStatus):
        line = f"{event.key}: {colour(str(event.phase))} {event.message}"
    else:
        kind = "oci" if event.url.startswith("oci://") else "git"
        phase = colour(str(event.phase))
        line = f"{event.bundle} {kind} source {event.ref}: {phase} {event.message}"
    if output == "json":
        # re-encoded from the contract: only its fields, whatever else a publisher added
        return encode(event).decode()
    if output == "yaml":
        import msgspec
        import yaml

        return "---\n" + yaml.safe_dump(msgspec.to_builtins(event), sort_keys=False).rstrip()
    return f"{time.strftime('%H:%M:%S')} {line}"


class BusLink:
    """The connection of ``status -f``, said out loud: lost (reconnecting), back, given up
    after ``give_up`` seconds away (the stack stopped), so the follow never hangs silently."""

    def __init__(self, give_up: float) -> None:
        self.give_up = give_up
        self.url = ""
        self.lost_at: float | None = None
        self.ended = asyncio.Event()
        self.told = asyncio.Event()
        self.closing = False
        """We close the connection ourselves: its closing is no news."""
        """Ctrl-C or SIGTERM: stop following (exit 0)."""
        self.code = 0

    async def lost(self) -> None:
        if self.lost_at is None:
            self.lost_at = time.monotonic()
            print(
                f"driftbus status: lost the bus at {self.url}; reconnecting (for "
                f"{self.give_up:.0f}s) …",
                file=sys.stderr,
                flush=True,
            )

    async def back(self) -> None:
        self.lost_at = None
        print(
            "driftbus status: reconnected; changes made while away are not shown (run "
            "`driftbus status` for the current state)",
            file=sys.stderr,
            flush=True,
        )

    async def error(self, exc: Exception) -> None:
        """Each failed reconnect is an error: said once (``lost``), not once per attempt."""
        if self.lost_at is None:
            print(f"driftbus status: the bus at {self.url}: {exc}", file=sys.stderr, flush=True)

    async def closed(self) -> None:
        if not (self.ended.is_set() or self.told.is_set() or self.closing):
            print(
                f"driftbus status: the connection to the bus at {self.url} closed",
                file=sys.stderr,
                flush=True,
            )
            self.code = self.code or 1
        self.ended.set()

    def check(self) -> None:
        """End the follow when the bus has been away for ``give_up`` seconds."""
        if self.lost_at is not None and time.monotonic() - self.lost_at >= self.give_up:
            print(
                f"driftbus status: the bus at {self.url} has been away for {self.give_up:.0f}s; "
                "giving up (is the stack stopped?)",
                file=sys.stderr,
                flush=True,
            )
            self.code = 1
            self.ended.set()


async def connect(args: argparse.Namespace, link: BusLink) -> Any:
    """The connection ``status`` reads through: with ``-f``, one that reconnects and says so
    through ``link``, which Ctrl-C or SIGTERM tell to stop from now on; else a plain one."""
    from services.cli import reads as user

    if not args.follow:
        return await user.connect(args)
    # told to stop (Ctrl-C, SIGTERM) at any moment from now on, not only once following
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, link.told.set)
    # once without reconnecting: a bus that is not there at all is one line at once
    # (nats-py would retry a first connect for ever when told to reconnect)
    await (await user.connect(args)).close()
    nc = await user.connect(
        args,
        reconnect=True,
        disconnected_cb=link.lost,
        reconnected_cb=link.back,
        closed_cb=link.closed,
        error_cb=link.error,
    )
    # host and port only: a URL may carry credentials
    u = nc.connected_url
    link.url = f"{u.hostname}:{u.port}" if u else ""
    return nc


async def follow(
    queue: asyncio.Queue[Any], seen: dict[str, bytes], args: argparse.Namespace, link: BusLink
) -> int:
    """After the current state, print each status message as it comes until Ctrl-C.

    The subscription started before the current state was read (``seen``: subject → message),
    so what it queued meanwhile may be older than that state, the same, or newer. Per subject,
    everything up to the message the state showed is skipped (older or shown already); on a
    subject whose shown message never arrived live, all of it is newer."""
    done = link.told

    def show(msg: Any) -> None:
        for line in status_lines(msg.subject, msg.data, args.output):
            print(line, flush=True)

    backlog = [queue.get_nowait() for _ in range(queue.qsize())]
    shown_at = {m.subject: i for i, m in enumerate(backlog) if seen.get(m.subject) == m.data}
    for i, msg in enumerate(backlog):
        if i > shown_at.get(msg.subject, -1):
            show(msg)
    stop = asyncio.create_task(done.wait())
    ended = asyncio.create_task(link.ended.wait())
    try:
        while not done.is_set() and not link.ended.is_set():
            get = asyncio.create_task(queue.get())
            await asyncio.wait({get, stop, ended}, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            if not get.done():
                get.cancel()
                link.check()
                continue
            show(get.result())
    finally:
        stop.cancel()
        ended.cancel()
    return 0 if done.is_set() else link.code
