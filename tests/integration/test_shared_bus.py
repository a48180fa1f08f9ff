"""Two driftbus clusters on one bus whose objects happen to share names and resourceVersions.

SERVER deduplicates message ids across every cluster. A fact's id once named only the object
and its resourceVersion, so the second cluster's fact about an object of the same name at the
same resourceVersion was taken for a duplicate and never landed: its watcher failed that kind
over and over, never finished its initial list, and a prune (which waits for it) never came.
Here both "clusters" are the one test API server (so names and resourceVersions are the same
for sure) under two cluster names.
"""

from __future__ import annotations

from pathlib import Path

import nats

from harness.pipeline import FAST_HEARTBEATS, Pipeline, StatusWatch
from services.controlplane import servers

from ..conftest import unique_name
from .manifests import cm


async def test_the_same_object_at_the_same_version_in_two_clusters_lands_for_both(
    stack: servers.Stack, tmp_path: Path, namespace: str
) -> None:
    bus = servers.NatsServer(tmp_path / "nats")
    bus.start()
    for d in ("e", "w"):
        (tmp_path / d).mkdir()
    east = Pipeline(stack=stack, nats=bus, cluster=unique_name("east"), workdir=tmp_path / "e")
    west = Pipeline(stack=stack, nats=bus, cluster=unique_name("west"), workdir=tmp_path / "w")
    nc = await nats.connect(bus.client_url)
    try:
        for p in (east, west):
            p.planner_env = dict(FAST_HEARTBEATS)
        js = nc.jetstream()
        east_watch = StatusWatch()
        await east_watch.start(nc, east.cluster, "apps")
        east.start_all()
        await east.publish(js, "apps", [cm(namespace, "a")])
        await east_watch.ready("r1", 60, east.logs)
        east.procs[
            "watcher"
        ].stop()  # one watcher of the API server at a time, as in two real clusters
        west_watch = StatusWatch()
        await west_watch.start(nc, west.cluster, "tools")
        west.start("watcher")  # lists east's object too: same name, same resourceVersion
        west.start("applier", "applier-w")
        await west.publish(js, "tools", [cm(namespace, "b")])
        await west_watch.ready("r1", 60, west.logs)
        # a prune waits for the watcher's initial lists: it never finished while east's fact
        # about "a" could not land in west's name
        await west.publish(js, "tools", [cm(namespace, "c")], revision="r2")
        await west_watch.ready("r2", 60, west.logs)
    finally:
        east.stop_all()
        west.stop_all()
        await nc.close()
        bus.stop()
