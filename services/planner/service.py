"""The planner process: claims clusters (``sharding.claims``) and runs one ``Planner`` (the run
loop, ``shell.loop``) per claimed cluster, all fed by the replica's one ``Hub`` (``shell.hub``):
a constant number of consumers and no timer per quiet cluster, however many it plans.

Intent ids are derived from the state that caused them and the claim's fencing token
(``rule.messages``), so a replica taking a cluster over re-sends what was in flight without
duplicating it.

Peer services may run beside the planner in its process, on its connection (``beside``):
``driftbus planner`` runs the rollout driver so (``services/cli/run.py``), which the planner
never imports (an import contract keeps services apart).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from opentelemetry.metrics import Observation

from services.common import bus, heap, telemetry
from services.common.settings import replica_id
from services.planner.settings import PlannerSettings
from services.planner.sharding.claims import Coordinator, heartbeat_problem
from services.planner.shell.hub import Hub, HubStopped
from services.planner.shell.loop import Planner
from services.runtime import connections

log = logging.getLogger("driftbus.planner")

__all__ = ["Beside", "PlannerSettings", "Replica", "run"]

Beside = Callable[[bus.JetStream, PlannerSettings], Coroutine[Any, Any, None]]
"""A peer service run beside the planner for as long as it runs: given its JetStream context and
its settings (the replica's id resolved), the service's run."""


class Replica:
    """One planner process: plans the clusters its claims give it, one ``Planner`` each."""

    def __init__(
        self,
        *,
        settings: PlannerSettings,
        js: bus.JetStream,
        publisher: bus.Publisher,
        nc: bus.Connection | None = None,
    ) -> None:
        self.s = settings
        self.js = js
        self.nc = nc
        self.pub = publisher
        self.planners: dict[str, Planner] = {}
        self.hub = Hub(js, sweep=settings.members_interval, nc=nc)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.shards = Coordinator(
            js=js,
            planner_id=settings.planner_id,
            interval=settings.heartbeat_interval,
            timeout=settings.heartbeat_timeout,
            start=self.start_cluster,
            stop=self.stop_cluster,
        )
        telemetry.meter.create_observable_gauge(
            "driftbus_intents_pending",
            [self._observe_pending],
            description="intents queued or being applied, per cluster: scale appliers on it",
        )
        telemetry.meter.create_observable_gauge(
            "driftbus_cache_hit_ratio",
            [self._observe_hit_ratio],
            description="decisions that were cache hits since start (1.0: nothing re-applied)",
        )

    def ready(self) -> bool:
        return (
            self.hub.ready.is_set()
            and self.shards.ready.is_set()
            and all(p.ready.is_set() for p in self.planners.values())
        )

    async def start_cluster(self, cluster: str, token: int) -> None:
        planner = Planner(
            settings=self.s,
            js=self.js,
            publisher=self.pub,
            hub=self.hub,
            cluster=cluster,
            fencing_token=token,
            owns=lambda: self.shards.owns(cluster, token),
            nc=self.nc,
        )
        task = asyncio.create_task(planner.run(), name=f"plan {cluster}")
        task.add_done_callback(lambda t: self._ended(cluster, t))
        self.planners[cluster] = planner
        self._tasks[cluster] = task

    def _ended(self, cluster: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._tasks.get(cluster) is not task:
            return
        log.error("planning cluster %s stopped: %r; claiming it afresh", cluster, task.exception())
        self._tasks.pop(cluster, None)
        self.planners.pop(cluster, None)
        self.shards.forget(cluster)
        heap.forget_long_lived()  # its planner may have been kept out of collections

    async def stop_cluster(self, cluster: str) -> None:
        task = self._tasks.pop(cluster, None)
        self.planners.pop(cluster, None)
        if task is not None:
            task.cancel()
            # bounded: the claim round that stops a cluster must go on heartbeating whatever
            # the stopped planner is stuck in (a fenced planner sends nothing anyway)
            done, _ = await asyncio.wait({task}, timeout=10.0)
            if not done:
                log.error("planning cluster %s did not stop within 10s; left behind", cluster)
            elif not task.cancelled():
                with contextlib.suppress(Exception):
                    task.result()
        heap.forget_long_lived()  # its planner may have been kept out of collections

    async def run(self, beside: Sequence[Beside] = ()) -> None:
        """Plan the clusters our claims give us until cancelled, with the peer services
        ``beside`` running alongside (stopped first when the planner stops)."""
        peers = [
            asyncio.create_task(peer(self.js, self.s), name=getattr(peer, "__name__", "peer"))
            for peer in beside
        ]
        hub = asyncio.create_task(self.hub.run(), name="hub")
        claims: asyncio.Task[None] | None = None
        try:
            # no cluster is claimed before the hub follows every stream: a cluster's replay
            # and the hub's live messages must meet, with nothing published in between lost
            ready = asyncio.create_task(self.hub.ready.wait())
            try:
                await asyncio.wait({hub, ready}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ready.cancel()
            if not hub.done():
                claims = asyncio.create_task(self.shards.run(), name="claims")
                await asyncio.wait({hub, claims}, return_when=asyncio.FIRST_COMPLETED)
            for task in (hub, claims):
                if task is not None and task.done():
                    task.result()  # its error ends the replica: its clusters go to the others
            raise HubStopped("the planner's hub or claims ended")
        finally:
            if claims is not None:
                claims.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await claims
            hub.cancel()
            for task in peers:
                task.cancel()
            for task in peers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for cluster in list(self._tasks):
                await self.stop_cluster(cluster)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await hub

    def _observe_pending(self, _: Any) -> list[Observation]:
        return [
            Observation(p.pending, {"cluster": c})
            for c, p in self.planners.items()
            if p.pending is not None
        ]

    def _observe_hit_ratio(self, _: Any) -> list[Observation]:
        hits = total = 0
        for p in self.planners.values():
            stats = p.cache_stats()
            hits += stats["hits"]
            total += stats["hits"] + sum(stats["misses"].values())
        return [Observation(hits / total)] if total else []


async def run(settings: PlannerSettings, *, beside: Sequence[Beside] = ()) -> None:
    settings = dataclasses.replace(settings, planner_id=settings.planner_id or replica_id())
    if problem := heartbeat_problem(settings.heartbeat_interval, settings.heartbeat_timeout):
        raise SystemExit(f"driftbus planner: {problem}")
    async with connections(
        name="driftbus-planner",
        nats=settings,
        inbox=bus.inbox_prefix("planner"),
        stream_replicas=settings.stream_replicas,
        manage_streams=True,
        telemetry_settings=settings,
    ) as c:
        replica = Replica(settings=settings, js=c.js, publisher=c.publisher, nc=c.nc)
        c.health.add("claimed its clusters, each rebuilt from the streams and live", replica.ready)
        await replica.run(beside)
