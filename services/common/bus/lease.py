"""Leases in KV buckets: an entry names its holder and is changed only by compare-and-set, so of
two writers one wins; the revision the winning write got is the holder's fencing token. The
planners' claims on clusters (the shards bucket: ``claim_key``, ``heartbeat_key``) and the
rollout driver's lease (the rollouts bucket's ``driver`` entry) are both read (``read_lease``)
and taken (``take``) here; who may take one, and for how long it holds, is the pure rule of
``services.core.lease``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.errors import ServiceUnavailableError
from nats.js.kv import KeyValue

from schemas.subjects import encode_token
from services.common.bus.follower import last_message
from services.common.bus.kv import create_entry, read_entry, update_entry
from services.common.bus.streams import SHARDS_BUCKET, SHARDS_STREAM
from services.core.lease import holder_of


def claim_key(cluster: str) -> str:
    return f"clusters.{encode_token(cluster)}"


def heartbeat_key(planner_id: str) -> str:
    # KV keys allow [-/_=.a-zA-Z0-9]; the id is a hostname-pid or a name a user chose
    return "planners." + encode_token(planner_id)


@dataclasses.dataclass(frozen=True)
class Claim:
    holder: str
    """The holder; empty once released (or unreadable: free)."""
    revision: int
    """The entry's revision: the holder's fencing token."""


async def read_lease(kv: KeyValue, key: str, field: str = "planner") -> Claim | None:
    """The lease ``key`` as the bucket holds it now, its holder named by ``field`` (None: never
    written, or deleted)."""
    entry = await read_entry(kv, key)
    return None if entry is None else Claim(holder_of(entry.value, field) or "", entry.revision)


async def take(kv: KeyValue, key: str, value: bytes, *, last: int | None) -> int | None:
    """Write the lease ``key`` only while it is at revision ``last`` (None: only if it does not
    exist): the new revision, the writer's fencing token, or None when another came first."""
    if last is None:
        return await create_entry(kv, key, value)
    return await update_entry(kv, key, value, last=last)


def claim_subject(cluster: str) -> str:
    """The subject every write of the cluster's claim is published on (a KV put is a message)."""
    return f"$KV.{SHARDS_BUCKET}.{claim_key(cluster)}"


@contextlib.asynccontextmanager
async def on_claim_change(
    nc: NATS, cluster: str, changed: Callable[[], None]
) -> AsyncIterator[None]:
    """Call ``changed`` whenever the cluster's claim is written, while in the block: a plain
    subscription on the claim's subject, which costs nothing while no planner claims or
    releases the cluster (a read per second did, at every applier of every cluster). It carries
    no revision: read it (``claim_revision``). A write made while the connection was down is
    not seen."""

    async def _seen(_msg: object) -> None:
        changed()

    sub = await nc.subscribe(claim_subject(cluster), cb=_seen)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a closed connection has nothing to undo
            await sub.unsubscribe()


async def claim_revision(js: JetStreamContext, cluster: str) -> int | None:
    """The revision of the cluster's planner claim (the current fencing token), or None when
    no planner ever claimed it (or the bucket is not there yet)."""
    try:
        last = await last_message(js, SHARDS_STREAM, claim_subject(cluster))
    except ServiceUnavailableError:
        return None
    return None if last is None else int(last.seq or 0)
