"""What every service process opens at start and closes at exit: NATS, streams, a publisher,
and (for the services that talk to a cluster) a Kubernetes client."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from services.common import bus, telemetry
from services.common.settings import setting
from services.kube import KubeClient


@dataclasses.dataclass
class Connections:
    nc: bus.Connection
    js: bus.JetStream
    publisher: bus.Publisher
    kube: KubeClient | None = None
    health: telemetry.Health = dataclasses.field(default_factory=telemetry.Health)
    """Readiness checks: NATS and the streams here; the service adds its own."""


@contextlib.asynccontextmanager
async def connections(
    *,
    name: str,
    nats: bus.NatsSettings,
    inbox: str,
    stream_replicas: int = 1,
    manage_streams: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
    with_kube: bool = False,
    telemetry_settings: telemetry.TelemetrySettings | None = None,
) -> AsyncIterator[Connections]:
    """Set up telemetry and its endpoints, connect, create or await the streams, and on exit
    flush publishes and close all."""
    health = telemetry.Health()
    t = telemetry_settings or telemetry.TelemetrySettings()
    telemetry.setup(name.removeprefix("driftbus-").split("-")[0], t)
    runner = await telemetry.serve(t.http_port, health)
    nc = await bus.connect(nats, name=name, inbox=inbox)
    js = nc.jetstream()
    kube: KubeClient | None = None
    publisher = bus.Publisher(js, retry_for=nats.publish_retry)
    streams_bound = False
    health.add("nats connected", lambda: nc.is_connected)
    health.add("streams bound", lambda: streams_bound)
    try:
        await bus.ensure_streams(js, replicas=stream_replicas, manage=manage_streams)
        streams_bound = True
        if with_kube:
            kube = (
                await KubeClient.from_kubeconfig(kubeconfig, context)
                if kubeconfig
                else KubeClient.in_cluster()
            )
        yield Connections(nc, js, publisher, kube, health)
    finally:
        await publisher.flush()
        if kube is not None:
            await kube.close()
        await nc.drain()
        if runner is not None:
            await runner.cleanup()


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """The settings of a service bound to one cluster (watcher, applier): which cluster, and
    how to reach its API server."""

    cluster: str = setting("", "name of the cluster this process serves (required)")
    kubeconfig: str | None = setting(
        None, "kubeconfig path (in-cluster config when unset)", env="KUBECONFIG"
    )
    context: str | None = setting(None, "kubeconfig context (current context when unset)")
    whole_object_drift: bool = setting(
        False,
        "hash whole objects, not only the fields driftbus owns: every change by another "
        "controller then counts as drift and is re-applied (the rule before issue 15, kept to "
        "measure against; watcher and applier of a cluster must agree)",
    )


@dataclasses.dataclass
class ClusterConnections(Connections):
    kube: KubeClient = dataclasses.field(default=None)  # type: ignore[assignment]


@contextlib.asynccontextmanager
async def cluster_connections(
    role: str,
    s: ClusterSettings,
    nats: bus.NatsSettings,
    telemetry_settings: telemetry.TelemetrySettings,
) -> AsyncIterator[ClusterConnections]:
    """``connections`` for a service bound to one cluster: the cluster is required and the
    Kubernetes client is always there."""
    if not s.cluster:
        raise SystemExit(f"driftbus {role}: --cluster (or DRIFTBUS_CLUSTER) is required")
    async with connections(
        name=f"driftbus-{role}-{s.cluster}",
        nats=nats,
        inbox=bus.inbox_prefix(role, s.cluster),
        kubeconfig=s.kubeconfig,
        context=s.context,
        with_kube=True,
        telemetry_settings=telemetry_settings,
    ) as c:
        assert c.kube is not None
        yield ClusterConnections(c.nc, c.js, c.publisher, c.kube, c.health)
