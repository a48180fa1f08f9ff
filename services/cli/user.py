"""The user's commands: ``publish``, ``status`` and ``why``.

They read the same compacted streams the services use, so a late subscriber sees current state
(last status per object and per bundle, live health from SERVER), not only new events.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import sys
import time
from typing import Any

import msgspec
import orjson
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    Bundle,
    BundleOptions,
    BundlePhase,
    BundleStatus,
    DecisionRecord,
    ObjectStatus,
    ServerEvent,
)
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    bundle_status_subject,
    bundle_subject,
    decode_token,
    encode_token,
    key_tokens,
)
from services.cli.load import Loaded
from services.common import bus, telemetry
from services.common.bundles import store_manifests
from services.core.manifest import check_bundle_name

INLINE_LIMIT = 768 * 1024  # below NATS's default 1 MiB max payload, with room for headers


def content_revision(loaded: Loaded) -> str:
    """Same manifests, same revision: republishing unchanged content is recognisably the same."""
    digest = hashlib.sha256(
        orjson.dumps([m.obj for m in loaded.manifests], option=orjson.OPT_SORT_KEYS)
    )
    return "sha256:" + digest.hexdigest()[:16]


async def publish(
    js: JetStreamContext,
    *,
    cluster: str,
    bundle: str,
    loaded: Loaded,
    revision: str,
    options: BundleOptions,
) -> Bundle:
    check_bundle_name(bundle)
    await bus.ensure_streams(js, manage=False, within=30)
    msg = Bundle(
        cluster=cluster,
        bundle=bundle,
        revision=revision,
        options=options,
        manifests=[m.obj for m in loaded.manifests],
        published_at=dt.datetime.now(dt.UTC),
        source=loaded.source,
    )
    data = encode(msg)
    if len(data) > INLINE_LIMIT:
        ref = await store_manifests(js, cluster, bundle, revision, msg.manifests)
        msg = msgspec.structs.replace(msg, manifests=[], manifests_ref=ref)
        data = encode(msg)
    await js.publish(
        bundle_subject(cluster, bundle),
        data,
        headers=telemetry.inject(
            {"Nats-Msg-Id": f"{cluster}/{bundle}@{revision}/{time.time_ns()}"}
        ),
    )
    return msg


async def _snapshot(js: JetStreamContext, stream: str, subject: str) -> list[Any]:
    return [m async for m in bus.Follower(js, stream, subject).snapshot()]


async def bundle_statuses(
    js: JetStreamContext, cluster: str, bundle: str | None = None
) -> list[BundleStatus]:
    subject = (
        bundle_status_subject(cluster, bundle)
        if bundle
        else f"driftbus.status.{encode_token(cluster)}.*.bundle"
    )
    out = []
    for m in await _snapshot(js, bus.STATUS, subject):
        try:
            out.append(decode(m.data, BundleStatus))
        except WireError:
            continue
    return sorted(out, key=lambda s: s.bundle)


async def object_rows(js: JetStreamContext, cluster: str, bundle: str) -> list[dict[str, Any]]:
    statuses: dict[ObjectKey, ObjectStatus] = {}
    subject = f"driftbus.status.{encode_token(cluster)}.{encode_token(bundle)}.object.>"
    for m in await _snapshot(js, bus.STATUS, subject):
        try:
            st = decode(m.data, ObjectStatus)
        except WireError:
            continue
        statuses[st.key] = st
    health: dict[ObjectKey, ServerEvent] = {}
    for m in await _snapshot(js, bus.SERVER, f"driftbus.server.{encode_token(cluster)}.>"):
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
    subject = f"driftbus.decision.{encode_token(cluster)}.{key_tokens(key)}"
    out = []
    async for m in bus.Follower(js, bus.DECISIONS, subject, history=True).snapshot():
        with contextlib.suppress(WireError):
            out.append(decode(m.data, DecisionRecord))
    return out


class BundleWait:
    """Follow one bundle's status until a revision is Ready, Failed or Degraded. Start it before
    publishing so no status is missed."""

    def __init__(self, nc: NATS, cluster: str, bundle: str) -> None:
        self.nc, self.cluster, self.bundle = nc, cluster, bundle
        self.queue: asyncio.Queue[BundleStatus] = asyncio.Queue()
        self._sub: Any = None

    async def start(self) -> None:
        async def on_msg(msg: Any) -> None:
            with contextlib.suppress(WireError):
                await self.queue.put(decode(msg.data, BundleStatus))

        self._sub = await self.nc.subscribe(
            bundle_status_subject(self.cluster, self.bundle), cb=on_msg
        )

    async def wait(self, revision: str, *, within: float, progress: bool) -> BundleStatus | None:
        deadline = time.monotonic() + within
        last: BundleStatus | None = None
        try:
            while (remaining := deadline - time.monotonic()) > 0:
                try:
                    st = await asyncio.wait_for(self.queue.get(), timeout=min(remaining, 1.0))
                except TimeoutError:
                    continue
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
                if st.phase in (BundlePhase.READY, BundlePhase.FAILED, BundlePhase.DEGRADED):
                    break
        finally:
            if progress:
                sys.stderr.write("\n")
            await self._sub.unsubscribe()
        return last


__all__ = [
    "BundleOptions",
    "BundlePhase",
    "BundleWait",
    "bundle_statuses",
    "content_revision",
    "decisions",
    "object_rows",
    "publish",
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
