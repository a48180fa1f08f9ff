"""``driftbus plan`` for a fleet (issue 45) on three real clusters (canary, prod, prod) with
controllers, two planners and one NATS: the plan runs with no kubeconfig at all — no
``KUBECONFIG``, no ``driftbus up`` context, an empty home — so it cannot know where any API
server is, let alone ask one; it names exactly the clusters the selector selects, with the
counts the planner's rule gives; and the fleet publish that follows does what it said, object
for object (the planners' decision records, and the objects on each cluster's API server).
``--diff`` on the same fleet dry-runs what would change through a kubeconfig with a context
per cluster (as ``driftbus up`` writes one)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from schemas.cli import FleetPlanDocument
from schemas.decision import DecisionAction
from schemas.fleet import RolloutPhase, RolloutSpec
from schemas.messages import BundleOptions
from schemas.subjects import ObjectKey
from services.cli.plan import state
from services.cli.up.clusters import kubeconfig
from services.clusters import registry
from services.fleet.publish import publish_fleet
from services.kube import KubeClient
from services.planner.rule import checkpoint
from services.planner.rule.entry import Entry

from ..conftest import unique_name
from .fleet_site import FleetStack, rollout_state, until
from .fleet_site import fleet_stack as running_fleet

pytestmark = [pytest.mark.scale, pytest.mark.timeout(600)]
CANARY, PROD_A, PROD_B = "plan-canary", "plan-prod-a", "plan-prod-b"


@pytest.fixture(scope="module")
def fleet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetStack]:
    with running_fleet(tmp_path_factory.mktemp("fleetplan"), [CANARY, PROD_A, PROD_B]) as fleet:
        yield fleet


def configmap(ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


class World:
    def __init__(self, fleet: FleetStack, nc: Any, home: Path) -> None:
        self.fleet, self.nc, self.js, self.home = fleet, nc, nc.jetstream(), home
        self.ns = unique_name("fplan")
        self.bundle = unique_name("app")

    def env(self) -> dict[str, str]:
        """The fleet's bus and nothing that leads to an API server: no KUBECONFIG, an empty
        home (no ~/.kube/config), no ``driftbus up`` context."""
        env = {k: v for k, v in self.fleet.cli_env().items() if k != "KUBECONFIG"}
        return {
            **env,
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "DRIFTBUS_UP_CONTEXT": str(self.home / "no-context.json"),
        }

    async def driftbus(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.cli.main",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env or self.env(),
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    def write(self, name: str, manifests: list[dict[str, Any]]) -> Path:
        d = self.home / name
        d.mkdir()
        for m in manifests:
            (d / f"{m['metadata']['name']}.json").write_text(json.dumps(m))
        return d

    async def plan(self, path: Path, *extra: str) -> FleetPlanDocument:
        code, out, err = await self.driftbus(
            "plan", str(path), "--bundle", self.bundle, *FLEET, *extra, "-o", "json"
        )
        assert code == 0, err
        return msgspec.json.decode(out, type=FleetPlanDocument)

    async def publish(self, revision: str, manifests: list[dict[str, Any]]) -> None:
        await publish_fleet(
            self.js,
            bundle=self.bundle,
            revision=revision,
            manifests=manifests,
            options=BundleOptions(),
            selector="env=prod",
            rollout=RolloutSpec(steps=["region=eu"]),
            substitute=True,
        )

    async def complete(self, revision: str) -> None:
        async def probe() -> bool:
            s = await rollout_state(self.nc, self.bundle)
            return (
                s is not None
                and s.target.revision == revision
                and (s.phase is RolloutPhase.COMPLETE)
            )

        await until(f"rollout Complete on {revision}", probe, 180, self.fleet.logs)

    async def configmaps(self, cluster: str) -> dict[str, dict[str, str]]:
        return await self.fleet.sites[cluster].configmaps(self.ns)


FLEET = ("-l", "env=prod", "--rollout", "region=eu", "--substitute")
"""The targeting of the test's fleet publish, as flags (``World.publish`` is the same)."""


@pytest.fixture
async def world(fleet_stack: FleetStack, tmp_path: Path) -> AsyncIterator[World]:
    nc = await nats.connect(fleet_stack.nats.client_url)
    w = World(fleet_stack, nc, tmp_path)
    for site in fleet_stack.sites.values():
        site.kube = await KubeClient.from_kubeconfig(str(site.pipeline.stack.cluster.kubeconfig))
        await site.kube.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": w.ns}},
            field_manager="driftbus-tests",
        )
        site.decisions = type(site.decisions)()
        await site.decisions.start(nc, site.name)

    async def registered() -> bool:
        return len(await registry.records(w.js)) >= 3

    await until("three clusters registered", registered, 120, fleet_stack.logs)
    try:
        yield w
    finally:
        await nc.drain()
        for site in fleet_stack.sites.values():
            if site.kube is not None:
                await site.kube.close()
                site.kube = None


def by_name(doc: FleetPlanDocument) -> dict[str, Any]:
    return {c.cluster: c for c in doc.clusters}


def actions(doc: FleetPlanDocument, cluster: str) -> dict[str, str]:
    """``name -> action:reason`` of the objects the plan says change on ``cluster``."""
    return {o.name: f"{o.action}:{o.reason}" for o in by_name(doc)[cluster].objects}


async def test_the_fleet_plan_needs_no_kubeconfig_and_agrees_with_the_publish(
    world: World,
) -> None:
    w = world
    v1 = [
        configmap(w.ns, "cm-a", {"who": "${cluster.name}", "v": "1"}),
        configmap(w.ns, "cm-b", {"env": "${cluster.labels.env}"}),
        configmap(w.ns, "cm-c", {"v": "1"}),
    ]
    v2 = [
        configmap(w.ns, "cm-a", {"who": "${cluster.name}", "v": "2"}),
        configmap(w.ns, "cm-b", {"env": "${cluster.labels.env}"}),
        configmap(w.ns, "cm-d", {"v": "new"}),
    ]
    d1, d2 = w.write("v1", v1), w.write("v2", v2)

    # nothing published yet: everything is new, on exactly the selected clusters
    first = await w.plan(d1)
    assert [c.cluster for c in first.clusters] == [PROD_A, PROD_B]  # not the canary
    for c in first.clusters:
        assert (c.summary.new, c.summary.changed, c.summary.unchanged, c.summary.prune) == (
            3,
            0,
            0,
            0,
        ), c
        assert c.values == {"${cluster.labels.env}": "prod", "${cluster.name}": c.cluster}
    assert by_name(first)[PROD_A].step == 1
    assert by_name(first)[PROD_B].step == 2
    assert first.changes
    assert not first.errors
    assert not first.diff

    await w.publish("v1", v1)
    await w.complete("v1")
    for c in (PROD_A, PROD_B):
        assert (await w.configmaps(c))["cm-a"] == {"who": c, "v": "1"}
    assert await w.configmaps(CANARY) == {}

    # the same revision again: nothing to do anywhere (exit 0 even with --exit-code)
    code, out, err = await w.driftbus("plan", str(d1), "--bundle", w.bundle, *FLEET, "--exit-code")
    assert code == 0, out + err
    assert "0 new, 0 changed, 0 drift restored, 0 to prune, 6 unchanged" in out, out

    # the next revision: one changed, one unchanged, one pruned, one new, per cluster
    plan = await w.plan(d2)
    assert [c.cluster for c in plan.clusters] == [PROD_A, PROD_B]
    for c in plan.clusters:
        s = c.summary
        assert (s.new, s.changed, s.unchanged, s.prune) == (1, 1, 1, 1), c
        assert actions(plan, c.cluster) == {
            "cm-a": "apply:manifest",
            "cm-c": "delete:prune",
            "cm-d": "apply:new",
        }
    code, md, err = await w.driftbus(
        "plan", str(d2), "--bundle", w.bundle, *FLEET, "--exit-code", "-o", "markdown"
    )
    assert code == 2, err
    print(md)  # what a pull-request comment shows (docs/plan.md quotes a run of it)
    assert f"| `{PROD_A}` | 1 | 1 | 1 | 0 | 1 | 1 |" in md, md
    assert f"| `{PROD_B}` | 2 | 1 | 1 | 0 | 1 | 1 |" in md, md
    assert CANARY not in md

    # the environment really leads to no API server: asking for the dry-run there fails
    code, _, err = await w.driftbus("plan", str(d2), "--bundle", w.bundle, *FLEET, "--diff")
    assert code == 1, err
    assert "--diff needs a kubeconfig" in err, err
    # with a kubeconfig naming each cluster, --diff dry-runs what would change
    merged = kubeconfig(
        [s.pipeline.stack.cluster for s in w.fleet.sites.values()], w.home / "kubeconfig"
    )
    diffed = await w.plan(d2, "--diff", "--kubeconfig", str(merged))
    assert diffed.diff
    for c in diffed.clusters:
        cm_a = next(o for o in c.objects if o.name == "cm-a")
        assert [(ch.op, ch.path, ch.old, ch.new) for ch in cm_a.changes] == [
            ("change", "data.v", "1", "2")
        ], cm_a

    # the publish does what the plan said, object for object
    marks = {c: len(w.fleet.sites[c].decisions.records) for c in w.fleet.names()}
    await w.publish("v2", v2)
    await w.complete("v2")

    async def pruned() -> bool:
        return all([("cm-c" not in await w.configmaps(c)) for c in (PROD_A, PROD_B)])

    await until("cm-c pruned", pruned, 60, w.fleet.logs)
    for c in (PROD_A, PROD_B):
        records = [
            r
            for r in w.fleet.sites[c].decisions.records[marks[c] :]
            if r.bundle == w.bundle and r.action in (DecisionAction.APPLY, DecisionAction.DELETE)
        ]
        done = {r.key.name: f"{r.action}:{r.reason}" for r in records}
        assert done == actions(plan, c), (c, records)
        assert len(records) == len(done), records  # each object written once
        assert await w.configmaps(c) == {
            "cm-a": {"who": c, "v": "2"},
            "cm-b": {"env": "prod"},
            "cm-d": {"v": "new"},
        }
    assert not [
        r for r in w.fleet.sites[CANARY].decisions.records[marks[CANARY] :] if r.bundle == w.bundle
    ]
    assert await w.configmaps(CANARY) == {}


async def test_the_plan_reads_each_clusters_checkpoint_and_knows_what_the_facts_say(
    world: World,
) -> None:
    """The planners write each cluster's checkpoint after a burst of facts; the plan reads it
    and the facts published since, and knows exactly what a read of every fact gives — right
    after a publish (facts above the checkpoints), after drift restored, and once settled."""
    w = world
    prod = [PROD_A, PROD_B]
    v1 = [configmap(w.ns, f"cm-{i}", {"v": "1"}) for i in range(4)]
    await w.publish("v1", v1)
    await w.complete("v1")

    async def covered() -> bool:
        found = await state.read_checkpoints(w.js, prod)
        if set(found) != set(prod):
            return False
        for cp in found.values():
            names = {k.name for k, e in cp.entries.items() if e.owner_bundle == w.bundle}
            if names != {f"cm-{i}" for i in range(4)}:
                return False
        return True

    await until(
        "a checkpoint of each prod cluster with the bundle's objects", covered, 60, w.fleet.logs
    )
    await agree(w, prod)

    # drift on one cluster: the watcher's tombstone, the restore and its facts, and the next
    # revision's, above the checkpoints when the plan reads
    site = w.fleet.sites[PROD_A]
    assert site.kube is not None
    res = await site.kube.discovery.resource("v1", "ConfigMap")
    await site.kube.delete(res, "cm-0", w.ns)  # drift: deleted by hand
    await w.publish("v2", [*v1[:3], configmap(w.ns, "cm-new", {"v": "1"})])
    await agree(w, prod)  # straight after: the tail holds what the checkpoints do not
    await w.complete("v2")

    async def restored() -> bool:
        return (await w.configmaps(PROD_A)).get("cm-0") == {"v": "1"}

    await until("cm-0 restored", restored, 60, w.fleet.logs)
    await until("a checkpoint of the restore", covered_all_of(w, prod), 60, w.fleet.logs)
    await agree(w, prod)


def said(entries: dict[ObjectKey, Entry]) -> dict[ObjectKey, Entry]:
    """What the rule can read of each entry (``checkpoint.said``): a checkpoint keeps a trace a
    rebuild has not (a tombstone's label), which no decision reads."""
    return {k: checkpoint.said(e) for k, e in entries.items()}


def covered_all_of(w: World, clusters: list[str]) -> Callable[[], Awaitable[bool]]:
    """Whether every fact of ``clusters`` is in their checkpoints (nothing above them)."""

    async def probe() -> bool:
        found = await state.read_checkpoints(w.js, clusters)
        if set(found) != set(clusters):
            return False
        tail = await state.known(w.js, clusters)
        full = await state.known(w.js, clusters, checkpoints=False)
        return all(found[c].entries == tail[c] == said(full[c]) for c in clusters)

    return probe


async def agree(w: World, clusters: list[str]) -> None:
    """The plan's state from checkpoints plus the tail is the state from every fact. Facts may
    land between the two reads (a restore in progress): read again, a few times, before
    calling it a difference."""
    for _ in range(20):
        from_checkpoints = await state.known(w.js, clusters)
        from_facts = {
            c: said(f) for c, f in (await state.known(w.js, clusters, checkpoints=False)).items()
        }
        if from_checkpoints == from_facts:
            return
        await asyncio.sleep(0.5)
    for c in clusters:
        for key in sorted(from_checkpoints[c].keys() | from_facts[c].keys()):
            a, b = from_checkpoints[c].get(key), from_facts[c].get(key)
            assert a == b, (c, key, a, b)
