"""Who serves a cluster: watchers and appliers announce themselves, planner and CLI ask.

A bundle published to a cluster that no watcher observes or no applier writes to would wait
forever with nothing to say why (issue 13, case 6). Each watcher and applier publishes a
``MemberHeartbeat`` on ``driftbus.member.<cluster>.<role>`` every ``INTERVAL`` seconds (the
MEMBERS stream keeps the last one per subject); a role is *served* when its last heartbeat is
younger than ``STALE_AFTER``. The watcher's heartbeat also says whether every watch has completed
its initial list: the planner prunes nothing before that (no prune from an incomplete view).

``serving()`` is pure (heartbeats and a clock in, problems out) so the rule is table-tested.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Literal

from schemas.codec import WireError, decode, encode
from schemas.messages import KindScope, MemberHeartbeat
from schemas.subjects import MEMBER_ROLES, member_subject
from services.common import bus

log = logging.getLogger("driftbus.members")

INTERVAL = 20.0
"""Seconds between heartbeats of one watcher/applier (a change of what a watcher says beats at
once). Every beat is a stored message delivered to every planner replica: at 1,000 clusters
and 5 s, heartbeats were most of what an idle fleet cost (issue 43: py-spy of an idle planner,
half its loop; 400 stored messages a second, 800 deliveries). A kubelet renews its node
lease every 10 s of 40 s: the same proportion, beat to staleness."""
STALE_AFTER = 60.0
"""A heartbeat older than this no longer counts (two missed beats and a late third; tolerates
clock skew)."""


def serving(
    cluster: str, heartbeats: dict[str, MemberHeartbeat | None], now: dt.datetime
) -> list[str]:
    """What is missing for ``cluster`` to be served: empty when a live watcher and applier are
    there. ``heartbeats`` maps each role to its last heartbeat (None: never seen)."""
    problems = []
    for role in MEMBER_ROLES:
        hb = heartbeats.get(role)
        if hb is None:
            problems.append(f"no {role} for cluster {cluster} has ever announced itself")
        elif (age := (now - hb.at).total_seconds()) > STALE_AFTER:
            problems.append(f"no {role} for cluster {cluster} (last seen {age:.0f}s ago)")
    return problems


def watcher_synced(hb: MemberHeartbeat | None, now: dt.datetime) -> bool:
    """Whether the cluster's watcher is live and has listed every kind it watches."""
    return hb is not None and (now - hb.at).total_seconds() <= STALE_AFTER and hb.synced


async def heartbeats(js: bus.JetStream, cluster: str) -> dict[str, MemberHeartbeat | None]:
    """The last heartbeat of each role of ``cluster`` (None: none, or unreadable)."""
    out: dict[str, MemberHeartbeat | None] = {}
    for role in MEMBER_ROLES:
        msg = await bus.last_message(js, bus.MEMBERS, member_subject(cluster, role))
        hb = None
        if msg is not None and msg.data:
            try:
                hb = heartbeat_of(msg.data)
            except WireError as exc:
                log.warning("ignoring the %s heartbeat of cluster %s: %s", role, cluster, exc)
        out[role] = hb
    return out


def heartbeat_of(data: bytes) -> MemberHeartbeat:
    """The heartbeat ``data`` carries; WireError when it is not one, or when its time names no
    zone (it could not be compared with the clock: ``serving`` would raise)."""
    hb = decode(data, MemberHeartbeat)
    if hb.at.utcoffset() is None:
        raise WireError(f"not a valid MemberHeartbeat message: at {hb.at} names no time zone")
    return hb


async def announce(
    pub: bus.Publisher,
    *,
    cluster: str,
    role: Literal["watcher", "applier"],
    member_id: str,
    state: Callable[[], tuple[bool, list[str]]] = lambda: (True, []),
    scopes: Callable[[], list[KindScope]] = list,
    interval: float = INTERVAL,
    wake: asyncio.Event | None = None,
) -> None:
    """Publish this process's heartbeat forever; ``state()`` gives (synced, problems),
    ``scopes()`` the custom kinds' scopes it discovered. ``wake`` set: beat now (and clear)."""
    subject = member_subject(cluster, role)
    while True:
        synced, problems = state()
        now = dt.datetime.now(dt.UTC)
        hb = MemberHeartbeat(
            cluster=cluster,
            role=role,
            id=member_id,
            at=now,
            synced=synced,
            problems=problems,
            scopes=scopes(),
        )
        try:
            # no dedupe id: a beat published twice is harmless (MEMBERS keeps the last per
            # subject), and 400 a second at 1,000 clusters were ids nats-server kept 2 minutes
            await pub.publish(subject, encode(hb), msg_id=None)
        except Exception as exc:  # noqa: BLE001 - NATS away: the next beat tries again
            log.warning("heartbeat on %s not published: %s", subject, exc)
        if wake is None:
            await asyncio.sleep(interval)
            continue
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), interval)
        wake.clear()
