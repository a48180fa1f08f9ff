"""Planner replicas share the clusters through a NATS KV bucket (DESIGN §8): heartbeats, claims
by compare-and-set, hand-overs, and the fencing token every intent carries.

Bucket ``driftbus-shards``:

* ``planners.<id>`` — each replica rewrites its entry every ``heartbeat_interval``. Others call
  it dead when they have not seen the entry change for ``heartbeat_timeout`` on their own clock.
* ``clusters.<cluster>`` — the claim: ``{"planner": id}`` or ``{"planner": ""}`` once released.
  It is only ever changed with compare-and-set on its revision (``update(last=rev)``), so two
  replicas can never both win it. **The revision a replica's claim got is its fencing token**:
  KV revisions grow for the whole bucket, so a later claim (or a release) always has a higher
  one, and an applier that has seen a higher revision drops the intents of the deposed replica.

Every round a replica heartbeats, computes the fair share (``sharding.assign``) from the
replicas it sees live and the current claims, releases what is no longer its share, and claims
what is its share and free (never claimed, released, or held by a replica that is not live).
A replica also fences itself: once its own heartbeats have failed for longer than the timeout
minus one interval, it stops planning before the others can take over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable

import nats.errors
import orjson
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from opentelemetry.metrics import Observation

from schemas.subjects import SubjectError, decode_token, family_filter, parse_subject
from services.common import bus, telemetry
from services.common.bus import Claim
from services.planner.sharding import assign, live

log = logging.getLogger("driftbus.shards")
HANDOVERS = telemetry.meter.create_counter(
    "driftbus_planner_handovers",
    description="clusters claimed, released (rebalance) or lost (deposed) by this replica",
)
_KV_PREFIX = f"$KV.{bus.SHARDS_BUCKET}."
_STALE_HEARTBEATS = 5  # × timeout: a dead replica's entry is removed from the bucket after it


@dataclasses.dataclass
class Peer:
    revision: int
    changed_at: float
    """When this replica saw the entry change (its own monotonic clock)."""


StartCluster = Callable[[str, int], Awaitable[None]]
StopCluster = Callable[[str], Awaitable[None]]


def heartbeat_problem(interval: float, timeout: float) -> str | None:
    """Why these heartbeat settings cannot work, if they cannot: a replica fences itself one
    interval before the others may take over, which needs room for at least one heartbeat."""
    if timeout < 2 * interval:
        return (
            f"--heartbeat-timeout ({timeout}s) must be at least twice "
            f"--heartbeat-interval ({interval}s)"
        )
    return None


class Coordinator:
    """The claim loop of one planner replica; it starts and stops per-cluster planning."""

    def __init__(
        self,
        *,
        js: JetStreamContext,
        planner_id: str,
        interval: float,
        timeout: float,
        start: StartCluster,
        stop: StopCluster,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if problem := heartbeat_problem(interval, timeout):
            raise ValueError(problem)
        self.js = js
        self.me = planner_id
        self.interval = interval
        self.timeout = timeout
        self._start = start
        self._stop = stop
        self._clock = clock
        self.peers: dict[str, Peer] = {}
        self.claims: dict[str, Claim] = {}
        self.clusters: set[str] = set()
        self._malformed: set[str] = set()
        self._wake = asyncio.Event()
        self.running: dict[str, int] = {}
        """cluster → fencing token of the claim this replica plans it under."""
        self.ready = asyncio.Event()
        self._kv: KeyValue | None = None
        self._heartbeat_rev = 0
        self._last_ok = float("-inf")
        telemetry.meter.create_observable_gauge(
            "driftbus_planner_clusters",
            [lambda _: [Observation(len(self.running), {"planner": self.me})]],
            description="clusters this planner replica plans now",
        )

    # --- what the per-cluster planners ask --------------------------------------------------

    def lease_ok(self) -> bool:
        # Others see our last heartbeat no earlier than we sent it and wait `timeout` after
        # that; stopping one interval sooner leaves room for clock rates and scheduling.
        return self._clock() < self._last_ok + self.timeout - self.interval

    def owns(self, cluster: str, token: int) -> bool:
        """May a planner of ``cluster`` holding ``token`` still publish intents?"""
        return self.running.get(cluster) == token and self.lease_ok()

    def forget(self, cluster: str) -> None:
        """A cluster's planner stopped by itself (crashed): claim it afresh next round."""
        self.running.pop(cluster, None)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        self._kv = await self._bucket()
        caught_up = asyncio.Event()

        async def follow() -> None:
            follower = bus.Follower(self.js, bus.SHARDS_STREAM, _KV_PREFIX + ">")
            async for msg in follower.messages():
                self._observe(msg)
                if follower.caught_up.is_set():
                    caught_up.set()

        async def notice_new_clusters() -> None:
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
                    known = parse_subject(msg.subject).cluster in self.clusters
                except SubjectError:
                    known = False  # reported by the round
                if not known:
                    self._wake.set()  # a new cluster: claim it now, not at the next heartbeat

        watching = asyncio.create_task(_forever(follow), name="follow shards")
        noticing = asyncio.create_task(_forever(notice_new_clusters), name="notice new clusters")
        try:
            while not caught_up.is_set():  # our own entry ends an empty view
                await self._heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(caught_up.wait(), self.interval)
            # Announce ourselves and look around before claiming anything: replicas started
            # together then see each other and share at once instead of handing clusters over.
            if (sent := await self._heartbeat()) is not None:
                self._last_ok = sent
            await asyncio.sleep(2 * self.interval)
            while True:
                try:
                    await self._round()
                except Exception:  # a round that failed (NATS away) is retried next interval
                    log.exception("shard round failed")
                self.ready.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval)
                self._wake.clear()
        finally:
            watching.cancel()
            noticing.cancel()
            await self._leave()

    async def _bucket(self) -> KeyValue:
        while True:
            try:
                return await self.js.key_value(bus.SHARDS_BUCKET)
            except BucketNotFoundError:
                await asyncio.sleep(0.5)

    def _observe(self, msg: Msg) -> None:
        """Fold one bucket entry (from the follower) into the local view."""
        key = msg.subject.removeprefix(_KV_PREFIX)
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
            holder = "" if removed else bus.claim_holder(msg.data)
            if holder is None:
                log.warning("claim of cluster %s is not a JSON object; treated as free", name)
            self.claims[name] = Claim(holder or "", rev)

    async def _round(self) -> None:
        lapsed = not self.lease_ok()
        sent = await self._heartbeat()
        if sent is not None and lapsed and self.running:
            # Back from a pause or a partition: our claims may have moved meanwhile. Until each
            # is read back as still ours, the lease stays lapsed, so nothing is sent on a
            # claim that is gone (the follower's view may still be catching up).
            await self._verify_claims()
        if sent is not None:
            self._last_ok = sent
        if not self.lease_ok():
            for cluster in list(self.running):
                log.error(
                    "heartbeats failing for %.0fs: no longer planning cluster %s",
                    self.timeout,
                    cluster,
                )
                await self._drop(cluster, "deposed")
            return
        await self._discover()
        now = self._clock()
        alive = live({p: peer.changed_at for p, peer in self.peers.items()}, now, self.timeout)
        alive.add(self.me)
        holders = {c: cl.planner for c, cl in self.claims.items() if cl.planner}
        share = assign(self.clusters | set(self.claims), alive, holders)
        for cluster, token in list(self.running.items()):
            claim = self.claims.get(cluster)
            if claim is None or claim.revision != token:
                log.warning(
                    "cluster %s was claimed by %s meanwhile: deposed",
                    cluster,
                    claim.planner if claim else "nobody",
                )
                await self._drop(cluster, "deposed")
            elif share.get(cluster) != self.me:
                await self._release(cluster, token, to=share.get(cluster, ""))
        for cluster in sorted(c for c, p in share.items() if p == self.me):
            if cluster not in self.running:
                await self._claim(cluster, alive)
        await self._sweep(now)

    async def _verify_claims(self) -> None:
        assert self._kv is not None
        for cluster, token in list(self.running.items()):
            current = await bus.read_claim(self._kv, cluster) or Claim("", 0)
            if current.revision > self.claims.get(cluster, Claim("", 0)).revision:
                self.claims[cluster] = current
            if current.revision != token:
                log.warning(
                    "cluster %s was claimed by %s meanwhile: deposed", cluster, current.planner
                )
                await self._drop(cluster, "deposed")

    async def _heartbeat(self) -> float | None:
        """Rewrite our entry; returns when it was sent (None: it failed)."""
        assert self._kv is not None
        sent = self._clock()
        value = orjson.dumps(
            {
                "planner": self.me,
                "clusters": sorted(self.running),
                "ready": self.ready.is_set(),  # it has completed a claim round
                "at": _now_iso(),
            }
        )
        key = bus.heartbeat_key(self.me)
        try:
            if self._heartbeat_rev:
                rev = await self._kv.update(key, value, last=self._heartbeat_rev)
            else:
                rev = await self._kv.put(key, value)
        except KeyWrongLastSequenceError:
            log.error(
                "heartbeat entry of %s changed under us: is another replica using the same "
                "planner id? ids must be unique",
                self.me,
            )
            rev = await self._kv.put(key, value)
        except (nats.errors.Error, TimeoutError) as exc:
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
            return None
        self._heartbeat_rev = rev
        return sent

    async def _discover(self) -> None:
        """The clusters that have bundles (the subjects of the bundle stream)."""
        info = await self.js.stream_info(bus.BUNDLES, subjects_filter=family_filter("bundle"))
        for subject in (info.state.subjects or {}) if info.state else {}:
            try:
                self.clusters.add(parse_subject(subject).cluster)
            except SubjectError as exc:
                if subject not in self._malformed:  # said once; no cluster's planner reads it
                    self._malformed.add(subject)
                    log.error("bundle on a malformed subject: %s", exc)

    async def _claim(self, cluster: str, alive: set[str]) -> None:
        assert self._kv is not None
        claim = self.claims.get(cluster)
        value = orjson.dumps({"planner": self.me, "at": _now_iso()})
        key = bus.claim_key(cluster)
        try:
            if claim is None:
                rev = await self._kv.create(key, value)
            elif claim.planner in ("", self.me) or claim.planner not in alive:
                rev = await self._kv.update(key, value, last=claim.revision)
            else:
                return  # its holder is live and has not released it yet
        except KeyWrongLastSequenceError:
            log.info("cluster %s: another replica claimed it first", cluster)
            return
        previous = claim.planner if claim else ""
        self.claims[cluster] = Claim(self.me, rev)
        self.running[cluster] = rev
        HANDOVERS.add(1, {"planner": self.me, "kind": "claimed"})
        log.info(
            "claimed cluster %s (fencing token %d)%s",
            cluster,
            rev,
            f", taken over from {previous}" if previous and previous != self.me else "",
            extra={"cluster": cluster, "fencing_token": rev},
        )
        await self._start(cluster, rev)

    async def _release(self, cluster: str, token: int, *, to: str) -> None:
        """Stop planning, let the appliers finish our intents, then free the claim: no intent of
        ours follows the release, and the next replica finds their results instead of sending
        them again (which would apply twice what was in flight)."""
        await self._drop(cluster, "released")
        await self._drained([cluster], self.timeout)
        if await self._free(cluster, token):
            log.info("released cluster %s for %s (rebalance)", cluster, to)

    async def _drained(self, clusters: list[str], within: float) -> None:
        deadline = self._clock() + within
        waiting = list(clusters)
        while waiting and self._clock() < deadline:
            pending = [await bus.intents_pending(self.js, c) for c in waiting]
            # done: none left, or no applier consumer to wait for (None)
            waiting = [c for c, n in zip(waiting, pending, strict=True) if n]
            if waiting:
                await asyncio.sleep(self.interval / 2)

    async def _free(self, cluster: str, token: int) -> bool:
        assert self._kv is not None
        value = orjson.dumps({"planner": "", "released_by": self.me, "at": _now_iso()})
        try:
            rev = await self._kv.update(bus.claim_key(cluster), value, last=token)
        except KeyWrongLastSequenceError:
            return False  # already taken from us
        self.claims[cluster] = Claim("", rev)
        return True

    async def _drop(self, cluster: str, kind: str) -> None:
        self.running.pop(cluster, None)
        HANDOVERS.add(1, {"planner": self.me, "kind": kind})
        await self._stop(cluster)

    async def _sweep(self, now: float) -> None:
        """Remove heartbeat entries of replicas long dead, so the bucket lists the living."""
        assert self._kv is not None
        for name, peer in list(self.peers.items()):
            if name != self.me and now - peer.changed_at > _STALE_HEARTBEATS * self.timeout:
                with contextlib.suppress(Exception):  # CAS: a replica that came back stays
                    await self._kv.delete(bus.heartbeat_key(name), last=peer.revision)
                    self.peers.pop(name, None)

    async def _leave(self) -> None:
        """Shutting down: hand every cluster back at once instead of after the timeout, having
        given the appliers a few seconds (within a pod's grace period) to finish our intents."""
        held = dict(self.running)
        for cluster in held:
            await self._drop(cluster, "released")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._drained(list(held), min(self.timeout, 5.0)), 6.0)
        for cluster, token in held.items():
            with contextlib.suppress(Exception):
                if await asyncio.wait_for(self._free(cluster, token), 2.0):
                    log.info("released cluster %s: shutting down", cluster)
        if self._kv is not None and self._heartbeat_rev:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self._kv.delete(bus.heartbeat_key(self.me), last=self._heartbeat_rev), 5.0
                )


async def _forever(follow: Callable[[], Awaitable[None]]) -> None:
    """Keep a follower running: a view that silently stopped would make every other replica
    look dead after the timeout. A restarted follower replays the bucket, which is harmless."""
    while True:
        try:
            await follow()
        except Exception:
            log.exception("following the shards bucket failed; following it again")
        await asyncio.sleep(1.0)


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
