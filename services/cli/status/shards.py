"""``driftbus shards``: the planner replicas (their last heartbeat) and who plans which cluster
under which fencing token, read from the shards KV bucket; the document is made from the
entries by a pure function, which the fuzz reads hostile entries with."""

from __future__ import annotations

import datetime as dt

import orjson

from schemas.cli import ClaimRow, PlannerRow, ShardsDocument
from schemas.subjects import SubjectError, decode_token
from services.cli import reads as user
from services.common import bus
from services.core.lease import holder_of


async def shards(js: bus.JetStream) -> ShardsDocument:
    """The planner replicas (their last heartbeat) and who plans which cluster under which
    fencing token, from the shards KV bucket."""
    prefix = f"$KV.{bus.SHARDS_BUCKET}."
    try:
        msgs = await user.snapshot(js, bus.SHARDS_STREAM, prefix + ">")
    except bus.StreamMissing:
        return ShardsDocument(planners=[], clusters=[])
    return shards_document(msgs, dt.datetime.now(dt.UTC))


def shards_document(msgs: list[bus.Message], now: dt.datetime) -> ShardsDocument:
    """The document of the shards bucket's entries ``msgs``; an entry no planner wrote is left
    out (pure)."""
    prefix = f"$KV.{bus.SHARDS_BUCKET}."
    planners: list[PlannerRow] = []
    claims: list[ClaimRow] = []
    for m in msgs:
        if (m.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            continue
        kind, _, token = m.subject.removeprefix(prefix).partition(".")
        try:
            name = decode_token(token)
            value = orjson.loads(m.data)
            at = dt.datetime.fromisoformat(value.get("at", ""))
            listed = value.get("clusters", [])
        except (SubjectError, orjson.JSONDecodeError, ValueError, AttributeError, TypeError):
            continue  # not a heartbeat or claim any planner wrote: nothing to show
        if at.tzinfo is None or not isinstance(listed, list):
            continue
        age = round((now - at).total_seconds(), 3)
        if kind == "planners":
            clusters = [str(c) for c in listed]
            planners.append(
                PlannerRow(
                    planner=name, clusters=clusters, heartbeat_at=at, heartbeat_age_seconds=age
                )
            )
        elif kind == "clusters":
            claims.append(
                ClaimRow(
                    cluster=name,
                    planner=holder_of(m.data, "planner") or None,
                    fencing_token=int(m.metadata.sequence.stream),
                    since=at,
                    since_seconds=age,
                )
            )
    return ShardsDocument(
        planners=sorted(planners, key=lambda r: r.planner),
        clusters=sorted(claims, key=lambda r: r.cluster),
    )
