"""The fleet commands on real clusters (issue 31): ``driftbus clusters`` (list, label, remove)
and ``driftbus rollout`` (pause, resume, promote, undo, history, status) and ``driftbus status
--bundle B`` with no cluster, run as a user would against three API servers with controllers,
two planner replicas and one NATS. What each cluster holds is read from its own API server."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
import nats
import pytest

from schemas.fleet import ClusterList, FleetStatus, RolloutHistory, RolloutPhase, RolloutSpec
from schemas.messages import BundleOptions
from services.clusters import registry
from services.fleet.publish import fleet_revisions, publish_fleet
from services.kube import KubeClient

from ..conftest import unique_name
from .fleet_site import FleetStack, driftbus, placed_revisions, rollout_state, until
from .fleet_site import fleet_stack as running_fleet

pytestmark = [pytest.mark.scale, pytest.mark.timeout(600)]
CANARY, PROD_A, PROD_B = "cli-canary", "cli-prod-a", "cli-prod-b"


@pytest.fixture(scope="module")
def fleet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetStack]:
    with running_fleet(tmp_path_factory.mktemp("fleetcli"), [CANARY, PROD_A, PROD_B]) as fleet:
        yield fleet


class World:
    def __init__(self, fleet: FleetStack, nc: Any) -> None:
        self.fleet, self.nc, self.js = fleet, nc, nc.jetstream()
        self.ns = unique_name("fcli")
        self.bundle = unique_name("app")

    async def publish(self, revision: str, value: str, **kw: Any) -> None:
        manifests = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": self.ns},
                "data": {"value": value},
            }
        ]
        await publish_fleet(
            self.js,
            bundle=self.bundle,
            revision=revision,
            manifests=manifests,
            options=BundleOptions(),
            **kw,
        )

    async def values(self, cluster: str) -> set[str]:
        cms = await self.fleet.sites[cluster].configmaps(self.ns)
        return {d.get("value", "") for d in cms.values()}

    async def everywhere(self, value: str, within: float = 120) -> None:
        for c in self.fleet.names():

            async def has(c: str = c) -> bool:
                return await self.values(c) == {value}

            await until(f"{c} has {value}", has, within, self.fleet.logs)

    async def phase(self, phase: RolloutPhase, revision: str, within: float = 150) -> Any:
        async def probe() -> Any:
            s = await rollout_state(self.nc, self.bundle)
            ok = s is not None and s.target.revision == revision and s.phase is phase
            return s if ok else None

        return await until(f"rollout {phase} on {revision}", probe, within, self.fleet.logs)

    async def cli(self, *args: str) -> tuple[int, str, str]:
        return await driftbus(self.fleet, *args)


@pytest.fixture
async def world(fleet_stack: FleetStack) -> AsyncIterator[World]:
    nc = await nats.connect(fleet_stack.nats.client_url)
    w = World(fleet_stack, nc)
    for site in fleet_stack.sites.values():
        site.kube = await KubeClient.from_kubeconfig(str(site.pipeline.stack.cluster.kubeconfig))
        await site.kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": w.ns}},
            field_manager="driftbus-tests",
        )
    await until("three clusters registered", lambda: _registered(w, 3), 120, fleet_stack.logs)
    try:
        yield w
    finally:
        await nc.drain()
        for site in fleet_stack.sites.values():
            if site.kube is not None:
                await site.kube.close()
                site.kube = None


async def _registered(w: World, n: int) -> bool:
    return len(await registry.records(w.js)) >= n


async def _served(w: World) -> ClusterList | None:
    code, out, _ = await w.cli("clusters", "-o", "json")
    got = msgspec.json.decode(out, type=ClusterList) if code == 0 else None
    return got if got is not None and all(c.served for c in got.clusters) else None


async def test_clusters_lists_the_registry_and_label_and_remove_change_it(world: World) -> None:
    w = world
    listed = await until("three clusters served", lambda: _served(w), 60, w.fleet.logs)
    assert {c.name: c.labels for c in listed.clusters} == {
        CANARY: {"env": "canary", "region": "eu"},
        PROD_A: {"env": "prod", "region": "eu"},
        PROD_B: {"env": "prod"},
    }
    assert all(
        c.kube_version.startswith("v1.") and c.watchers and c.appliers for c in listed.clusters
    )
    code, out, _ = await w.cli("clusters")
    assert code == 0, out
    assert "env=canary,region=eu" in out, out
    assert "yes" in out, out
    code, out, err = await w.cli("clusters", "label", CANARY, "tier=web", "env-")
    assert code == 0, err
    try:
        assert (await registry.records(w.js))[CANARY].labels == {"region": "eu", "tier": "web"}
    finally:
        code, _, err = await w.cli("clusters", "label", CANARY, "env=canary", "tier-")
        assert code == 0, err
    assert (await registry.records(w.js))[CANARY].labels == {"env": "canary", "region": "eu"}
    code, _, err = await w.cli("clusters", "label", "no-such", "a=b")
    assert code == 1, err
    assert "no-such" in err, err
    assert len(err.strip().splitlines()) == 1, err
    code, _, err = await w.cli("clusters", "label", CANARY, "=b")
    assert code == 1, err
    assert CANARY in err, err
    assert len(err.strip().splitlines()) == 1, err
    code, _, err = await w.cli("clusters", "remove", PROD_B)
    assert code == 0, err
    site = w.fleet.sites[PROD_B]
    try:
        assert PROD_B not in await registry.records(w.js)
        code, _, err = await w.cli("clusters", "remove", PROD_B)
        assert code == 1
        assert f"cluster {PROD_B} is not registered" in err
    finally:  # its watcher registers it again when it starts
        site.pipeline.stop_all()
        site.start()
    await until("prod-b registered again", lambda: _registered(w, 3), 90, w.fleet.logs)
    assert (await registry.records(w.js))[PROD_B].labels == {"env": "prod"}


async def test_pause_holds_the_next_step_resume_continues_and_history_lists_it(
    world: World,
) -> None:
    w = world
    # the bake is the time the pause has to arrive in: with 2 s, a CLI start slowed by a loaded
    # machine (three workers on two cores) found the rollout Complete already
    spec = RolloutSpec(steps=["env=canary"], bake=10, step_timeout=300)
    await w.publish("r1", "p1", rollout=spec)

    async def canary_placed() -> bool:
        s = await rollout_state(w.nc, w.bundle)
        return s is not None and CANARY in s.clusters

    await until("canary placed", canary_placed, 60, w.fleet.logs)
    code, out, err = await w.cli("rollout", "pause", w.bundle)
    assert code == 0, err
    assert "Paused" in out, out
    # the canary gets Ready and the bake passes; the prod clusters get nothing while paused
    await until("canary has p1", lambda: _has(w, CANARY, "p1"), 90, w.fleet.logs)
    await asyncio.sleep(6)
    state = await rollout_state(w.nc, w.bundle)
    assert state is not None
    assert state.phase is RolloutPhase.PAUSED
    assert state.step == 0
    for prod in (PROD_A, PROD_B):
        assert await w.values(prod) == set()
        assert await placed_revisions(w.nc, prod, w.bundle) == []
    code, out, err = await w.cli("rollout", "status", w.bundle)
    assert code == 0, out
    assert f"{w.bundle}@r1: Paused, step 1/2" in out, out
    code, out, err = await w.cli("rollout", "resume", w.bundle)
    assert code == 0, err
    await w.phase(RolloutPhase.COMPLETE, "r1")
    await w.everywhere("p1")
    code, out, err = await w.cli("rollout", "history", w.bundle, "-o", "json")
    assert code == 0, err
    events = [e.event for e in msgspec.json.decode(out, type=RolloutHistory).events]
    assert events == ["started", "paused", "resumed", "step", "complete"], events
    code, out, _ = await w.cli("rollout", "history", w.bundle)
    assert out.index("paused") < out.index("resumed") < out.index("complete"), out
    # status --bundle with no cluster: a row per cluster and the summary
    code, out, err = await w.cli("status", "--bundle", w.bundle)
    assert code == 0, err
    assert f"{w.bundle}@r1: Complete, step 2/2, 3/3 clusters Ready" in out, out
    assert all(c in out for c in (CANARY, PROD_A, PROD_B)), out
    code, out, err = await w.cli("status", "--bundle", w.bundle, "-o", "json")
    fs = msgspec.json.decode(out, type=FleetStatus)
    assert (fs.phase, fs.ready, fs.total) == (RolloutPhase.COMPLETE, 3, 3)
    want = dict.fromkeys((CANARY, PROD_A, PROD_B), ("Ready", "r1"))
    assert {r.cluster: (r.phase, r.revision) for r in fs.clusters} == want
    code, out, err = await w.cli("bundles", "--cluster", CANARY)
    assert code == 0, out
    assert "fleet bundles" in out, out
    assert "3/3 Ready" in out, out


async def test_promote_ends_a_long_bake(world: World) -> None:
    w = world
    spec = RolloutSpec(steps=["env=canary"], bake=600, step_timeout=600)
    await w.publish("r1", "b1", rollout=spec)

    async def baking() -> bool:
        s = await rollout_state(w.nc, w.bundle)
        return s is not None and s.step == 0 and s.ready_since is not None

    await until("canary baking", baking, 120, w.fleet.logs)
    started = time.monotonic()
    code, out, err = await w.cli("rollout", "promote", w.bundle)
    assert code == 0, err
    assert "never skips" in out, out
    state = await rollout_state(w.nc, w.bundle)
    assert state is not None, out
    assert state.step == 1, out
    assert time.monotonic() - started < 15
    await w.phase(RolloutPhase.COMPLETE, "r1", within=120)
    await w.everywhere("b1")
    code, out, _ = await w.cli("rollout", "history", w.bundle, "-o", "json")
    steps = [e for e in msgspec.json.decode(out, type=RolloutHistory).events if e.event == "step"]
    assert len(steps) == 1, steps
    assert "promoted" in steps[0].message, steps


async def test_undo_puts_the_previous_revision_back_everywhere(world: World) -> None:
    w = world
    await w.publish("r1", "one")
    await w.phase(RolloutPhase.COMPLETE, "r1")
    await w.everywhere("one")
    await w.publish("r2", "two")
    await w.phase(RolloutPhase.COMPLETE, "r2")
    await w.everywhere("two")
    code, out, err = await w.cli("rollout", "undo", w.bundle, "--wait", "--timeout", "150")
    assert code == 0, err + out
    assert "republished r1 (rollback of r2)" in out, out
    await w.everywhere("one")
    last = (await fleet_revisions(w.js, w.bundle))[-1]
    assert (last.revision, last.rollback_of) == ("r1", "r2")
    code, out, err = await w.cli("rollout", "status", w.bundle, "-o", "json")
    fs = msgspec.json.decode(out, type=FleetStatus)
    assert (fs.revision, fs.phase, fs.previous) == ("r1", RolloutPhase.COMPLETE, "r2")
    code, _, err = await w.cli("rollout", "undo", w.bundle, "--to", "r9")
    assert code == 1, err
    assert "r9" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert json.loads(out)["bundle"] == w.bundle


async def _has(w: World, cluster: str, value: str) -> bool:
    return await w.values(cluster) == {value}
