"""What the user's commands read on the bus: ``status``, ``why`` and ``shards``, the wait of
``publish --wait`` and the served-cluster check of ``publish``, over the user's connection
(``connect``). Publishing itself is ``services.common.bundles.publish_bundle``.

They read the same compacted streams the services use, so a late subscriber sees current state
(last status per object and per bundle, live health from SERVER), not only new events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import sys
from typing import Any

import orjson
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas.codec import WireError, decode
from schemas.messages import (
    BundleOptions,
    BundlePhase,
    BundleStatus,
    DecisionRecord,
    ObjectStatus,
    ServerEvent,
    SourceStatus,
)
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    bundle_status_subject,
    bundle_statuses_filter,
    cluster_filter,
    decode_token,
    object_status_filter,
    object_subject,
    source_status_subject,
)
from services.common import bus, members, settings
from services.common.statuswatch import StatusWatch


async def connect(args: argparse.Namespace) -> NATS:
    """The user's connection: credentials and TLS from the --nats-* flags or environment."""
    s = settings.load(bus.NatsSettings, args)
    return await bus.connect(s, name="driftbus-cli", reconnect=False)


async def unserved(
    js: JetStreamContext,
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


async def _snapshot(js: JetStreamContext, stream: str, subject: str) -> list[Any]:
    """The last message of each subject of ``stream`` under ``subject``; none while the stream
    does not exist yet (nothing was published and no service has started: not an error)."""
    try:
        return [m async for m in bus.Follower(js, stream, subject).snapshot()]
    except NotFoundError:
        return []


async def bundle_statuses(
    js: JetStreamContext,
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
    for m in await _snapshot(js, bus.STATUS, subject):
        if seen is not None:
            seen[m.subject] = m.data
        try:
            out.append(decode(m.data, BundleStatus))
        except WireError:
            continue
    return sorted(out, key=lambda s: s.bundle)


async def source_status(js: JetStreamContext, cluster: str, bundle: str) -> SourceStatus | None:
    """What ``driftbus source`` last reported for ``bundle`` (None: no source follows it)."""
    for m in reversed(await _snapshot(js, bus.STATUS, source_status_subject(cluster, bundle))):
        try:
            return decode(m.data, SourceStatus)
        except WireError:
            continue
    return None


async def object_rows(
    js: JetStreamContext, cluster: str, bundle: str, *, seen: dict[str, bytes] | None = None
) -> list[dict[str, Any]]:
    statuses: dict[ObjectKey, ObjectStatus] = {}
    subject = object_status_filter(cluster, bundle)
    for m in await _snapshot(js, bus.STATUS, subject):
        if seen is not None:
            seen[m.subject] = m.data
        try:
            st = decode(m.data, ObjectStatus)
        except WireError:
            continue
        statuses[st.key] = st
    health: dict[ObjectKey, ServerEvent] = {}
    for m in await _snapshot(js, bus.SERVER, cluster_filter("server", cluster)):
        try:
            ev = decode(m.data, ServerEvent)
        except WireError:
            continue
        if ev.key in statuses:
            health[ev.key] = ev
    rows = []
    for key, st in sorted(statuses.items()):
        found = health.get(key)
        rows.append(
            {
                "kind": key.kind,
                "namespace": key.namespace,
                "name": key.name,
                "phase": str(st.phase),
                "health": "Deleted"
                if found and found.deleted
                else str(found.health if found else st.health),
                "message": found.health_message if found and found.health_message else st.message,
                "revision": st.revision,
                "last_change": st.at.isoformat(timespec="seconds") if st.at else "",
            }
        )
    return rows


async def decisions(js: JetStreamContext, cluster: str, key: ObjectKey) -> list[DecisionRecord]:
    """Every decision about one object, oldest first (the DECISIONS stream keeps history)."""
    subject = object_subject("decision", cluster, key)
    out = []
    async for m in bus.Follower(js, bus.DECISIONS, subject, history=True).snapshot():
        with contextlib.suppress(WireError):
            out.append(decode(m.data, DecisionRecord))
    return out


WAIT_ENDS = frozenset(
    (BundlePhase.READY, BundlePhase.FAILED, BundlePhase.DEGRADED, BundlePhase.CONFLICT)
)
"""Phases that end ``publish --wait``. Reconciling and OutOfSync (drift being corrected) are
waited through; only Ready is a success."""


class BundleWait:
    """Follow one bundle's status until a revision reaches a phase of ``WAIT_ENDS``. Start it
    before publishing so no status is missed."""

    def __init__(self, nc: NATS, cluster: str, bundle: str) -> None:
        self.nc, self.cluster, self.bundle = nc, cluster, bundle
        self.watch = StatusWatch()

    async def start(self) -> None:
        await self.watch.start(self.nc, self.cluster, self.bundle, objects=False)

    async def wait(self, revision: str, *, within: float, progress: bool) -> BundleStatus | None:
        """The status that ended the wait, or the last one seen when ``within`` ran out (its
        phase is then not in ``WAIT_ENDS``), or None when there was none for ``revision``."""
        last: BundleStatus | None = None
        try:
            async for st in self.watch.each(self.watch.bundles, within):
                if st.revision != revision:
                    continue
                last = st
                if progress:
                    c = st.counts
                    sys.stderr.write(
                        f"\r{self.bundle}@{revision[:23]}: {st.phase:<11} applied {c.applied}/"
                        f"{c.total}  ready {c.ready}/{c.total}  failed {c.failed}   "
                    )
                    sys.stderr.flush()
                if st.phase in WAIT_ENDS:
                    break
        finally:
            if progress:
                sys.stderr.write("\n")
            await self.watch.stop()
        return last


__all__ = [
    "WAIT_ENDS",
    "BundleOptions",
    "BundlePhase",
    "BundleWait",
    "bundle_statuses",
    "decisions",
    "object_rows",
    "quiet_members_denial",
    "unserved",
]


async def shards(js: JetStreamContext) -> dict[str, list[dict[str, Any]]]:
    """The planner replicas (their last heartbeat) and who plans which cluster under which
    fencing token, from the shards KV bucket."""
    now = dt.datetime.now(dt.UTC)
    planners: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    prefix = f"$KV.{bus.SHARDS_BUCKET}."
    try:
        msgs = await _snapshot(js, bus.SHARDS_STREAM, prefix + ">")
    except NotFoundError:
        return {"planners": [], "clusters": []}
    for m in msgs:
        if (m.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            continue
        kind, _, token = m.subject.removeprefix(prefix).partition(".")
        try:
            name = decode_token(token)
            value = orjson.loads(m.data)
            at = dt.datetime.fromisoformat(value.get("at", ""))
        except (SubjectError, orjson.JSONDecodeError, ValueError, AttributeError):
            continue
        age = f"{(now - at).total_seconds():.1f}s ago"
        if kind == "planners":
            planners.append(
                {
                    "planner": name,
                    "clusters": ",".join(value.get("clusters", [])) or "-",
                    "heartbeat": age,
                }
            )
        elif kind == "clusters":
            claims.append(
                {
                    "cluster": name,
                    "planner": bus.claim_holder(m.data) or "(released)",
                    "fencing_token": int(m.metadata.sequence.stream),
                    "since": age,
                }
            )
    return {
        "planners": sorted(planners, key=lambda r: r["planner"]),
        "clusters": sorted(claims, key=lambda r: r["cluster"]),
    }
