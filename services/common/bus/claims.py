"""Planner claims on clusters in the shards bucket: keys, the holder, the fencing revision."""

from __future__ import annotations

import dataclasses
import logging

import orjson
from nats.js import JetStreamContext
from nats.js.errors import (
    KeyNotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from schemas.subjects import encode_token
from services.common.bus.follower import last_message
from services.common.bus.streams import SHARDS_BUCKET, SHARDS_STREAM

log = logging.getLogger("driftbus.bus")


def claim_key(cluster: str) -> str:
    return f"clusters.{encode_token(cluster)}"


def heartbeat_key(planner_id: str) -> str:
    # KV keys allow [-/_=.a-zA-Z0-9]; the id is a hostname-pid or a name a user chose
    return "planners." + encode_token(planner_id)


@dataclasses.dataclass(frozen=True)
class Claim:
    planner: str
    """The holder; empty once released."""
    revision: int
    """The entry's revision: the holder's fencing token."""


def claim_holder(data: bytes | None) -> str | None:
    """The planner a claim entry names ("" once released); None when it is not readable."""
    try:
        return str(orjson.loads(data or b"{}").get("planner", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return None


async def read_claim(kv: KeyValue, cluster: str) -> Claim | None:
    """The cluster's claim as the bucket holds it now (None: never claimed)."""
    try:
        entry = await kv.get(claim_key(cluster))
    except KeyNotFoundError:
        return None
    return Claim(claim_holder(entry.value) or "", int(entry.revision or 0))


async def claim_revision(js: JetStreamContext, cluster: str) -> int | None:
    """The revision of the cluster's planner claim (the current fencing token), or None when
    no planner ever claimed it (or the bucket is not there yet)."""
    try:
        last = await last_message(js, SHARDS_STREAM, f"$KV.{SHARDS_BUCKET}.{claim_key(cluster)}")
    except ServiceUnavailableError:
        return None
    return None if last is None else int(last.seq or 0)
