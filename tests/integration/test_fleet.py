"""Fleets on real clusters (issue 31): three API servers with controllers, one NATS, two planner
replicas. Selector publishes, live membership, per-cluster values, health-gated rollouts that
halt and roll back, and a driver killed mid-step. What reached each cluster is counted from its
decision records and its bundle subject, what is in it from its own API server."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import json
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import StatusWatch
from schemas.codec import decode, encode
from schemas.fleet import RolloutPhase, RolloutSpec
from schemas.messages import BundleOptions, BundlePhase, BundleStatus, ObjectPhase
from schemas.subjects import (
    ObjectKey,
    bundle_status_subject,
    bundle_subject,
    cluster_registry_key,
    fleet_subject,
    rollout_event_subject,
)
from services.cli import reads
from services.clusters import registry
from services.clusters.members import STALE_AFTER, heartbeats, serving
from services.common import bus
from services.fleet.publish import fleet_revisions, publish_fleet
from services.kube import KubeClient
from services.tenancy import policy as tenancy
from services.tenancy import store as policy
from tests.gitrepo import git

from ..conftest import unique_name
from .fleet_site import (
    EventLog,
    FleetStack,
    driftbus,
    placed_revisions,
    rollout_state,
    until,
)
from .fleet_site import (
    fleet_stack as running_fleet,
)
from .test_source import commit
from .test_tenancy import SA, team, tenant_namespace

pytestmark = [pytest.mark.scale, pytest.mark.timeout(600)]
CANARY, PROD_A, PROD_B = "fleet-canary", "fleet-prod-a", "fleet-prod-b"


@pytest.fixture(scope="module")
def fleet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetStack]:
    with running_fleet(tmp_path_factory.mktemp("fleet"), [CANARY, PROD_A, PROD_B]) as fleet:
        yield fleet


class World:
    """A test's view of the fleet: a NATS connection, clients, a namespace in every cluster,
    decision logs, the rollout events."""

    def __init__(self, fleet: FleetStack, nc: NATS) -> None:
        self.fleet = fleet
        self.nc = nc
        self.js = nc.jetstream()
        self.events = EventLog()
        self.ns = unique_name("fleet")
        self.bundle = unique_name("app")

    def configmaps(self, value: str, n: int = 2, **extra: str) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": self.ns},
                "data": {"value": value, **extra},
            }
            for i in range(n)
        ]

    async def publish(self, revision: str, manifests: list[dict[str, Any]], **kw: Any) -> None:
        await publish_fleet(
            self.js,
            bundle=self.bundle,
            revision=revision,
            manifests=manifests,
            options=BundleOptions(),
            **kw,
        )

    async def phase(self, phase: RolloutPhase, revision: str, within: float = 120) -> Any:
        async def probe() -> Any:
            s = await rollout_state(self.nc, self.bundle)
            ok = s is not None and s.target.revision == revision and s.phase is phase
            return s if ok else None

        return await until(f"rollout {phase} on {revision}", probe, within, self.fleet.logs)

    async def values(self, cluster: str) -> set[str]:
        cms = await self.fleet.sites[cluster].configmaps(self.ns)
        return {d.get("value", "") for d in cms.values()}


@pytest.fixture
async def world(fleet_stack: FleetStack) -> AsyncIterator[World]:
    nc = await nats.connect(fleet_stack.nats.client_url)
    w = World(fleet_stack, nc)
    await w.events.start(nc)
    for site in fleet_stack.sites.values():
        site.kube = await KubeClient.from_kubeconfig(str(site.pipeline.stack.cluster.kubeconfig))
        await site.kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": w.ns}},
            field_manager="driftbus-tests",
        )
        site.decisions = type(site.decisions)()
        await site.decisions.start(nc, site.name)
    # every cluster registered with its labels before the test publishes
    await until(
        "three clusters registered",
        lambda: _registered(w.js, 3),
        120,
        fleet_stack.logs,
    )
    try:
        yield w
    finally:
        await nc.drain()
        for site in fleet_stack.sites.values():
            if site.kube is not None:
                await site.kube.close()
                site.kube = None


async def _registered(js: Any, n: int) -> bool:
    return len(await registry.records(js)) >= n


def decided(w: World, cluster: str, revision: str | None = None) -> int:
    """Decision records of the test's bundle in ``cluster`` (of ``revision``)."""
    return sum(
        1
        for r in w.fleet.sites[cluster].decisions.records
        if r.bundle == w.bundle and (revision is None or r.revision == revision)
    )


async def test_a_selector_publish_reaches_exactly_the_matching_clusters(world: World) -> None:
    w = world
    root = w.fleet.workdir / w.bundle
    root.mkdir()
    (root / "cm.yaml").write_text(json.dumps(w.configmaps("one")[0]))
    code, _out, err = await driftbus(
        w.fleet,
        "publish",
        str(root),
        "--bundle",
        w.bundle,
        "-l",
        "env=prod",
        "--revision",
        "r1",
        "--wait",
        "--timeout",
        "150",
    )
    assert code == 0, err + w.fleet.logs()
    assert "Complete" in err
    for prod in (PROD_A, PROD_B):
        assert await w.values(prod) == {"one"}
        assert decided(w, prod, "r1") >= 1
    assert await w.values(CANARY) == set()
    assert decided(w, CANARY) == 0
    assert await placed_revisions(w.nc, CANARY, w.bundle) == []


async def test_membership_follows_labels_and_never_a_quiet_cluster(world: World) -> None:
    w = world
    await w.publish("r1", w.configmaps("m"), selector="env=prod")
    await w.phase(RolloutPhase.COMPLETE, "r1")
    await until("prod Ready", lambda: _has(w, PROD_B, {"m"}), 60, w.fleet.logs)
    # the canary relabelled into the selector gets the revision in force
    await registry.relabel(w.js, CANARY, set_={"env": "prod"}, remove=[])
    try:
        await until("canary joined", lambda: _has(w, CANARY, {"m"}), 90, w.fleet.logs)
    finally:
        await registry.relabel(w.js, CANARY, set_={"env": "canary"}, remove=[])
    # and relabelled out, pruned
    await until("canary pruned", lambda: _has(w, CANARY, set()), 90, w.fleet.logs)
    # a quiet cluster has not left: watcher and applier of prod-b stopped, nothing pruned
    site = w.fleet.sites[PROD_B]
    site.pipeline.stop_all()
    try:
        # longer than a heartbeat stays fresh (members.STALE_AFTER): the cluster is unserved
        await asyncio.sleep(STALE_AFTER + 5)
        hb = await heartbeats(w.js, PROD_B)
        assert serving(PROD_B, hb, dt.datetime.now(dt.UTC)), "prod-b is unserved by now"
        assert await w.values(PROD_B) == {"m"}
        state = await rollout_state(w.nc, w.bundle)
        assert state is not None
        assert state.clusters[PROD_B].state != "removed"
        assert all(e.event != "left" for e in w.events.of(w.bundle) if PROD_B in e.clusters)
    finally:
        site.start()


async def test_on_leave_orphan_keeps_the_objects(world: World) -> None:
    w = world
    await w.publish("r1", w.configmaps("o"), selector="env in (canary)", on_leave="orphan")
    await w.phase(RolloutPhase.COMPLETE, "r1")
    await until("canary has it", lambda: _has(w, CANARY, {"o"}), 60, w.fleet.logs)
    await registry.relabel(w.js, CANARY, set_={"env": "elsewhere"}, remove=[])
    try:
        await until(
            "canary left",
            lambda: _left(w, CANARY),
            60,
            w.fleet.logs,
        )
        await asyncio.sleep(3)
        assert await w.values(CANARY) == {"o"}
    finally:
        await registry.relabel(w.js, CANARY, set_={"env": "canary"}, remove=[])


async def test_substitution_gives_each_cluster_its_value_and_refuses_a_missing_label(
    world: World,
) -> None:
    w = world
    manifests = w.configmaps("${cluster.name}", n=1, region="${cluster.labels.region}")
    await w.publish("r1", manifests, substitute=True)
    # prod-b has no region label: refused, named; the rollout halts on it
    state = await w.phase(RolloutPhase.HALTED, "r1")
    assert state.clusters[PROD_B].state == "refused"
    assert "${cluster.labels.region}" in state.clusters[PROD_B].message
    assert PROD_B in state.message
    for cluster in (CANARY, PROD_A):
        await until(f"{cluster} has its value", lambda c=cluster: _has(w, c, {c}), 60, w.fleet.logs)
        cms = await w.fleet.sites[cluster].configmaps(w.ns)
        assert cms["cm-0"]["region"] == "eu"
    assert await w.values(PROD_B) == set()


async def test_a_canary_rollout_with_a_bake_converges_step_by_step(world: World) -> None:
    w = world
    spec = RolloutSpec(steps=["env=canary"], bake=3, step_timeout=120)
    await w.publish("r1", w.configmaps("v1"), rollout=spec)
    await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    events = [e.event for e in w.events.of(w.bundle)]
    assert events == ["started", "step", "complete"], events
    for cluster in w.fleet.names():
        assert await w.values(cluster) == {"v1"}
    # every transition is a decision record: `why` explains the rollout as it does an object
    code, out, err = await driftbus(w.fleet, "why", f"rollout/{w.bundle}", "-o", "json")
    assert code == 0, err
    assert [e["event"] for e in json.loads(out)["events"]] == events


async def test_a_change_freeze_on_the_canary_stops_the_steps_clock_instead_of_halting(
    world: World, tmp_path: Path
) -> None:
    """A deny window holding the canary's writes is not a failed step: the rollout waits past
    its step timeout (no halt, no rollback, nothing placed further), says which window holds
    it, and goes on once the window is lifted."""
    w = world
    await w.publish("r1", w.configmaps("v1"))
    await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    freeze = unique_name("freeze")
    windows = tmp_path / "windows.yaml"
    windows.write_text(
        f"windows:\n- kind: deny\n  name: {freeze}\n  schedule: '* * * * *'\n"
        f"  duration: 1h\n  bundles: ['{w.bundle}']\n  clusters: ['{CANARY}']\n"
    )
    code, _, err = await driftbus(w.fleet, "windows", "apply", str(windows))
    assert code == 0, err
    try:
        await asyncio.sleep(2)  # the planners follow the windows
        spec = RolloutSpec(steps=["env=canary"], bake=1, step_timeout=8, on_failure="rollback")
        await w.publish("r2", w.configmaps("v2"), rollout=spec)

        async def held() -> Any:
            s = await rollout_state(w.nc, w.bundle)
            ok = s is not None and s.target.revision == "r2" and s.window_hold
            return s if ok else None

        state = await until("the rollout held by the window", held, 60, w.fleet.logs)
        assert f'"{freeze}" in {CANARY}' in state.window_hold
        assert state.clusters[CANARY].window == freeze
        await asyncio.sleep(12)  # well past the step timeout
        state = await rollout_state(w.nc, w.bundle)
        assert state is not None
        assert state.phase is RolloutPhase.PROGRESSING, state.message
        assert await w.values(CANARY) == {"v1"}  # held: nothing written
        for prod in (PROD_A, PROD_B):
            assert "r2" not in await placed_revisions(w.nc, prod, w.bundle)
    finally:
        windows.write_text("windows: []\n")
        code, _, err = await driftbus(w.fleet, "windows", "apply", str(windows))
        assert code == 0, err
    await w.phase(RolloutPhase.COMPLETE, "r2", within=180)
    for cluster in w.fleet.names():
        assert await w.values(cluster) == {"v2"}
    events = [e.event for e in w.events.of(w.bundle)]
    assert {"window", "window-ended"} <= set(events), events
    assert not {"halted", "rolled-back"} & set(events), events


async def test_a_revision_failing_on_the_canary_halts_and_rollback_restores_it(
    world: World,
) -> None:
    w = world
    await w.publish("r1", w.configmaps("good"))
    await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    for cluster in w.fleet.names():
        await until(f"{cluster} good", lambda c=cluster: _has(w, c, {"good"}), 60, w.fleet.logs)
    bad = [*w.configmaps("bad"), _invalid(w.ns)]
    spec = RolloutSpec(steps=["env=canary"], bake=2, step_timeout=90, on_failure="halt")
    await w.publish("r2", bad, rollout=spec)
    state = await w.phase(RolloutPhase.HALTED, "r2", within=150)
    assert CANARY in state.message
    await asyncio.sleep(3)
    for prod in (PROD_A, PROD_B):
        assert await w.values(prod) == {"good"}
        assert decided(w, prod, "r2") == 0  # never received an intent for it
        assert "r2" not in await placed_revisions(w.nc, prod, w.bundle)
    # the same with rollback: the canary goes back to the previous revision
    spec = RolloutSpec(steps=["env=canary"], bake=2, step_timeout=90, on_failure="rollback")
    await w.publish("r3", [*w.configmaps("worse"), _invalid(w.ns)], rollout=spec)
    state = await w.phase(RolloutPhase.ROLLED_BACK, "r3", within=150)
    assert state.clusters[CANARY].revision == "r1"
    await until("canary back on r1", lambda: _has(w, CANARY, {"good"}), 90, w.fleet.logs)
    for prod in (PROD_A, PROD_B):
        assert "r3" not in await placed_revisions(w.nc, prod, w.bundle)


async def test_a_rolled_back_object_does_not_keep_the_failure_of_the_revision_that_left(
    world: World,
) -> None:
    """The canary's Deployment fails to take r2 (a typo the API server refuses); rolled back to
    r1, it is as r1 applied it, and its status row says so instead of r2's failure."""
    w = world
    await w.publish("r1", [_deployment(w.ns, image="nginx:1.27")])
    await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    typo = _deployment(w.ns, image="nginx:1.28")
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["imagee"] = container.pop("image")
    spec = RolloutSpec(steps=["env=canary"], step_timeout=90, on_failure="rollback")
    await w.publish("r2", [typo], rollout=spec)
    await w.phase(RolloutPhase.ROLLED_BACK, "r2", within=150)
    key = ObjectKey("apps", "Deployment", w.ns, "web")

    async def row() -> Any:
        st = (await reads.object_statuses(w.js, CANARY, w.bundle)).get(key)
        return st if st is not None and st.revision == "r1" else None

    st = await until("the canary's row back on r1", row, 60, w.fleet.logs)
    assert st.phase is ObjectPhase.APPLIED, st


def _deployment(ns: str, *, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


async def _canary_baking(w: World, value: str, *, bake: int) -> str:
    """r1 (ConfigMaps of ``value``) published in two steps, the canary then region=eu, and
    baking on the canary: the driver, the lease holder."""
    spec = RolloutSpec(steps=["env=canary", "region=eu"], bake=bake, step_timeout=180)
    await w.publish("r1", w.configmaps(value), rollout=spec)

    async def baking() -> Any:
        s = await rollout_state(w.nc, w.bundle)
        return s if s is not None and s.ready_since is not None and s.step == 0 else None

    await until("canary baking", baking, 120, w.fleet.logs)
    return await _driver(w)


async def test_a_driver_killed_mid_step_finishes_the_rollout_without_repeating_a_step(
    world: World,
) -> None:
    w = world
    holder = await _canary_baking(w, "k", bake=6)
    w.fleet.home.kill(holder)  # SIGKILL
    try:
        await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    finally:
        w.fleet.start_planner(holder)
    events = w.events.of(w.bundle)
    assert [e.event for e in events] == ["started", "step", "step", "complete"], events
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert len({e.driver for e in events}) == 2  # the second driver finished it


async def test_a_fleet_revision_no_one_can_read_changes_nothing(world: World) -> None:
    """A publisher that does not check (any NATS client) sends a selector that cannot be read:
    the revision is refused, named; no cluster leaves, nothing is pruned."""
    w = world
    await w.publish("r1", w.configmaps("kept"), selector="env=prod")
    await w.phase(RolloutPhase.COMPLETE, "r1")
    for prod in (PROD_A, PROD_B):
        await until(f"{prod} kept", lambda c=prod: _has(w, c, {"kept"}), 60, w.fleet.logs)
    good = await fleet_revisions(w.js, w.bundle)
    bad = msgspec.structs.replace(good[-1], revision="r2", selector="env in (prod")
    await w.js.publish(fleet_subject(w.bundle), encode(bad))

    async def refused() -> Any:
        s = await rollout_state(w.nc, w.bundle)
        return s if s is not None and "r2 refused" in s.message else None

    state = await until("r2 refused", refused, 60, w.fleet.logs)
    assert state.target.revision == "r1"
    assert {c for c, e in state.clusters.items() if e.state == "removed"} == set()
    await asyncio.sleep(3)
    for prod in (PROD_A, PROD_B):
        assert await w.values(prod) == {"kept"}
    assert all(e.event != "left" for e in w.events.of(w.bundle))


async def _tenants_bundle(w: World) -> str:
    """The world's bundle made a new tenant's (``TENANT/web``), the tenant's namespace on every
    cluster (for ConfigMaps): the tenant."""
    tenant = unique_name("t")
    w.bundle = f"{tenant}/web"
    for site in w.fleet.sites.values():
        assert site.kube is not None
        await tenant_namespace(site.kube, w.ns, ["configmaps"])
    return tenant


async def test_a_tenants_fleet_publish_reaches_only_the_clusters_it_may_use(
    world: World,
) -> None:
    """The tenant may use clusters labelled env=prod; its fleet publish names every cluster:
    the canary is left out and named, the prod clusters are written as its ServiceAccount."""
    w = world
    tenant = await _tenants_bundle(w)
    text = f"tenants:{team(tenant, w.ns)}    clusterSelector: env=prod\n"
    await policy.put_policy(w.js, tenancy.load_policy(text, "tenants.yaml"))
    try:
        await w.publish("r1", w.configmaps("mine"))
        state = await w.phase(RolloutPhase.COMPLETE, "r1")
        assert list(state.excluded) == [CANARY]
        assert "env=prod" in state.excluded[CANARY]
        assert any(e.event == "excluded" for e in w.events.of(w.bundle))
        for prod in (PROD_A, PROD_B):
            await until(f"{prod} written", lambda c=prod: _has(w, c, {"mine"}), 60, w.fleet.logs)
            identities = {
                r.identity
                for r in w.fleet.sites[prod].decisions.records
                if r.bundle == w.bundle and r.action == "apply"
            }
            assert identities == {f"system:serviceaccount:{w.ns}:{SA}"}
        assert await w.values(CANARY) == set()
        assert await placed_revisions(w.nc, CANARY, w.bundle) == []
    finally:
        await policy.put_policy(w.js, tenancy.load_policy("tenants: {}", "tenants.yaml"))


async def test_a_tenants_own_publish_to_a_cluster_its_selector_does_not_admit_waits(
    world: World,
) -> None:
    """The planner holds a single-cluster publish to the tenant's clusterSelector too (its
    cluster's registry labels, followed live): refused on the canary, taken once it is
    relabelled into the selector, with no republish."""
    w = world
    tenant = unique_name("t")
    w.bundle = f"{tenant}/own"
    site = w.fleet.sites[CANARY]
    assert site.kube is not None
    await tenant_namespace(site.kube, w.ns, ["configmaps"])
    text = f"tenants:{team(tenant, w.ns)}    clusterSelector: env=prod\n"
    await policy.put_policy(w.js, tenancy.load_policy(text, "tenants.yaml"))
    watch = StatusWatch()
    await watch.start(w.nc, CANARY, w.bundle)
    try:
        await site.pipeline.publish(w.js, w.bundle, w.configmaps("own"), as_user=True)
        refused = await watch.until(lambda s: s.phase is BundlePhase.FAILED, 60, w.fleet.logs)
        assert "clusterSelector" in refused.message, refused
        assert await w.values(CANARY) == set()
        await registry.relabel(w.js, CANARY, set_={"env": "prod"}, remove=[])
        try:
            await watch.ready("r1", 90, w.fleet.logs)
            assert await w.values(CANARY) == {"own"}
        finally:
            await registry.relabel(w.js, CANARY, set_={"env": "canary"}, remove=[])
    finally:
        await policy.put_policy(w.js, tenancy.load_policy("tenants: {}", "tenants.yaml"))


async def test_a_tenants_fleet_publish_reaches_no_cluster_its_nats_credentials_do_not_name(
    world: World,
) -> None:
    """Issue 41 item 8. The tenant's NATS publisher may publish to the canary only (what
    ``driftbus nats-config --tenant T=CANARY --record`` records); its policy admits every
    cluster. Its fleet publish names every cluster: the driver, which publishes for every
    tenant, must not reach the prod clusters its own credentials could not, and says so in the
    rollout's status, one line naming the tenant and each cluster."""
    w = world
    tenant = await _tenants_bundle(w)
    await policy.put_policy(w.js, tenancy.load_policy(f"tenants:{team(tenant, w.ns)}", "t.yaml"))
    tenants_kv = await w.js.key_value(bus.TENANTS_BUCKET)
    # the record `nats-config --record` writes, beside the policy (the admin's bucket)
    await tenants_kv.put("credentials", json.dumps({"tenants": {tenant: [CANARY]}}).encode())
    try:
        await w.publish("r1", w.configmaps("mine"))
        state = await w.phase(RolloutPhase.COMPLETE, "r1")
        await until("canary written", lambda: _has(w, CANARY, {"mine"}), 60, w.fleet.logs)
        placed = {c: await placed_revisions(w.nc, c, w.bundle) for c in (PROD_A, PROD_B)}
        assert placed == {PROD_A: [], PROD_B: []}, f"placed beyond its credentials: {placed}"
        assert sorted(state.excluded) == [PROD_A, PROD_B], state.excluded
        for prod in (PROD_A, PROD_B):
            assert state.excluded[prod] == (
                f'tenant {tenant} may not publish to cluster "{prod}": its NATS credentials '
                f"allow only [{CANARY}]"
            )
            assert await w.values(prod) == set()
        assert any(e.event == "excluded" for e in w.events.of(w.bundle))
        # the admin grants prod-a too, with the command that records the lists: followed live,
        # prod-a joins the fleet
        code, out, err = await driftbus(
            w.fleet,
            *("nats-config", "--cluster", CANARY, "--cluster", PROD_A),
            *("--tenant", f"{tenant}={CANARY},{PROD_A}", "--record"),
        )
        assert code == 0, err
        assert "recorded: 1 tenants" in out, out
        await until("prod-a joined", lambda: _has(w, PROD_A, {"mine"}), 90, w.fleet.logs)
        assert await placed_revisions(w.nc, PROD_B, w.bundle) == []
    finally:
        await tenants_kv.delete("credentials")
        await policy.put_policy(w.js, tenancy.load_policy("tenants: {}", "tenants.yaml"))


async def _r1_placed(w: World) -> tuple[str, bytes]:
    """r1 rolled out to prod-a: the bundle's subject there and the r1 placement (what a driver
    that loses its lease may send again later)."""
    await w.publish("r1", w.configmaps("one"), clusters=[PROD_A])
    await w.phase(RolloutPhase.COMPLETE, "r1")
    await until("prod-a on r1", lambda: _has(w, PROD_A, {"one"}), 60, w.fleet.logs)
    subject = bundle_subject(PROD_A, w.bundle)
    stale = await bus.last_message(w.js, bus.BUNDLES, subject)
    assert stale is not None
    assert stale.data
    return subject, stale.data


async def _r2_placed_by_another_driver(w: World, holder: str) -> None:
    """Once a driver other than ``holder`` leads, r2 rolled out to prod-a."""
    await until("another driver", lambda: _other_driver(w, holder), 60, w.fleet.logs)
    await w.publish("r2", w.configmaps("two"), clusters=[PROD_A])
    await w.phase(RolloutPhase.COMPLETE, "r2")
    await until("prod-a on r2", lambda: _has(w, PROD_A, {"two"}), 60, w.fleet.logs)


async def _r2_kept(w: World, settling: str, within: float, taken: str) -> None:
    """After a late r1 placement: once it settled (r2 back as the subject's last message, the
    placement refused, or the cluster on r1), prod-a holds r2, r2 is the last placement and the
    rollout is r2's, complete. ``taken``: what it means when prod-a holds something else."""

    async def settled() -> bool:
        placed = await placed_revisions(w.nc, PROD_A, w.bundle)
        return placed[-2:] == ["r1", "r2"] or await _has(w, PROD_A, {"one"})

    with contextlib.suppress(AssertionError):
        await until(settling, settled, within, w.fleet.logs)
    values = await w.values(PROD_A)
    assert values == {"two"}, f"{taken}: holds {values}"
    assert (await placed_revisions(w.nc, PROD_A, w.bundle))[-1] == "r2"
    state = await rollout_state(w.nc, w.bundle)
    assert state is not None
    assert state.target.revision == "r2"
    assert state.phase is RolloutPhase.COMPLETE


async def test_a_placement_of_a_driver_that_lost_its_lease_is_refused(world: World) -> None:
    """Issue 41 item 12. A driver that stalls past its lease (a stopped process, a loop
    starved by a thousand clusters) may wake up and send a placement it decided before: here
    the r1 placement, sent again after another driver placed r2 and past the 120 s dedupe
    window (a message id the stream has not seen). The planner refuses it — its fencing token
    is older than the r2 placement's — and puts r2 back as the bundle's last message, so the
    cluster keeps r2 and a planner rebuilding from the bus does too."""
    w = world
    subject, stale = await _r1_placed(w)
    # the driver loses its lease: the other replica takes it over and places r2
    holder = await _driver(w)
    w.fleet.home.kill(holder)
    try:
        await _r2_placed_by_another_driver(w, holder)
        # the deposed driver's late placement of r1, while the new driver and prod-a's
        # planner are live (the killed replica restarts afterwards)
        await w.js.publish(subject, stale, headers={"Nats-Msg-Id": unique_name("late")})
        await _r2_kept(
            w, "the late placement settled", 60, "the deposed driver's r1 placement was taken"
        )
    finally:
        w.fleet.start_planner(holder)


async def test_a_stale_placement_that_lands_while_no_planner_serves_is_refused_on_rebuild(
    world: World,
) -> None:
    """Issue 41 item 12, the fence's former known limit. A newer driver places r2; then no
    planner serves the cluster (both replicas down), and the deposed driver's r1 placement
    lands (a lower fencing token, a message id the stream has not seen): it is the bundle's
    last message. The planner that starts rebuilds from the bus: it must not take r1 because
    it has no memory of r2's token — the bundle's history shows r2's higher one."""
    w = world
    subject, stale = await _r1_placed(w)
    holder = await _driver(w)
    w.fleet.home.kill(holder)
    planners = ("planner-a", "planner-b")
    try:
        await _r2_placed_by_another_driver(w, holder)
        # no planner serves any cluster now; the deposed driver's r1 placement lands
        for name in planners:
            w.fleet.home.kill(name)
            await asyncio.to_thread(w.fleet.home.procs[name].proc.wait, 30)
        await w.js.publish(subject, stale, headers={"Nats-Msg-Id": unique_name("late")})
        assert (await placed_revisions(w.nc, PROD_A, w.bundle))[-1] == "r1"
    finally:
        for name in planners:
            w.fleet.home.kill(name)
            await asyncio.to_thread(w.fleet.home.procs[name].proc.wait, 30)
            w.fleet.start_planner(name)
    await _r2_kept(
        w, "the rebuild settled", 120, "a rebuild took the deposed driver's r1 placement"
    )
    logs = [
        await asyncio.to_thread(w.fleet.home.procs[name].log_path.read_text, errors="replace")
        for name in planners
    ]
    said = f"bundle {PROD_A}/{w.bundle}@r1: a placement of a rollout driver that lost its lease"
    assert any(
        said in line and "the bundle's history holds a newer driver's" in line
        for log in logs
        for line in log.splitlines()
    ), "the refusal on rebuild is not in a planner's log"


async def test_a_driver_killed_between_the_state_write_and_the_placements_repeats_nothing(
    world: World,
) -> None:
    """Issue 41. The lease holder is killed (SIGKILL, by the driver's test hook) right after it
    wrote the state that promotes the rollout to its second step, before it placed anything of
    that step: the state says more than the bus. The driver that takes over publishes what is
    missing: no step is repeated (each cluster gets the revision once, each event is logged
    once) and none is skipped (the rollout completes through every step)."""
    w = world
    holder = await _canary_baking(w, "k", bake=2)
    w.fleet.exit_file.touch()  # the holder's next state write that places: step 2's
    proc = w.fleet.home.procs[holder]
    try:

        async def killed() -> bool:
            return not proc.alive() and not w.fleet.exit_file.exists()

        await until("the driver killed at its state write", killed, 60, w.fleet.logs)
        state = await rollout_state(w.nc, w.bundle)
        assert state is not None
        assert state.step == 1, state
        assert state.clusters[PROD_A].state == "assigned", state.clusters
        # written, not placed: the state says more than the bus (until the next driver)
        assert await placed_revisions(w.nc, PROD_A, w.bundle) == []
        await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    finally:
        w.fleet.exit_file.unlink(missing_ok=True)
        w.fleet.start_planner(holder)
    events = w.events.of(w.bundle)
    assert [e.event for e in events] == ["started", "step", "step", "complete"], events
    assert [e.seq for e in events] == [0, 1, 2, 3]
    assert events[1].driver == holder  # written by the killed driver, logged by the next
    assert {events[2].driver, events[3].driver} != {holder}
    for cluster in w.fleet.names():
        assert await placed_revisions(w.nc, cluster, w.bundle) == ["r1"], cluster
        await until(f"{cluster} written", lambda c=cluster: _has(w, c, {"k"}), 60, w.fleet.logs)


async def test_a_driver_stopped_past_its_lease_publishes_nothing_when_it_wakes(
    world: World,
) -> None:
    """Issue 41 item 12. The lease holder stalls (SIGSTOP, by the driver's test hook) right
    after the state write that starts step 2, before its placements; the other replica takes
    the lease and finishes the rollout. Woken (SIGCONT), the stalled driver asks its lease
    before it publishes, finds it ran out, and publishes nothing: every placement and event
    message id is sent once, by the driver that took over."""
    w = world
    sent: collections.Counter[str] = collections.Counter()

    async def on_msg(msg: Any) -> None:
        sent[(msg.headers or {}).get("Nats-Msg-Id", "")] += 1

    for cluster in w.fleet.names():
        await w.nc.subscribe(bundle_subject(cluster, w.bundle), cb=on_msg)
    await w.nc.subscribe(rollout_event_subject(w.bundle), cb=on_msg)
    holder = await _canary_baking(w, "s", bake=2)
    proc = w.fleet.home.procs[holder]
    w.fleet.exit_file.write_text("STOP")
    try:
        await until("the driver stopped", lambda: _gone(w.fleet.exit_file), 60, w.fleet.logs)
        await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    finally:
        w.fleet.exit_file.unlink(missing_ok=True)
        proc.proc.send_signal(signal.SIGCONT)

    async def woke() -> bool:
        """It found its lease gone, or it published again (a driver that does not ask)."""
        log = await asyncio.to_thread(proc.log_path.read_text, errors="replace")
        return "the rollout driver lease ran out" in log or any(n > 1 for n in sent.values())

    await until("the stalled driver awake", woke, 60, w.fleet.logs)
    await w.nc.flush()
    repeated = {msg_id: n for msg_id, n in sent.items() if n > 1}
    assert not repeated, f"published again after the lease ran out: {repeated}"
    events = w.events.of(w.bundle)
    assert [e.event for e in events] == ["started", "step", "step", "complete"], events
    for cluster in w.fleet.names():
        assert await placed_revisions(w.nc, cluster, w.bundle) == ["r1"], cluster


async def test_a_cluster_whose_labels_are_unknown_matches_no_negative_selector(
    world: World,
) -> None:
    """Issue 41 item 9: unknown labels are not ``{}``. The canary's registry entry is made
    unreadable (an admin's write whose labels do not decode), then removed: a tenant limited to
    ``env!=prod`` may not publish to it, and a fleet ``-l env!=prod`` does not reach it. Once its
    labels are known again (env=canary) the refused revision is taken and the fleet joins it."""
    w = world
    tenant = unique_name("t")
    site = w.fleet.sites[CANARY]
    assert site.kube is not None
    await tenant_namespace(site.kube, w.ns, ["configmaps"])
    text = f"tenants:{team(tenant, w.ns)}    clusterSelector: env!=prod\n"
    await policy.put_policy(w.js, tenancy.load_policy(text, "tenants.yaml"))
    before = (await registry.records(w.js))[CANARY]
    kv = await w.js.key_value(bus.CLUSTERS_BUCKET)
    garbled = {"name": CANARY, "labels": {"env": 5}}  # a label value that is not a string
    await kv.put(cluster_registry_key(CANARY), json.dumps(garbled).encode())
    own, fleet = f"{tenant}/own", f"{tenant}/wide"
    watch = StatusWatch()
    await watch.start(w.nc, CANARY, own)
    try:
        # the planner refuses the tenant's own publish: its cluster's labels are unknown
        w.bundle = own
        await site.pipeline.publish(w.js, own, w.configmaps("own", n=1), as_user=True)
        refused = await watch.until(lambda s: s.phase is BundlePhase.FAILED, 60, w.fleet.logs)
        assert "labels are unknown" in refused.message, refused
        # the driver does not add it to a fleet of env!=prod (nor of anything else)
        w.bundle = fleet
        wide = w.configmaps("wide", n=1)
        wide[0]["metadata"]["name"] = "cm-wide"  # not the own bundle's object
        await w.publish("r1", wide, selector="env!=prod")

        async def started() -> Any:
            s = await rollout_state(w.nc, fleet)
            return s if s is not None and s.target.revision == "r1" else None

        state = await until("the fleet's rollout of r1", started, 60, w.fleet.logs)
        assert CANARY not in state.clusters, state.clusters
        assert await placed_revisions(w.nc, CANARY, fleet) == []
        # removed (no entry at all): unknown too, so a new revision is refused as well
        await registry.deregister(w.js, CANARY)
        await site.pipeline.publish(
            w.js, own, w.configmaps("own", n=1), revision="r2", as_user=True
        )
        refused = await watch.until(
            lambda s: s.revision == "r2" and s.phase is BundlePhase.FAILED, 60, w.fleet.logs
        )
        assert "labels are unknown" in refused.message, refused
        assert await w.values(CANARY) == set()
        # known again: the refused revision is taken, and the fleet joins the canary
        await registry.register(
            w.js, CANARY, labels=before.labels, kube_version=before.kube_version, by="test"
        )
        await watch.ready("r2", 90, w.fleet.logs)
        await until("canary joined", lambda: _has(w, CANARY, {"own", "wide"}), 90, w.fleet.logs)
    finally:
        try:  # rewrites an unreadable entry too
            await registry.relabel(w.js, CANARY, set_=dict(before.labels), remove=[])
        except registry.RegistryError:  # removed
            await registry.register(
                w.js, CANARY, labels=before.labels, kube_version=before.kube_version, by="test"
            )
        await policy.put_policy(w.js, tenancy.load_policy("tenants: {}", "tenants.yaml"))


async def test_git_into_a_fleet_rolls_each_commit_out_in_waves(world: World) -> None:
    """``driftbus source --selector`` with a canary step: each new commit is a fleet revision."""
    w = world
    repo = w.fleet.workdir / w.bundle
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "cm.yaml").write_text(json.dumps(w.configmaps("g1", n=1)[0]))
    first = commit(repo, "one")
    args = ("--bundle", w.bundle, "--git", f"file://{repo}", "--interval", "1")
    args += ("--selector", "*", "--rollout", "env=canary", "--bake", "1")
    w.fleet.home.start("source", f"source-{w.bundle}", *args)
    try:
        await w.phase(RolloutPhase.COMPLETE, first, within=150)
        for cluster in w.fleet.names():
            await until(f"{cluster} g1", lambda c=cluster: _has(w, c, {"g1"}), 60, w.fleet.logs)
        (repo / "cm.yaml").write_text(json.dumps(w.configmaps("g2", n=1)[0]))
        second = commit(repo, "two")
        await w.phase(RolloutPhase.COMPLETE, second, within=150)
        steps = [e.event for e in w.events.of(w.bundle) if e.revision == second]
        assert steps == ["started", "step", "complete"], steps
        for cluster in w.fleet.names():
            await until(f"{cluster} g2", lambda c=cluster: _has(w, c, {"g2"}), 60, w.fleet.logs)
    finally:
        w.fleet.home.procs[f"source-{w.bundle}"].stop(timeout=10)


async def _gone(path: Path) -> bool:
    return not await asyncio.to_thread(path.exists)


async def _other_driver(w: World, holder: str) -> bool:
    with contextlib.suppress(Exception):  # the entry between two writes
        return await _driver(w) != holder
    return False


async def test_a_git_source_takes_every_rollout_flag_publish_takes(world: World) -> None:
    """Issue 41: ``source --selector`` with ``--max-unavailable``, ``--on-leave``,
    ``--substitute`` (and ``--on-failure``): each commit's fleet revision carries them, and the
    per-cluster values reach each cluster."""
    w = world
    repo = w.fleet.workdir / w.bundle
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    cm = w.configmaps("${cluster.name}/${cluster.labels.env}", n=1)[0]
    (repo / "cm.yaml").write_text(json.dumps(cm))
    first = commit(repo, "one")
    args = ("--bundle", w.bundle, "--git", f"file://{repo}", "--interval", "1")
    args += ("--selector", "env=prod", "--max-unavailable", "1", "--on-leave", "orphan")
    args += ("--substitute", "true", "--on-failure", "rollback")
    w.fleet.home.start("source", f"source-{w.bundle}", *args)
    try:
        await w.phase(RolloutPhase.COMPLETE, first, within=150)
        fb = next(r for r in await fleet_revisions(w.js, w.bundle) if r.revision == first)
        assert (fb.selector, fb.substitute, fb.on_leave) == ("env=prod", True, "orphan"), fb
        assert (fb.rollout.max_unavailable, fb.rollout.on_failure) == (1, "rollback"), fb
        for prod in (PROD_A, PROD_B):
            await until(
                f"{prod} substituted",
                lambda c=prod: _has(w, c, {f"{c}/prod"}),
                60,
                w.fleet.logs,
            )
    finally:
        w.fleet.home.procs[f"source-{w.bundle}"].stop(timeout=10)


async def _driver(w: World) -> str:
    kv = await w.js.key_value("driftbus-rollouts")
    entry = await kv.get("driver")
    return str(json.loads(entry.value or b"{}")["driver"])


def _invalid(ns: str) -> dict[str, Any]:
    """A Deployment the API server refuses (422): the revision fails where it is applied."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "broken", "namespace": ns},
        "spec": {
            "replicas": -1,
            "selector": {"matchLabels": {"app": "broken"}},
            "template": {
                "metadata": {"labels": {"app": "broken"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    }


async def _has(w: World, cluster: str, values: set[str]) -> bool:
    return await w.values(cluster) == values


async def _left(w: World, cluster: str) -> bool:
    s = await rollout_state(w.nc, w.bundle)
    return s is not None and cluster in s.clusters and s.clusters[cluster].state == "removed"


# --- a rollback is RolledBack only once checked (issue 41, item 13) ----------------------------


def _manifest_dir(w: World, revision: str, manifests: list[dict[str, Any]]) -> Path:
    root = w.fleet.workdir / f"{w.bundle}-{revision}"
    root.mkdir()
    for i, m in enumerate(manifests):
        (root / f"{i}.yaml").write_text(json.dumps(m))
    return root


def _publish_rolling_back(w: World, revision: str, step_timeout: float) -> tuple[str, ...]:
    """``driftbus publish`` of a revision the API server refuses, to every cluster of the fleet
    in one step, rolled back on its failure, with ``--wait``."""
    root = _manifest_dir(w, revision, [*w.configmaps("bad"), _invalid(w.ns)])
    every = [a for c in w.fleet.names() for a in ("--cluster", c)]
    return (
        "publish", str(root), "--bundle", w.bundle, *every, "--revision", revision,
        "--step-timeout", f"{step_timeout:g}", "--on-failure", "rollback",
        "--wait", "--timeout", "300",
    )  # fmt: skip


async def _bundle_status(w: World, cluster: str) -> BundleStatus | None:
    msg = await bus.last_message(w.js, bus.STATUS, bundle_status_subject(cluster, w.bundle))
    return decode(msg.data, BundleStatus) if msg is not None and msg.data else None


async def _good_everywhere(w: World) -> None:
    await w.publish("r1", w.configmaps("good"))
    await w.phase(RolloutPhase.COMPLETE, "r1", within=180)
    for cluster in w.fleet.names():
        await until(f"{cluster} good", lambda c=cluster: _has(w, c, {"good"}), 60, w.fleet.logs)


async def test_a_rollback_is_rolled_back_only_once_the_previous_revision_is_ready_everywhere(
    world: World,
) -> None:
    """r2 fails; every cluster goes back to r1, but prod-b's applier is down, so r1 cannot be
    Ready there yet: the rollout says RollingBack (no end) and ``--wait`` keeps waiting. Once
    the applier is back and r1 is Ready on prod-b too, it says RolledBack and ``--wait``
    returns — with every cluster's status Ready on the rollback's own placement of r1."""
    w = world
    await _good_everywhere(w)
    site = w.fleet.sites[PROD_B]
    site.pipeline.procs["applier"].stop(timeout=10)

    async def halted() -> Any:
        s = await rollout_state(w.nc, w.bundle)
        ok = s is not None and s.target.revision == "r2" and s.phase != RolloutPhase.PROGRESSING
        return s if ok else None

    restarted = False
    cli = asyncio.create_task(driftbus(w.fleet, *_publish_rolling_back(w, "r2", 120), limit=330))
    try:
        state = await until("r2 halted and rolling back", halted, 150, w.fleet.logs)
        assert state.phase == "RollingBack", (state.phase, state.message)
        assert state.rollback == sorted(w.fleet.names())
        for cluster in (CANARY, PROD_A):  # r1 back in force there, Ready again
            await until(f"{cluster} good", lambda c=cluster: _has(w, c, {"good"}), 90, w.fleet.logs)
        back = await until(
            "canary and prod-a Ready again in the state",
            lambda: _back_ready(w, CANARY, PROD_A),
            60,
            w.fleet.logs,
        )
        assert back.phase is RolloutPhase.ROLLING_BACK, back.phase  # prod-b is not: no end
        assert not cli.done(), "--wait returned while prod-b was not back on r1"
        site.pipeline.start("applier", "applier")
        restarted = True
        code, _out, err = await cli
    finally:
        if not restarted:
            site.pipeline.start("applier", "applier")
        if not cli.done():
            cli.cancel()
    assert code == 1, err + w.fleet.logs()
    assert f"{w.bundle}@r2: RollingBack" in err, err
    assert f"{w.bundle}@r2: RolledBack" in err, err
    state = await rollout_state(w.nc, w.bundle)
    assert state is not None
    assert state.phase is RolloutPhase.ROLLED_BACK
    for cluster in w.fleet.names():  # what RolledBack says was checked, on each cluster
        st = await _bundle_status(w, cluster)
        assert st is not None
        entry = state.clusters[cluster]
        assert (st.revision, st.phase, st.published_at) == ("r1", BundlePhase.READY, entry.at)
        assert await w.values(cluster) == {"good"}
    events = [(e.event, e.clusters) for e in w.events.of(w.bundle) if e.revision == "r2"]
    assert [e for e, _ in events] == ["started", "halted", "rolling-back", "rolled-back"], events
    assert events[-1][1] == sorted(w.fleet.names())


async def test_a_rollback_that_cannot_become_ready_on_a_cluster_fails_naming_it(
    world: World,
) -> None:
    """r2 fails and goes back to r1 everywhere; prod-b's applier stays down, so r1 never becomes
    Ready there: RollingBack, then RollbackFailed naming prod-b (and only prod-b) once the step
    timeout passes; ``--wait`` follows it to that end (exit 1)."""
    w = world
    await _good_everywhere(w)
    site = w.fleet.sites[PROD_B]
    site.pipeline.procs["applier"].stop(timeout=10)
    try:
        code, _out, err = await driftbus(w.fleet, *_publish_rolling_back(w, "r2", 30), limit=330)
        state = await rollout_state(w.nc, w.bundle)
    finally:
        site.pipeline.start("applier", "applier")
    assert f"{w.bundle}@r2: RollingBack" in err, err  # not RolledBack at once
    assert f"{w.bundle}@r2: RollbackFailed" in err, err
    assert code == 1, err + w.fleet.logs()
    assert state is not None
    assert state.phase is RolloutPhase.ROLLBACK_FAILED, (state.phase, state.message, err)
    why = state.message.split("rollback failed: ", 1)[1]
    assert why == f"r1 not Ready again within 30s in {PROD_B}", state.message
    events = [e for e in w.events.of(w.bundle) if e.revision == "r2"]
    assert [e.event for e in events] == ["started", "halted", "rolling-back", "rollback-failed"]
    assert events[-1].clusters == [PROD_B]
    assert events[-1].phase is RolloutPhase.ROLLBACK_FAILED
    for cluster in (CANARY, PROD_A):  # the others did come back
        assert state.clusters[cluster].state == "ready"
        assert await w.values(cluster) == {"good"}
    # prod-b's applier is back: the placement of r1 the rollback made is applied there
    await until("prod-b back on r1", lambda: _has(w, PROD_B, {"good"}), 90, w.fleet.logs)


async def _back_ready(w: World, *clusters: str) -> Any:
    s = await rollout_state(w.nc, w.bundle)
    if s is None or s.previous is None:
        return None
    ok = all(
        (e := s.clusters.get(c)) is not None
        and e.revision == s.previous.revision
        and e.state == "ready"
        for c in clusters
    )
    return s if ok else None
