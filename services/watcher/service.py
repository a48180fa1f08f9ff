"""The watcher process: one ``Watcher`` (``services.watcher.watch``) of one cluster, wired to NATS
and the API server, with its readiness check, its heartbeats (``members``: synced, problems, the
scopes it discovered) and the cluster's entry in the fleet registry (``register_cluster``, with
the ``--cluster-labels`` it was given).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from services.clusters import members, registry
from services.clusters.selector import parse_label_changes
from services.common import bus
from services.common.settings import replica_id
from services.kube import KubeClient
from services.runtime import cluster_connections
from services.watcher.settings import WatcherSettings
from services.watcher.watch import Watcher

log = logging.getLogger("driftbus.watcher")


async def run(settings: WatcherSettings) -> None:
    settings = dataclasses.replace(settings, watcher_id=settings.watcher_id or replica_id())
    labels = parse_cluster_labels(settings.cluster_labels)  # refused before anything starts
    async with cluster_connections("watcher", settings, settings, settings) as c:
        watcher = Watcher(settings=settings, js=c.js, kube=c.kube, publisher=c.publisher)
        c.health.add(
            "seeded from the server stream, following bundles, every watch running", watcher.healthy
        )
        registering = asyncio.create_task(
            register_cluster(c.js, c.kube, settings, labels), name="register in the fleet registry"
        )
        beats = asyncio.create_task(
            members.announce(
                c.publisher,
                cluster=settings.cluster,
                role="watcher",
                member_id=settings.watcher_id,
                state=watcher.synced,
                scopes=watcher.discovered,
                wake=watcher.scopes_changed,
            ),
            name="heartbeats",
        )
        try:
            await watcher.run()
        finally:
            beats.cancel()
            registering.cancel()
            for task in watcher.watches.values():
                task.cancel()


async def register_cluster(
    js: bus.JetStream, kube: KubeClient, settings: WatcherSettings, labels: dict[str, str]
) -> None:
    """Register the cluster in the fleet registry (its ``--cluster-labels`` only when it is new),
    retried until it is in: a cluster missing from the registry is in no fleet."""
    while True:
        try:
            try:
                version = str((await kube.get_path("/version")).get("gitVersion", ""))
            except Exception:  # noqa: BLE001 - the version is informative only
                version = ""
            await registry.register(
                js, settings.cluster, labels=labels, kube_version=version, by=settings.watcher_id
            )
            return
        except Exception as exc:  # noqa: BLE001 - retried; the planner may not have made it yet
            log.warning("cluster %s not registered yet: %s", settings.cluster, exc)
            await asyncio.sleep(settings.retry_delay)


def parse_cluster_labels(items: tuple[str, ...]) -> dict[str, str]:
    """``--cluster-labels`` as a dict (``KEY=VALUE`` items, checked as label keys and values)."""
    try:
        labels, removed = parse_label_changes(items)
    except ValueError as exc:
        raise SystemExit(f"driftbus watcher: --cluster-labels: {exc}") from None
    if removed:
        raise SystemExit(f"driftbus watcher: --cluster-labels sets labels; {removed[0]}- removes")
    return labels
