"""Simulated clusters for ``python -m bench fleet-sim``: the watcher and applier of each cluster as
bus members, with no Kubernetes behind them.

``python -m bench.fleetsim_members --nats URL --first I --count N --stats PATH`` simulates the
clusters ``sim-<I>`` … ``sim-<I+N-1>`` in one asyncio process. What each does on the bus is what
the real services do, through the same code where the code is not about Kubernetes:

* registers itself in the cluster registry (``services.clusters.registry.register``, as a watcher
  does at start);
* heartbeats as watcher (``synced``) and applier every 5 s (``services.clusters.members.announce``);
* takes its intents off the cluster's durable pull consumer with the applier's own loop
  (``services.applier.consumer.consume``: fetch with a 1 s timeout, 16 in flight) behind the
  applier's fence (``services.applier.fence``: the claim read at start and every second);
* answers an intent as applier + watcher would: the supersession check (the intent subject's last
  message), the applied fact by compare-and-publish (``publish_newest``, the applier's
  ``supersedes``), the object's status row, the server fact by compare-and-publish with the same
  SHA and a health — ``Ready``, or ``Failed`` in the clusters told to fail — then ``ack_sync``.

What is not simulated: the API server's apply (and its latency), the watcher's watches, relists
and its follower of the cluster's bundles. One NATS connection serves all clusters of a process
(real members hold one each).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import hashlib
import itertools
import json
import random
import signal
import sys
from pathlib import Path
from typing import Literal

import nats
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schemas.codec import decode, encode
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    DeleteIntent,
    Health,
    Intent,
    ObjectPhase,
    ObjectStatus,
    ServerEvent,
)
from schemas.subjects import object_status_subject, object_subject
from services.applier.consumer import consume, seq
from services.applier.fence import Fence, follow_claims, read_claim
from services.applier.report import supersedes
from services.applier.verbs import DELETED_SHA, now
from services.clusters import members
from services.clusters.registry import register
from services.common import bus
from services.common.bus.newest import publish_newest
from services.watcher.facts import fact_id, newer_than

CONCURRENCY = 16
"""Intents in flight per cluster (the applier's default ``--concurrency``)."""
ACK_WAIT = 10.0
FENCE_REFRESH = 1.0
"""The applier's default ``--fence-refresh``: a claim read per cluster per second."""


def cluster_name(i: int) -> str:
    return f"sim-{i:04d}"


def fails(cluster: str, share: float) -> bool:
    """Whether ``cluster`` reports its objects Failed (a stable pick of ``share`` of them)."""
    h = int.from_bytes(hashlib.sha256(cluster.encode()).digest()[:4], "big")
    return h / 2**32 < share


class SimCluster:
    """One cluster's watcher and applier, as the bus sees them."""

    def __init__(self, js: JetStreamContext, pub: bus.Publisher, name: str, *, failing: bool):
        self.js = js
        self.pub = pub
        self.name = name
        self.health = Health.FAILED if failing else Health.READY
        self.fence = Fence()
        self.rv = itertools.count(1000)
        self.counts: collections.Counter[str] = collections.Counter()
        self.bound = asyncio.Event()

    async def handle(self, msg: Msg) -> None:
        intent: ApplyIntent | DeleteIntent = decode(msg.data, Intent)  # type: ignore[arg-type]
        if not self.fence.admits(intent.fencing_token):
            self.counts["fenced"] += 1
            await msg.ack_sync()
            return
        last = await bus.last_message(self.js, bus.INTENTS, msg.subject)
        if last is None or last.seq != seq(msg):
            self.counts["superseded"] += 1
            await msg.ack_sync()
            return
        rv = str(next(self.rv))
        deleted = isinstance(intent, DeleteIntent)
        manifest_sha = DELETED_SHA if deleted else intent.manifest_sha  # type: ignore[union-attr]
        sha = (
            None if deleted else hashlib.sha256(f"{self.name}/{manifest_sha}".encode()).hexdigest()
        )
        at = now()
        fact = AppliedEvent(
            cluster=self.name,
            key=intent.key,
            bundle=intent.bundle,
            revision=intent.revision,
            manifest_sha=manifest_sha,
            apply_sha=sha,
            resource_version=rv,
            deleted=deleted,
            applied_at=at,
            applier=f"{self.name}-applier",
            intent_seq=seq(msg),
        )
        server = ServerEvent(
            cluster=self.name,
            key=intent.key,
            resource_version=rv,
            server_sha=sha,
            deleted=deleted,
            health=Health.UNKNOWN if deleted else self.health,
            health_message="simulated failure" if self.health is Health.FAILED else "",
            api_version=intent.api_version if deleted else intent.manifest.get("apiVersion", ""),  # type: ignore[union-attr]
            bundle=intent.bundle,
            observed_at=at,
            watcher=f"{self.name}-watcher",
        )
        row = ObjectStatus(
            cluster=self.name,
            bundle=intent.bundle,
            revision=intent.revision,
            key=intent.key,
            phase=ObjectPhase.PRUNED if deleted else ObjectPhase.APPLIED,
            apply_sha=sha,
            manifest_sha=None if deleted else manifest_sha,
            attempts=msg.metadata.num_delivered,
            at=at,
        )
        stream_seq = msg.metadata.sequence.stream
        await asyncio.gather(
            publish_newest(
                self.pub,
                self.js,
                bus.SERVER,
                object_subject("server", self.name, intent.key),
                encode(server),
                msg_id=fact_id(server),
                supersedes=newer_than(int(rv)),
                last_seq=0,
            ),
            publish_newest(
                self.pub,
                self.js,
                bus.APPLIED,
                object_subject("applied", self.name, intent.key),
                encode(fact),
                msg_id=f"applied:{stream_seq}",
                supersedes=functools.partial(supersedes, fact),
            ),
            await self.pub.publish(
                object_status_subject(self.name, intent.bundle, intent.key),
                encode(row),
                msg_id=f"status:{stream_seq}",
            ),
        )
        await msg.ack_sync()
        self.counts["deleted" if deleted else "applied"] += 1

    async def serve(self, stopping: asyncio.Event) -> list[asyncio.Task[None]]:
        """Bind the intent consumer and start the heartbeats, the fence and the consumer."""
        await read_claim(self.fence, self.js, self.name, max_backoff=5.0)
        await bus.ensure_intent_consumer(
            self.js, self.name, bus.IntentConsumerSettings(ack_wait=ACK_WAIT)
        )
        return [
            asyncio.create_task(self._beat("watcher")),
            asyncio.create_task(self._beat("applier")),
            asyncio.create_task(follow_claims(self.fence, self.js, self.name, every=FENCE_REFRESH)),
            asyncio.create_task(
                consume(
                    self.js,
                    cluster=self.name,
                    concurrency=CONCURRENCY,
                    ack_wait=ACK_WAIT,
                    max_deliver=-1,
                    handle=self.handle,
                    stopping=stopping,
                    bound=self.bound,
                )
            ),
        ]

    async def _beat(self, role: Literal["watcher", "applier"]) -> None:
        await asyncio.sleep(random.uniform(0, members.INTERVAL))  # spread, as real starts are
        await members.announce(
            self.pub,
            cluster=self.name,
            role=role,
            member_id=f"{self.name}-{role}",
        )


async def main(args: argparse.Namespace) -> None:
    nc = await nats.connect(args.nats, max_reconnect_attempts=-1, pending_size=64 * 1024 * 1024)
    js = nc.jetstream()
    pub = bus.Publisher(js, max_inflight=2048)
    names = [cluster_name(i) for i in range(args.first, args.first + args.count)]
    sims = [SimCluster(js, pub, n, failing=fails(n, args.fail_share)) for n in names]
    for i, sim in enumerate(sims):
        labels = {"sim": "true", "zone": f"z{i % 3}"}
        await register(js, sim.name, labels=labels, kube_version="v1.36.3-sim", by="fleetsim")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    tasks = list(
        itertools.chain.from_iterable(await asyncio.gather(*(s.serve(stopping) for s in sims)))
    )
    await asyncio.gather(*(s.bound.wait() for s in sims))
    print("ready", flush=True)
    await stopping.wait()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    total: collections.Counter[str] = collections.Counter()
    for s in sims:
        total.update(s.counts)
    total["publish_errors"] = pub.errors
    await asyncio.to_thread(Path(args.stats).write_text, json.dumps(dict(total)))
    await nc.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.fleetsim_members")
    p.add_argument("--nats", required=True)
    p.add_argument("--first", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--fail-share", type=float, default=0.0)
    p.add_argument("--stats", required=True, help="where the counters go (JSON) on SIGTERM")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(main(parse(sys.argv[1:])))
