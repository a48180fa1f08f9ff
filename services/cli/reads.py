"""What the user's commands read on the bus: ``status``, ``why`` and ``shards``, the wait of
``publish --wait`` and the served-cluster check of ``publish``, over the user's connection
(``connect``; ``connected`` for a block, drained when it ends). Publishing itself is
``services.revisions.publish.publish_bundle``.

They read the same compacted streams the services use, so a late subscriber sees current state
(last status per object and per bundle, live health from SERVER), not only new events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import re
import sys
from collections.abc import AsyncIterator
from typing import Any

from schemas.cli import ObjectRow
from schemas.codec import WireError, decode
from schemas.decision import DecisionRecord
from schemas.messages import (
    BundleOptions,
    BundlePhase,
    BundleStatus,
    ObjectStatus,
    SourceStatus,
)
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    bundle_status_filter,
    bundle_status_subject,
    bundle_statuses_filter,
    parse_subject,
    source_status_subject,
)
from services.cli.objectref import ObjectRef
from services.clusters import members
from services.common import bus, settings
from services.revisions.watch import StatusWatch, decode_statuses
from services.stored import decisions as stored_decisions
from services.stored import facts as stored_facts


class BusUnreachable(RuntimeError):
    """No NATS server answered at the URL a command tried (the message names it)."""


def shown_url(url: str) -> str:
    """A NATS URL (or comma-separated list) as it may be printed: credentials written into it
    (``nats://user:password@host``) are masked."""
    return re.sub(r"//[^/@,]*@", "//***@", url)


async def connect(
    args: argparse.Namespace, *, reconnect: bool = False, **callbacks: Any
) -> bus.Connection:
    """The user's connection: credentials and TLS from the --nats-* flags or environment, the
    URL from them or else, with the operator's credentials, from the running stack's context
    (``context``). A bus that does not
    answer is one ``BusUnreachable`` line naming the URL tried."""
    from services.cli import context

    context.fill_nats(args)  # the running stack's URL and operator credentials, if not given
    s = settings.load(bus.NatsSettings, args)
    try:
        return await bus.connect(s, name="driftbus-cli", reconnect=reconnect, **callbacks)
    except Exception as exc:  # noqa: BLE001 - refused, unreachable, bad credentials: one line
        reason = str(exc) or type(exc).__name__
        raise BusUnreachable(
            f"no NATS server answered at {shown_url(s.nats_url)} ({reason})"
        ) from None


@contextlib.asynccontextmanager
async def connected(args: argparse.Namespace) -> AsyncIterator[bus.Connection]:
    """The user's connection (``connect``) for the block, drained when it ends, also on an
    exception; a connect that fails raises here, before the block runs."""
    nc = await connect(args)
    try:
        yield nc
    finally:
        await nc.drain()


async def unserved(
    js: bus.JetStream,
    cluster: str,
    *,
    refused: asyncio.Event | None = None,
    within: float = 3.0,
) -> list[str]:
    """What is missing for ``cluster`` to be served (no live watcher, no live applier), from the
    members' heartbeats; empty when served **or when it cannot be told**: a user without
    permission to read the MEMBERS stream, a bus without that stream, a slow server. A warning
    that might be wrong is worse than none. A refused request gets no answer (it would time
    out): ``refused`` (``quiet_members_denial``) ends the wait as soon as the refusal arrives."""
    beats = asyncio.ensure_future(members.heartbeats(js, cluster))
    waits: set[asyncio.Future[Any]] = {beats}
    if refused is not None:
        waits.add(asyncio.ensure_future(refused.wait()))
    try:
        await asyncio.wait(waits, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if not beats.done() or beats.cancelled() or beats.exception() is not None:
        return []  # unknown: stay quiet
    return members.serving(cluster, beats.result(), dt.datetime.now(dt.UTC))


class _QuietMembersDenial(logging.Filter):
    """nats-server answers a refused publish (a locked-down user's direct get on MEMBERS) with
    an asynchronous permissions error that the connection logs; for that one request the
    refusal is expected and means "unknown", so it is not shown, only noted in ``refused``."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = asyncio.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        # nats-py lower-cases the server's error text, subject included
        text = f"{record.getMessage()} {getattr(record, 'error', '')}".lower()
        if "permissions" in text and f"direct.get.{bus.MEMBERS}".lower() in text:
            self.refused.set()
            return False
        return True


def quiet_members_denial() -> asyncio.Event:
    """Hide the connection's log line about a refused read of MEMBERS; the event returned is
    set when one arrives (give it to ``unserved``). Call it inside the event loop that waits
    on the event; a previous call's filter is replaced."""
    logger = logging.getLogger(bus.log.name)
    for f in [f for f in logger.filters if isinstance(f, _QuietMembersDenial)]:
        logger.removeFilter(f)
    quiet = _QuietMembersDenial()
    logger.addFilter(quiet)
    return quiet.refused


async def snapshot(js: bus.JetStream, stream: str, subject: str) -> list[Any]:
    """The last message of each subject of ``stream`` under ``subject``; none while the stream
    does not exist yet (nothing was published and no service has started: not an error)."""
    try:
        return [m async for m in bus.Follower(js, stream, subject).snapshot()]
    except bus.StreamMissing:
        return []


async def bundle_statuses(
    js: bus.JetStream,
    cluster: str,
    bundle: str | None = None,
    *,
    tenant: str | None = None,
    seen: dict[str, bytes] | None = None,
) -> list[BundleStatus]:
    """The last status of each bundle of ``cluster`` (or of ``bundle``, or of ``tenant``'s: all
    that a tenant's credentials may read); ``seen`` collects the raw message read per subject
    (so a follower can tell which live ones it already showed)."""
    subject = (
        bundle_status_subject(cluster, bundle)
        if bundle
        else bundle_statuses_filter(cluster, tenant)
    )
    out = []
    for m in await snapshot(js, bus.STATUS, subject):
        if seen is not None:
            seen[m.subject] = m.data
        try:
            out.append(decode(m.data, BundleStatus))
        except WireError:
            continue
    return sorted(out, key=lambda s: s.bundle)


async def source_status(js: bus.JetStream, cluster: str, bundle: str) -> SourceStatus | None:
    """What ``driftbus source`` last reported for ``bundle`` (None: no source follows it)."""
    for m in reversed(await snapshot(js, bus.STATUS, source_status_subject(cluster, bundle))):
        try:
            return decode(m.data, SourceStatus)
        except WireError:
            continue
    return None


async def object_statuses(
    js: bus.JetStream, cluster: str, bundle: str, *, seen: dict[str, bytes] | None = None
) -> dict[ObjectKey, ObjectStatus]:
    """Each object of ``bundle``: its newest status row, wherever it is (alone on the object's
    subject, or in a batch of rows: the stream's order says which is newer)."""
    statuses: dict[ObjectKey, ObjectStatus] = {}
    for m in await snapshot(js, bus.STATUS, bundle_status_filter(cluster, bundle)):
        with contextlib.suppress(SubjectError):
            if parse_subject(m.subject).family not in ("status.object", "status.rows"):
                continue
        if seen is not None:
            seen[m.subject] = m.data
        for st in decode_statuses(m.subject, m.data):
            if isinstance(st, ObjectStatus):
                statuses[st.key] = st
    return statuses


async def object_rows(
    js: bus.JetStream, cluster: str, bundle: str, *, seen: dict[str, bytes] | None = None
) -> list[ObjectRow]:
    """Each object of ``bundle``: its last status, with live health from SERVER."""
    statuses = await object_statuses(js, cluster, bundle, seen=seen)
    live = (await stored_facts.live(js, [cluster])).get(cluster, {})
    health = {key: ev for key, ev in live.items() if key in statuses}
    rows = []
    for key, st in sorted(statuses.items()):
        found = health.get(key)
        rows.append(
            ObjectRow(
                api_version=found.api_version if found else "",
                group=key.group,
                kind=key.kind,
                namespace=key.namespace,
                name=key.name,
                phase=str(st.phase),
                health="Deleted"
                if found and found.deleted
                else str(found.health if found else st.health),
                message=found.health_message if found and found.health_message else st.message,
                revision=st.revision,
                last_change=st.at,
            )
        )
    return rows


async def api_version(js: bus.JetStream, cluster: str, key: ObjectKey) -> str:
    """The object's apiVersion as the watcher last saw it ("" when never seen)."""
    with contextlib.suppress(bus.StreamMissing):
        found = (await stored_facts.live(js, [cluster])).get(cluster, {}).get(key)
        if found is not None:
            return found.api_version
    return ""


async def decided(
    js: bus.JetStream, cluster: str, ref: ObjectRef
) -> dict[ObjectKey, list[DecisionRecord]]:
    """Every object of ``cluster`` named ``ref.namespace``/``ref.name``, of any kind and group,
    that has a decision on the bus, with its decisions oldest first (``stored.decisions``: the
    name's shelf of the log, read once)."""
    return await stored_decisions.named(js, cluster, ref.namespace, ref.name)


WAIT_ENDS = frozenset(
    (
        BundlePhase.READY,
        BundlePhase.FAILED,
        BundlePhase.DEGRADED,
        BundlePhase.CONFLICT,
        BundlePhase.PRUNE_HELD,
    )
)
"""Phases that end ``publish --wait``. Reconciling and OutOfSync (drift being corrected) are
waited through; only Ready is a success. PruneHeld ends it too: nothing changes until someone
approves (exit ``PRUNE_HELD_EXIT``)."""
PRUNE_HELD_EXIT = 3
"""``--wait``'s exit code for PruneHeld: applied, its deletions wait for an approval."""


class BundleWait:
    """Follow one bundle's status until a revision reaches a phase of ``WAIT_ENDS``. Start it
    before publishing so no status is missed."""

    def __init__(
        self,
        nc: bus.Connection,
        cluster: str,
        bundle: str,
        *,
        ends: frozenset[BundlePhase] = WAIT_ENDS,
    ) -> None:
        self.nc, self.cluster, self.bundle = nc, cluster, bundle
        self.ends = ends
        self.watch = StatusWatch()

    async def start(self) -> None:
        await self.watch.start(self.nc, self.cluster, self.bundle, objects=False)

    async def wait(self, revision: str, *, within: float, progress: bool) -> BundleStatus | None:
        """The status that ended the wait, or the last one seen when ``within`` ran out (its
        phase is then not in ``ends``), or None when there was none for ``revision``.
        ``progress``: show it on stderr as it goes (bars on a terminal, lines elsewhere)."""
        from services.cli.progress import Progress

        last: BundleStatus | None = None
        shown = Progress(f"{self.bundle}@{revision[:23]}") if progress else None
        if shown is not None:
            shown.start()
        try:
            async for st in self.watch.each(self.watch.bundles, within):
                if st.revision != revision:
                    continue
                last = st
                if shown is not None:
                    shown.update(st)
                if st.phase in self.ends:
                    break
        finally:
            if shown is not None:
                shown.close(last)
            await self.watch.stop()
        return last


def reported(
    st: BundleStatus | None,
    *,
    command: str,
    bundle: str,
    revision: str,
    timeout: float,
    goal: str = "Ready",
) -> int:
    """How a ``--wait`` ended, printed: the last status and what keeps the bundle from its end;
    the exit code 0 for Ready or Deleted, 1 for another end (Failed, Degraded, Conflict), 2 for
    no end within ``timeout`` (or no status at all), 3 for PruneHeld."""
    from services.cli.table import colour

    if st is None:
        print(
            f"driftbus {command}: no status for {revision} within {timeout:.0f}s "
            "(is a planner running?)",
            file=sys.stderr,
        )
        return 2
    print(f"{colour(str(st.phase))}: {st.message}")
    for line in st.failed_objects:
        print(f"  {line}")
    if st.phase in (BundlePhase.READY, BundlePhase.DELETED):
        return 0
    if st.phase is BundlePhase.PRUNE_HELD:
        print(
            f"driftbus {command}: {bundle}@{revision} is applied; its deletions wait for an "
            "approval (PruneHeld)",
            file=sys.stderr,
        )
        return PRUNE_HELD_EXIT
    if st.phase not in WAIT_ENDS | {BundlePhase.DELETED}:
        print(
            f"driftbus {command}: {bundle}@{revision} not {goal} within {timeout:.0f}s "
            f"(last status: {st.phase})",
            file=sys.stderr,
        )
        return 2
    return 1


__all__ = [
    "WAIT_ENDS",
    "BundleOptions",
    "BundlePhase",
    "BundleWait",
    "bundle_statuses",
    "decided",
    "object_rows",
    "quiet_members_denial",
    "reported",
    "unserved",
]
