"""What one planner replica sees of the others (DESIGN §8): heartbeats and claims folded from the
shards bucket as its entries arrive, and the clusters that have bundles. It only reads.

The claim loop (``claims``) asks this view and the pure rules (``rules``), and writes its own
claims through to ``claims`` so it need not wait for the bucket to echo them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable

from schemas.subjects import SubjectError, decode_token, family_filter, parse_subject
from services.common import bus
from services.common.bus import Claim
from services.core.lease import holder_of

log = logging.getLogger("driftbus.shards")
KV_PREFIX = f"$KV.{bus.SHARDS_BUCKET}."


@dataclasses.dataclass
class Peer:
    revision: int
    changed_at: float
    """When this replica saw the entry change (its own monotonic clock)."""


class ShardView:
    """The bucket as this replica last saw it: ``peers`` (planner id → its heartbeat entry),
    ``claims`` (cluster → holder and fencing revision) and ``clusters`` (those with bundles)."""

    def __init__(self, *, js: bus.JetStream, clock: Callable[[], float]) -> None:
        self.js = js
        self._clock = clock
        self.peers: dict[str, Peer] = {}
        self.claims: dict[str, Claim] = {}
        self.clusters: set[str] = set()
        self._malformed: set[str] = set()
        self._listed_at: float | None = None
        """When the bundle stream's subjects were last listed (None: never, or a malformed
        subject was seen since)."""

    def follow(self, *, caught_up: asyncio.Event, wake: asyncio.Event) -> list[asyncio.Task[None]]:
        """Start following the bucket (``caught_up`` once replayed) and the bundle stream
        (``wake`` on a cluster not seen before); the caller cancels the tasks."""
        return [
            asyncio.create_task(
                _forever(functools.partial(self._follow_bucket, caught_up)), name="follow shards"
            ),
            asyncio.create_task(
                _forever(functools.partial(self._notice_new_clusters, wake)),
                name="notice new clusters",
            ),
        ]

    async def _follow_bucket(self, caught_up: asyncio.Event) -> None:
        follower = bus.Follower(self.js, bus.SHARDS_STREAM, KV_PREFIX + ">")
        async for msg in follower.messages():
            self.observe(msg)
            if follower.caught_up.is_set():
                caught_up.set()

    async def _notice_new_clusters(self, wake: asyncio.Event) -> None:
        # headers only: the bundles themselves are read by the cluster's planner
        bundles = bus.Follower(
            self.js,
            bus.BUNDLES,
            family_filter("bundle"),
            last_per_subject=False,
            headers_only=True,
        )
        async for msg in bundles.messages():
            try:
                cluster = parse_subject(msg.subject).cluster
            except SubjectError:
                self._listed_at = None  # the next round's listing reports it
                continue
            if cluster not in self.clusters:
                # known from its subject: no listing of every (cluster, bundle) pair per new
                # cluster (a rollout's step places thousands, 32 at a time)
                self.clusters.add(cluster)
                wake.set()  # a new cluster: claim it now, not at the next heartbeat

    def observe(self, msg: bus.Message) -> None:
        """Fold one bucket entry (from the follower) into the view."""
        key = msg.subject.removeprefix(KV_PREFIX)
        kind, _, token = key.partition(".")
        rev = int(msg.metadata.sequence.stream)
        removed = (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE")
        try:
            name = decode_token(token)
        except SubjectError:
            log.warning("ignoring shard entry with a malformed key %s", key)
            return
        if kind == "planners":
            peer = self.peers.get(name)
            if removed:
                self.peers.pop(name, None)
            elif peer is None or rev > peer.revision:
                self.peers[name] = Peer(rev, self._clock())
        elif kind == "clusters":
            current = self.claims.get(name)
            if current is not None and rev <= current.revision:
                return  # our own write-through was newer
            holder = "" if removed else holder_of(msg.data, "planner")
            if holder is None:
                log.warning("claim of cluster %s is not a JSON object; treated as free", name)
            self.claims[name] = Claim(holder or "", rev)

    async def discover(self, *, every: float = 30.0) -> None:
        """Add the clusters that have bundles (the subjects of the bundle stream): at the first
        round, and every ``every`` seconds in case the follower of new bundles, which adds
        each new cluster itself, missed one (it was away). Every round, this was a listing of
        every (cluster, bundle) pair — 1,000 at 1,000 clusters, every 2 s, on a fleet that did
        nothing."""
        now = self._clock()
        if self._listed_at is not None and now - self._listed_at < every:
            return
        for subject in await bus.stream_subjects(self.js, bus.BUNDLES, family_filter("bundle")):
            try:
                self.clusters.add(parse_subject(subject).cluster)
            except SubjectError as exc:
                if subject not in self._malformed:  # said once; no cluster's planner reads it
                    self._malformed.add(subject)
                    log.error("bundle on a malformed subject: %s", exc)
        self._listed_at = now


async def _forever(follow: Callable[[], Awaitable[None]]) -> None:
    """Keep a follower running: a view that silently stopped would make every other replica
    look dead after the timeout. A restarted follower replays the bucket, which is harmless."""
    while True:
        try:
            await follow()
        except Exception:
            log.exception("following the shards bucket failed; following it again")
        await asyncio.sleep(1.0)
