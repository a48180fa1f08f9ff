"""What every service process opens at start and closes at exit: NATS, streams, a publisher,
and (for the services that talk to a cluster) a Kubernetes client."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from services.common import bus
from services.common.kube import KubeClient


@dataclasses.dataclass
class Connections:
    nc: NATS
    js: JetStreamContext
    publisher: bus.Publisher
    kube: KubeClient | None = None


@contextlib.asynccontextmanager
async def connections(
    *,
    name: str,
    nats_url: str,
    stream_replicas: int = 1,
    kubeconfig: str | None = None,
    context: str | None = None,
    with_kube: bool = False,
) -> AsyncIterator[Connections]:
    """Connect, create the streams (idempotent), and on exit flush publishes and close all."""
    nc = await bus.connect(nats_url, name=name)
    js = nc.jetstream()
    kube: KubeClient | None = None
    publisher = bus.Publisher(js)
    try:
        await bus.ensure_streams(js, replicas=stream_replicas)
        if with_kube:
            kube = (
                await KubeClient.from_kubeconfig(kubeconfig, context)
                if kubeconfig
                else KubeClient.in_cluster()
            )
        yield Connections(nc, js, publisher, kube)
    finally:
        await publisher.flush()
        if kube is not None:
            await kube.close()
        await nc.drain()
