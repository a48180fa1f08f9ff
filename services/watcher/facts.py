"""What the watcher says about an object: the server fact of a live object or a tombstone,
published only when it says something new against what the watcher last saw.

Pure: the watcher's shell lists and watches, calls these, and publishes what they return.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from schemas.messages import Health, ServerEvent
from schemas.subjects import ObjectKey
from services.core.health import ended, health, retiring
from services.core.manifest import owner_of, prune_disabled, rv_int
from services.core.sha import object_sha


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """What SERVER holds (or is about to hold) for one object: the watcher's cache entry."""

    sha: bytes | None
    health: Health
    rv: int
    keep: bool = False
    seq: int = 0
    """stream sequence of the SERVER message holding this fact (0: not published yet)"""
    retiring: bool = False
    """it finished and its controller will remove it (``health.retiring``): its tombstone says
    so even when a relist, not a watch event with its last state, notices it gone"""
    why: str = ""
    """the health's reason: a new one is news too (a Deployment first has "no status reported
    yet", then its controller's "ready: 0/1"; the status a user reads must not stay at the first)"""

    @classmethod
    def of(cls, ev: ServerEvent, seq: int) -> Seen:
        sha = bytes.fromhex(ev.server_sha) if ev.server_sha else None
        return cls(sha, ev.health, rv_int(ev.resource_version), ev.keep, seq, why=ev.health_message)


Change = tuple[Seen, ServerEvent]


def change(
    obj: dict[str, Any],
    seen: Seen | None,
    cluster: str,
    watcher_id: str,
    *,
    whole: bool = False,
) -> tuple[ObjectKey, Change | None]:
    """The fact to publish about live ``obj``, if it says something new against ``seen``
    (its SHA, health, health reason or keep changed, and it is not older than what SERVER
    holds). Raises
    HashError or SubjectError for an object that cannot be hashed or keyed."""
    key = ObjectKey.of(obj)
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp") and retiring(obj):
        # its controller is removing it (the TTL controller deletes in the foreground, so it
        # lingers a moment): that is its end already, not a change to correct
        if seen is not None and seen.sha is None:
            return key, None
        rv_now = rv_int(meta.get("resourceVersion", ""))
        if seen is not None and rv_now < seen.rv:
            return key, None
        last = ended(obj)
        return key, tombstone(key, str(rv_now), cluster, watcher_id, retired=True, ended=last)
    sha = object_sha(obj, whole=whole)
    h, why = health(obj)
    rv = rv_int(meta.get("resourceVersion", ""))
    keep = prune_disabled(obj)
    if seen is not None and (seen.sha, seen.health, seen.keep, seen.why) == (sha, h, keep, why):
        # (a Job becomes retiring as it completes: its health changes with it)
        return key, None
    if seen is not None and rv < seen.rv:
        return key, None  # older than what the stream already holds
    event = ServerEvent(
        cluster=cluster,
        key=key,
        resource_version=str(rv),
        server_sha=sha.hex(),
        health=h,
        health_message=why,
        api_version=str(obj.get("apiVersion", "")),
        bundle=owner_of(obj),
        keep=keep,
        watcher=watcher_id,
    )
    return key, (Seen(sha, h, rv, keep, retiring=retiring(obj), why=why), event)


def tombstone(
    key: ObjectKey,
    rv: str,
    cluster: str,
    watcher_id: str,
    *,
    retired: bool = False,
    ended: tuple[Health, str] | None = None,
) -> Change:
    """The fact that ``key`` is gone, noticed at ``rv`` (a watch event's or a relist's);
    ``retired`` when it had finished and was removed for it (``health.retiring``), with the
    health it ended in (``ended``: a hook deleted because it failed stays a failure)."""
    h, why = ended if retired and ended is not None else (Health.UNKNOWN, "")
    event = ServerEvent(
        cluster=cluster,
        key=key,
        resource_version=rv,
        server_sha=None,
        deleted=True,
        watcher=watcher_id,
        retired=retired,
        health=h,
        health_message=why,
    )
    return Seen(None, Health.UNKNOWN, rv_int(rv)), event
