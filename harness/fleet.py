"""Several test clusters on one bus (scale tests and benchmarks): an etcd + kube-apiserver pair,
a watcher and an applier pool per cluster, and any number of planner replicas."""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Iterator
from pathlib import Path

from harness.pipeline import Pipeline
from services.common import bus
from services.controlplane import servers


@contextlib.contextmanager
def clusters(
    workdir: Path,
    count: int,
    *,
    names: list[str] | None = None,
    controllers: bool = False,
) -> Iterator[list[servers.Cluster]]:
    """``count`` independent clusters (named ``k0``… or ``names``), started side by side, with
    their controllers when asked."""
    names = names or [f"k{i}" for i in range(count)]
    with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
        futures = [
            pool.submit(servers.Cluster.start, n, workdir / n, controllers=controllers)
            for n in names
        ]
        started = []
        try:
            for f in futures:
                started.append(f.result())
            yield started
        finally:
            for f in futures:
                if f.done() and f.exception() is None and f.result() not in started:
                    started.append(f.result())
            for c in started:
                c.stop()


class Fleet:
    """Pipelines (one per cluster) sharing one NATS, plus planner replicas."""

    def __init__(
        self,
        *,
        clusters: list[servers.Cluster],
        names: list[str],
        nats: servers.NatsServer,
        workdir: Path,
        heartbeat_interval: float,
        heartbeat_timeout: float,
    ) -> None:
        self.nats = nats
        self.pipelines = {
            name: Pipeline(
                stack=servers.Stack(workdir, cluster, nats),
                nats=nats,
                cluster=name,
                workdir=workdir / name,
            )
            for name, cluster in zip(names, clusters, strict=True)
        }
        for p in self.pipelines.values():
            p.workdir.mkdir(parents=True, exist_ok=True)
        self.planners: dict[str, servers.Process] = {}
        self._planner_home = Pipeline(
            stack=servers.Stack(workdir, clusters[0], nats),
            nats=nats,
            cluster="",
            workdir=workdir / "planners",
        )
        self._planner_home.workdir.mkdir(parents=True, exist_ok=True)
        self.heartbeat = (heartbeat_interval, heartbeat_timeout)

    def set_log_level(self, level: str) -> None:
        for p in [*self.pipelines.values(), self._planner_home]:
            p.log_level = level

    def start_planner(self, name: str) -> servers.Process:
        interval, timeout = self.heartbeat
        proc = self._planner_home.start(
            "planner",
            name,
            "--heartbeat-interval",
            str(interval),
            "--heartbeat-timeout",
            str(timeout),
        )
        self.planners[name] = proc
        return proc

    def start_cluster_services(self, *, watchers: int = 1, appliers: int = 1) -> None:
        for p in self.pipelines.values():
            for i in range(watchers):
                p.start("watcher", f"watcher-{i}")
            for i in range(appliers):
                p.start("applier", f"applier-{i}")

    def stop_all(self) -> None:
        self._planner_home.stop_all()
        for p in self.pipelines.values():
            p.stop_all()

    def logs(self) -> str:
        return "\n".join([self._planner_home.logs(), *(p.logs() for p in self.pipelines.values())])

    async def claims(self, js: bus.JetStream) -> dict[str, bus.Claim]:
        """cluster → its claim in the shards bucket (clusters never claimed are absent)."""
        try:
            kv = await bus.bucket(js, bus.SHARDS_BUCKET)
        except bus.BucketMissing:
            return {}
        out = {}
        for name in self.pipelines:
            if (claim := await bus.read_lease(kv, bus.claim_key(name))) is not None:
                out[name] = claim
        return out
