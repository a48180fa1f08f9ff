"""The prune budget on real clusters (issue 45): a revision that would delete most of a bundle on
a cluster, or a Namespace, is applied but its deletions wait (PruneHeld, named) until
``publish --allow-prune`` or ``driftbus approve``; a relabel that would prune a fleet bundle on
2 of 3 clusters waits for ``driftbus approve``. Run as a user would, with the ``driftbus`` command,
against three API servers, two planner replicas and one NATS (one stack for the whole module);
what each cluster holds is read from its own API server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest

from schemas.fleet import FleetStatus
from schemas.messages import BundleOptions, BundlePhase, BundleStatus
from services.cli.reads import bundle_statuses
from services.clusters import registry
from services.fleet.publish import publish_fleet
from services.kube import KubeClient, Resource

from ..conftest import unique_name
from .fleet_site import FleetStack, driftbus, rollout_state, until
from .fleet_site import fleet_stack as running_fleet

pytestmark = [pytest.mark.scale, pytest.mark.timeout(600)]
CANARY, PROD_A, PROD_B = "pb-canary", "pb-prod-a", "pb-prod-b"
NS = Resource("", "v1", "Namespace", "namespaces", False)


@pytest.fixture(scope="module")
def fleet_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetStack]:
    with running_fleet(tmp_path_factory.mktemp("prunebudget"), [CANARY, PROD_A, PROD_B]) as fleet:
        yield fleet


def cm(name: str, ns: str, value: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"value": value},
    }


class World:
    def __init__(self, fleet: FleetStack, nc: Any, tmp: Path) -> None:
        self.fleet, self.nc, self.js = fleet, nc, nc.jetstream()
        self.ns = unique_name("pb")
        self.tmp = tmp

    def kube(self, cluster: str) -> KubeClient:
        kube = self.fleet.sites[cluster].kube
        assert kube is not None
        return kube

    def write(self, name: str, manifests: list[dict[str, Any]]) -> Path:
        """A directory holding ``manifests``, one file each."""
        d = self.tmp / name
        d.mkdir()
        for i, m in enumerate(manifests):
            (d / f"{i:02}.json").write_text(json.dumps(m))
        return d

    async def cli(self, *args: str) -> tuple[int, str, str]:
        return await driftbus(self.fleet, *args)

    async def publish(self, bundle: str, path: Path, *flags: str) -> tuple[int, str, str]:
        return await self.cli(
            "publish", str(path), "--cluster", CANARY, "--bundle", bundle, "--wait",
            "--timeout", "120", *flags,
        )  # fmt: skip

    async def names(self, cluster: str) -> set[str]:
        return set(await self.fleet.sites[cluster].configmaps(self.ns))

    async def status(self, bundle: str) -> BundleStatus:
        got = await bundle_statuses(self.js, CANARY, bundle)
        assert got, f"no status of {bundle}"
        return got[0]

    async def namespace_exists(self, cluster: str, name: str) -> bool:
        items, _ = await self.kube(cluster).list(NS)
        return any(o["metadata"]["name"] == name for o in items)


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
    await until(
        "three clusters registered",
        lambda: _registered(w),
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


async def _registered(w: World) -> bool:
    return len(await registry.records(w.js)) >= 3


def twelve(w: World) -> list[dict[str, Any]]:
    return [cm(f"cm-{i:02}", w.ns) for i in range(12)]


async def held_ten(w: World, bundle: str) -> None:
    """Publish 12 ConfigMaps, then a revision keeping 2 (one changed): held, named, the rest
    applied, all 12 still on the API server."""
    code, out, err = await w.publish(bundle, w.write("r1", twelve(w)))
    assert code == 0, (out, err)
    kept = [cm("cm-00", w.ns, "v2"), cm("cm-01", w.ns)]
    code, out, err = await w.publish(bundle, w.write("r2", kept))
    assert code == 3, (code, out, err)  # --wait ends on PruneHeld, with its own exit code
    assert "PruneHeld" in out
    st = await w.status(bundle)
    assert st.phase is BundlePhase.PRUNE_HELD, st
    assert "would delete 10 of its 12 objects" in st.message
    assert f"ConfigMap/{w.ns}/cm-02" in st.message
    assert "and 7 more" in st.message
    assert f"driftbus approve {bundle} --cluster {CANARY}" in st.message
    assert "--allow-prune" in st.message
    assert sum("prune held" in line for line in st.failed_objects) == 10
    cms = await w.fleet.sites[CANARY].configmaps(w.ns)
    assert set(cms) == {f"cm-{i:02}" for i in range(12)}  # nothing deleted
    assert cms["cm-00"] == {"value": "v2"}  # the rest of the revision applied


async def test_a_revision_deleting_10_of_12_is_held_and_named_and_allow_prune_lets_it_through(
    world: World,
) -> None:
    w = world
    bundle = unique_name("ten")
    await held_ten(w, bundle)
    code, out, err = await w.publish(bundle, w.tmp / "r2", "--allow-prune")
    assert code == 0, (code, out, err)
    assert await w.names(CANARY) == {"cm-00", "cm-01"}
    assert (await w.status(bundle)).phase is BundlePhase.READY


async def test_driftbus_approve_lets_the_held_revision_through(world: World) -> None:
    w = world
    bundle = unique_name("appr")
    await held_ten(w, bundle)
    code, out, err = await w.cli("approve", bundle, "--cluster", CANARY)
    assert code == 0, (code, out, err)
    assert "approved" in out

    async def pruned() -> bool:
        return await w.names(CANARY) == {"cm-00", "cm-01"}

    await until("the 10 held objects pruned", pruned, 120, w.fleet.logs)

    async def ready() -> bool:
        return (await w.status(bundle)).phase is BundlePhase.READY

    await until(f"{bundle} Ready", ready, 60, w.fleet.logs)
    # nothing more is held: a second approval says so
    code, _, err = await w.cli("approve", bundle, "--cluster", CANARY)
    assert code == 1
    assert "holds no prune" in err


async def test_a_revision_renaming_every_object_is_held(world: World) -> None:
    """A bad render (a changed name prefix) declares 12 new objects and drops the 12 live ones:
    the new ones are applied, the 12 old ones stay, PruneHeld (counted with the revision's own
    new objects it was 12 of 24, not more than half, and all 12 were deleted: review)."""
    w = world
    bundle = unique_name("rename")
    code, out, err = await w.publish(bundle, w.write("r1", twelve(w)))
    assert code == 0, (out, err)
    renamed = [cm(f"renamed-{i:02}", w.ns) for i in range(12)]
    code, out, err = await w.publish(bundle, w.write("r2", renamed))
    assert code == 3, (code, out, err)
    st = await w.status(bundle)
    assert st.phase is BundlePhase.PRUNE_HELD, st
    assert "would delete 12 of its 12 objects" in st.message
    names = await w.names(CANARY)
    assert {f"cm-{i:02}" for i in range(12)} <= names  # nothing deleted
    assert {f"renamed-{i:02}" for i in range(12)} <= names  # the revision applied


async def test_a_rollback_to_an_approved_revision_weighs_its_deletions_again(
    world: World,
) -> None:
    """An approval let r2's deletions through once; rolling back to r2 later (after r3 added
    objects) does not carry that approval: r3's objects are not deleted unasked."""
    w = world
    bundle = unique_name("back")
    await held_ten(w, bundle)
    code, out, err = await w.cli("approve", bundle, "--cluster", CANARY)
    assert code == 0, (code, out, err)

    async def pruned() -> bool:
        return await w.names(CANARY) == {"cm-00", "cm-01"}

    await until("the 10 held objects pruned", pruned, 120, w.fleet.logs)
    r3 = [cm("cm-00", w.ns, "v2"), cm("cm-01", w.ns), *(cm(f"new-{i}", w.ns) for i in range(8))]
    code, out, err = await w.publish(bundle, w.write("r3", r3))
    assert code == 0, (code, out, err)
    approved = await w.status(bundle)
    code, out, err = await w.cli("rollback", bundle, "--cluster", CANARY, "--wait")
    assert code == 3, (code, out, err)  # back to r2: 8 of 10 deletions, held again
    st = await w.status(bundle)
    assert st.phase is BundlePhase.PRUNE_HELD, (st, approved)
    assert len(await w.names(CANARY)) == 10


async def test_an_approval_names_its_revision_and_never_lets_a_later_one_through(
    world: World,
) -> None:
    w = world
    bundle = unique_name("later")
    await held_ten(w, bundle)
    held = (await w.status(bundle)).revision
    # a later revision drops all but one: held again, under its own revision
    code, out, err = await w.publish(bundle, w.write("r3", [cm("cm-00", w.ns, "v3")]))
    assert code == 3, (code, out, err)
    later = await w.status(bundle)
    assert later.revision != held
    code, _, err = await w.cli("approve", bundle, "--cluster", CANARY, "--revision", held)
    assert code == 1, err
    assert f"revision {held} is not the one held" in err
    assert len(await w.names(CANARY)) == 12


async def test_a_revision_dropping_a_namespace_is_held_and_declaring_it_again_releases_it(
    world: World,
) -> None:
    w = world
    bundle = unique_name("nsb")
    owned = unique_name("pbns")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": owned}}
    r1 = w.write("n1", [namespace, cm("keep", w.ns)])
    code, out, err = await w.publish(bundle, r1)
    assert code == 0, (code, out, err)
    code, out, err = await w.publish(bundle, w.write("n2", [cm("keep", w.ns, "v2")]))
    assert code == 3, (code, out, err)
    st = await w.status(bundle)
    assert st.phase is BundlePhase.PRUNE_HELD
    assert f"would delete a Namespace (Namespace/{owned}" in st.message, st.message
    assert await w.namespace_exists(CANARY, owned)
    assert (await w.fleet.sites[CANARY].configmaps(w.ns))["keep"] == {"value": "v2"}
    # declared again: the hold ends with nothing deleted
    code, out, err = await w.publish(bundle, r1)
    assert code == 0, (code, out, err)
    assert await w.namespace_exists(CANARY, owned)
    assert (await w.status(bundle)).phase is BundlePhase.READY


async def test_a_relabel_pruning_on_2_of_3_clusters_waits_for_approval(world: World) -> None:
    w = world
    bundle = unique_name("fleetpb")
    label = unique_name("in")
    for c in (CANARY, PROD_A, PROD_B):
        await registry.relabel(w.js, c, set_={"pbt": label}, remove=[])
    try:
        await publish_fleet(
            w.js,
            bundle=bundle,
            revision="r1",
            manifests=[cm("fleet-cm", w.ns)],
            options=BundleOptions(),
            selector=f"pbt={label}",
        )
        for c in (CANARY, PROD_A, PROD_B):

            async def has(c: str = c) -> bool:
                return "fleet-cm" in await w.names(c)

            await until(f"{c} has the fleet bundle", has, 150, w.fleet.logs)

        async def complete() -> bool:
            s = await rollout_state(w.nc, bundle)
            return s is not None and s.phase == "Complete"

        await until("rollout complete", complete, 150, w.fleet.logs)
        for c in (PROD_A, PROD_B):
            await registry.relabel(w.js, c, set_={"pbt": "out"}, remove=[])

        async def held() -> bool:
            s = await rollout_state(w.nc, bundle)
            return s is not None and s.leave_held == [PROD_A, PROD_B]

        await until("the prune on prod-a and prod-b held", held, 60, w.fleet.logs)
        for c in (PROD_A, PROD_B):  # nothing pruned
            assert "fleet-cm" in await w.names(c)
        code, out, err = await w.cli("rollout", "status", bundle)
        assert code == 0, (out, err)
        assert "PruneHeld" in out
        assert f"driftbus approve {bundle}" in out
        code, out, err = await w.cli("status", "--bundle", bundle, "-o", "json")
        assert code == 0, (out, err)
        fs = msgspec.json.decode(out, type=FleetStatus)  # typed: the held clusters named
        assert fs.prune_held == [PROD_A, PROD_B]
        rows = {r.cluster: r.rollout for r in fs.clusters}
        assert (rows[PROD_A], rows[PROD_B]) == ("prune-held", "prune-held")

        code, out, err = await w.cli("approve", bundle)
        assert code == 0, (code, out, err)
        for c in (PROD_A, PROD_B):

            async def gone(c: str = c) -> bool:
                return "fleet-cm" not in await w.names(c)

            await until(f"{c} pruned once approved", gone, 120, w.fleet.logs)
        assert "fleet-cm" in await w.names(CANARY)
    finally:
        for c in (CANARY, PROD_A, PROD_B):
            await registry.relabel(w.js, c, set_={}, remove=["pbt"])
