"""The claim loop through which planner replicas share the clusters in a NATS KV bucket
(DESIGN §8): heartbeats, claims by compare-and-set, hand-overs, and the fencing token.

Bucket ``driftbus-shards``:

* ``planners.<id>`` — each replica rewrites its entry every ``heartbeat_interval``. Others call
  it dead when they have not seen the entry change for ``heartbeat_timeout`` on their own clock.
* ``clusters.<cluster>`` — the claim: ``{"planner": id}`` or ``{"planner": ""}`` once released.
  It is only ever changed with compare-and-set on its revision (``update(last=rev)``), so two
  replicas can never both win it. **The revision a replica's claim got is its fencing token**:
  KV revisions grow for the whole bucket, so a later claim (or a release) always has a higher
  one, and an applier that has seen a higher revision drops the intents of the deposed replica.

Every round a replica heartbeats, computes the fair share (``rules.assign``) from the
replicas it sees live and the current claims, releases what is no longer its share, and claims
what is its share and free (never claimed, released, or held by a replica that is not live).
A replica also fences itself: once its own heartbeats have failed for longer than the timeout
minus one interval, it stops planning before the others can take over.

This module is the loop: what it reads is ``view``, what it writes ``bucket``, and the
rules it asks ``rules`` and the lease rule every lease follows (``services.core.lease``), both
pure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from opentelemetry.metrics import Observation

from services.common import bus, telemetry
from services.common.bus import Claim
from services.core.lease import Term, live, may_claim
from services.planner.sharding.bucket import ShardBucket
from services.planner.sharding.rules import assign, heartbeat_problem, orphaned
from services.planner.sharding.view import ShardView

__all__ = ["Coordinator", "StartCluster", "StopCluster", "heartbeat_problem"]

log = logging.getLogger("driftbus.shards")
HANDOVERS = telemetry.meter.create_counter(
    "driftbus_planner_handovers",
    description="clusters claimed, released (rebalance) or lost (deposed) by this replica",
)
CLAIMS_AT_ONCE = 32
"""Claims a replica has in flight at once. Each is a compare-and-set round trip to the shards
bucket; one after the other they were the time a fleet took to be claimed — 70-80 ms each on a
loaded NATS, so 1,500 clusters a replica took two minutes, after a restart as on a rollout's
first placements (fleet-sim, 3,000 clusters, 2026-11-30). A claimed cluster's replay waits its
turn at the hub (``Hub.replays``), so this bounds round trips, not rebuilds."""
_STALE_HEARTBEATS = 5  # × timeout: a dead replica's entry is removed from the bucket after it


StartCluster = Callable[[str, int], Awaitable[None]]
StopCluster = Callable[[str], Awaitable[None]]


class Coordinator:
    """The claim loop of one planner replica; it starts and stops per-cluster planning."""

    def __init__(
        self,
        *,
        js: bus.JetStream,
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
        self.view = ShardView(js=js, clock=clock)
        self._assigned: tuple[object, dict[str, str]] = (None, {})
        """What ``assign`` was last given, and its answer."""
        self._wake = asyncio.Event()
        self.running: dict[str, int] = {}
        """cluster → fencing token of the claim this replica plans it under."""
        self.ready = asyncio.Event()
        self._bucket: ShardBucket | None = None
        self.term = Term(interval, timeout, clock)
        """Our heartbeats' term: we plan only while it holds."""
        telemetry.meter.create_observable_gauge(
            "driftbus_planner_clusters",
            [lambda _: [Observation(len(self.running), {"planner": self.me})]],
            description="clusters this planner replica plans now",
        )

    # --- what the per-cluster planners ask --------------------------------------------------

    def lease_ok(self) -> bool:
        """Have our heartbeats landed recently enough that nobody else may take over yet?"""
        return self.term.holds

    def owns(self, cluster: str, token: int) -> bool:
        """May a planner of ``cluster`` holding ``token`` still publish intents?"""
        return self.running.get(cluster) == token and self.lease_ok()

    def forget(self, cluster: str) -> None:
        """A cluster's planner stopped by itself (crashed): claim it afresh next round."""
        self.running.pop(cluster, None)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        self._bucket = await ShardBucket.open(self.js, me=self.me, clock=self._clock)
        caught_up = asyncio.Event()
        following = self.view.follow(caught_up=caught_up, wake=self._wake)
        try:
            while not caught_up.is_set():  # our own entry ends an empty view
                await self._heartbeat()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(caught_up.wait(), self.interval)
            # Announce ourselves and look around before claiming anything: replicas started
            # together then see each other and share at once instead of handing clusters over.
            if (sent := await self._heartbeat()) is not None:
                self.term.last_ok = sent
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
            for task in following:
                task.cancel()
            await self._leave()

    @property
    def bucket(self) -> ShardBucket:
        assert self._bucket is not None, "the bucket is opened by run()"
        return self._bucket

    async def _round(self) -> None:
        lapsed = not self.lease_ok()
        sent = await self._heartbeat()
        if sent is not None and lapsed and self.running:
            # Back from a pause or a partition: our claims may have moved meanwhile. Until each
            # is read back as still ours, the lease stays lapsed, so nothing is sent on a
            # claim that is gone (the follower's view may still be catching up).
            await self._verify_claims()
        if sent is not None:
            self.term.last_ok = sent
        if not self.lease_ok():
            for cluster in list(self.running):
                log.error(
                    "heartbeats failing for %.0fs: no longer planning cluster %s",
                    self.timeout,
                    cluster,
                )
                await self._drop(cluster, "deposed")
            return
        view = self.view
        await view.discover()
        now = self._clock()
        alive = live({p: peer.changed_at for p, peer in view.peers.items()}, now, self.timeout)
        alive.add(self.me)
        holders = {c: cl.holder for c, cl in view.claims.items() if cl.holder}
        share = self._share(view.clusters | set(view.claims), alive, holders)
        for cluster, token in list(self.running.items()):
            claim = view.claims.get(cluster)
            if claim is None or claim.revision != token:
                log.warning(
                    "cluster %s was claimed by %s meanwhile: deposed",
                    cluster,
                    claim.holder if claim else "nobody",
                )
                await self._drop(cluster, "deposed")
            elif share.get(cluster) != self.me:
                await self._release(cluster, token, to=share.get(cluster, ""))
        for cluster in orphaned(holders, self.running, share, self.me):
            claim = view.claims[cluster]
            if await self._free(cluster, claim.revision):
                log.info("freed cluster %s, claimed by our previous run (rebalance)", cluster)
        wanted = sorted(c for c, p in share.items() if p == self.me and c not in self.running)
        for first in range(0, len(wanted), CLAIMS_AT_ONCE):
            await self._keep_alive()
            claimed = await asyncio.gather(
                *(self._claim(c, alive) for c in wanted[first : first + CLAIMS_AT_ONCE]),
                return_exceptions=True,
            )
            for failed in claimed:  # each claim did its own bookkeeping; the rest waits a round
                if isinstance(failed, BaseException):
                    raise failed
        await self._sweep(now)

    def _share(
        self, clusters: set[str], alive: set[str], holders: dict[str, str]
    ) -> dict[str, str]:
        """``assign``, again only when what it is given changed: a quiet fleet's rounds give it
        the same clusters, replicas and claims every 2 s (1,000 clusters hashed per round)."""
        given = (frozenset(clusters), frozenset(alive), frozenset(holders.items()))
        if given != self._assigned[0]:
            self._assigned = (given, assign(clusters, alive, holders))
        return self._assigned[1]

    async def _keep_alive(self) -> None:
        """Heartbeat within a long round: claiming hundreds of clusters one by one, while the
        ones claimed first rebuild on the same loop, takes longer than the timeout, and a
        replica that heartbeats only between rounds would fence itself and drop them all."""
        if self._clock() - self.term.last_ok < self.interval:
            return
        if (sent := await self._heartbeat()) is not None:
            self.term.last_ok = sent

    async def _verify_claims(self) -> None:
        for cluster, token in list(self.running.items()):
            current = await bus.read_lease(self.bucket.kv, bus.claim_key(cluster)) or Claim("", 0)
            if current.revision > self.view.claims.get(cluster, Claim("", 0)).revision:
                self.view.claims[cluster] = current
            if current.revision != token:
                log.warning(
                    "cluster %s was claimed by %s meanwhile: deposed", cluster, current.holder
                )
                await self._drop(cluster, "deposed")

    async def _heartbeat(self) -> float | None:
        """Rewrite our entry; returns when it was sent (None: it failed)."""
        return await self.bucket.heartbeat(self.running, ready=self.ready.is_set())

    async def _claim(self, cluster: str, alive: set[str]) -> None:
        claim = self.view.claims.get(cluster)
        if claim is None:
            rev = await self.bucket.claim(cluster, last=None)
        elif may_claim(claim.holder, self.me, alive):
            rev = await self.bucket.claim(cluster, last=claim.revision)
        else:
            return  # its holder is live and has not released it yet
        if rev is None:
            return  # another replica claimed it first
        previous = claim.holder if claim else ""
        self.view.claims[cluster] = Claim(self.me, rev)
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
        rev = await self.bucket.free(cluster, token)
        if rev is None:
            return False  # already taken from us
        self.view.claims[cluster] = Claim("", rev)
        return True

    async def _drop(self, cluster: str, kind: str) -> None:
        self.running.pop(cluster, None)
        HANDOVERS.add(1, {"planner": self.me, "kind": kind})
        await self._stop(cluster)

    async def _sweep(self, now: float) -> None:
        """Remove heartbeat entries of replicas long dead, so the bucket lists the living."""
        for name, peer in list(self.view.peers.items()):
            if name != self.me and now - peer.changed_at > _STALE_HEARTBEATS * self.timeout:
                with contextlib.suppress(Exception):  # CAS: a replica that came back stays
                    await self.bucket.remove_heartbeat(name, peer.revision)
                    self.view.peers.pop(name, None)

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
        if self._bucket is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._bucket.leave(), 5.0)
