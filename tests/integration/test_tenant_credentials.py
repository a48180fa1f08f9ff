"""Tenants' credentials on a real nats-server (issue 20): ``tenant-<name>`` publishes its own
bundles and reads their status; every other tenant's and every platform bundle, other status,
the services' streams and the tenant policy are refused by the server itself. Only an admin
(and the planner) writes the policy. Of fleets (issue 31), a tenant publishes its own fleet
bundles, lists the clusters and reads its own rollouts, and writes neither the cluster registry
nor any rollout; a watcher writes its own cluster's registry entry only. The configuration is
``permissions.fleet`` — what ``driftbus nats-config --tenant … --admin …`` ships — served over
the same mutual TLS as test_security.py, whose helpers check each refusal (each waits for the
server's ``Permissions Violation``, so an operation the server let through fails the test)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import secrets
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from schemas.codec import encode
from schemas.fleet import ClusterRecord
from schemas.messages import BundleControl, BundleOptions
from schemas.subjects import (
    bundle_status_subject,
    bundle_statuses_filter,
    bundle_subject,
    cluster_filter,
    cluster_registry_key,
    control_subject,
    encode_token,
    fleet_subject,
    rollback_subject,
    rollout_event_subject,
    rollout_key,
    tenant_bundle_filter,
    tenant_status_filter,
)
from schemas.tenants import TenantCredentials
from services.access import grants, permissions
from services.cli import security
from services.clusters import members
from services.common import bus
from services.controlplane import assets
from services.revisions.publish import INLINE_LIMIT, publish_bundle
from services.tenancy import store as policy

from .test_security import Secured, refused_publish, refused_subscribe

pytestmark = pytest.mark.integration

C, OTHER = "prod", "staging"
TENANT_A, TENANT_B = "team-a", "team-b"
USER_A, USER_B = f"tenant-{TENANT_A}", f"tenant-{TENANT_B}"
KV_POLICY = f"$KV.{bus.TENANTS_BUCKET}.{bus.TENANTS_KEY}"


class TenantBus(Secured):
    """test_security's locked-down server (mutual TLS, a password per identity) serving a fleet
    with tenants, a platform user and an admin instead of that test's users."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)  # CA, certificates, the server (not started yet)
        users = permissions.fleet(
            [C, OTHER],
            {"platform": [C, OTHER]},
            tenants={TENANT_A: [C], TENANT_B: [C]},
            admins=["root"],
        )
        users = [dataclasses.replace(u, password=secrets.token_urlsafe(18)) for u in users]
        self.passwords = {u.name: u.password or "" for u in users}
        args = self.server.extra_args
        Path(args[args.index("-c") + 1]).write_text(permissions.authorization_conf(users))


@pytest.fixture(scope="module")
async def sec(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TenantBus]:
    """The server, with the tenants bucket created by the admin (a policy may be applied
    before any planner ran) and then the streams by the planner."""
    sec = TenantBus(tmp_path_factory.mktemp("tenants"))
    await asyncio.to_thread(sec.server.start)
    try:
        errors: list[str] = []
        root = await sec.connect("root", errors)
        try:
            await bus.ensure_tenants_bucket(root.jetstream(timeout=5))
        finally:
            await root.close()
        assert not errors, errors
        planner = await sec.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
        try:
            await bus.ensure_streams(planner.jetstream(timeout=5))
        finally:
            await planner.close()
        assert not errors, errors
        yield sec
    finally:
        sec.server.stop()


def big_manifests(n: int = 12) -> list[dict[str, Any]]:
    """ConfigMaps whose bundle message exceeds INLINE_LIMIT: it goes through the Object Store."""
    filler = "x" * (INLINE_LIMIT // n + 1024)
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"big-{i}", "namespace": "team-a"},
            "data": {"filler": filler},
        }
        for i in range(n)
    ]


async def test_a_tenant_publishes_its_own_bundles_and_reads_their_status(sec: TenantBus) -> None:
    errors: list[str] = []
    nc = await sec.connect(USER_A, errors)
    planner = await sec.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
    try:
        js = nc.jetstream(timeout=5)
        received: list[str] = []
        status = asyncio.Event()

        async def on_status(msg: Any) -> None:
            received.append(msg.subject)
            status.set()

        await nc.subscribe(bundle_status_subject(C, "team-a/web"), cb=on_status)
        await nc.subscribe(tenant_status_filter(C, TENANT_A))  # all of its own, every bundle
        await nc.flush()

        # what `driftbus publish` does: a small bundle inline, a big one through the Object
        # Store (twice: the second put replaces the stored object and purges its chunks), and
        # the "is anybody serving the cluster" read of the members' heartbeats
        small = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}]
        await publish_bundle(
            js,
            cluster=C,
            bundle="team-a/web",
            revision="r1",
            manifests=small,
            options=BundleOptions(),
            within=10,
        )
        for revision in ("big-1", "big-2"):
            sent = await publish_bundle(
                js,
                cluster=C,
                bundle="team-a/big",
                revision=revision,
                manifests=big_manifests(),
                options=BundleOptions(),
                within=10,
            )
            assert sent.manifests_ref is not None, "the big bundle was meant to be stored"
        assert await members.heartbeats(js, C) == {"watcher": None, "applier": None}
        # suspend its own bundle (a JetStream publish: acknowledged), ask for its rollback
        suspend = BundleControl(cluster=C, bundle="team-a/web", suspended=True)
        await js.publish(control_subject(C, "team-a/web"), encode(suspend))
        await nc.publish(rollback_subject(C, "team-a/web"), b"{}")
        await nc.flush()

        # what landed, read back by the planner
        pjs = planner.jetstream(timeout=5)
        for bundle, revision in (("team-a/web", "r1"), ("team-a/big", "big-2")):
            last = await bus.last_message(pjs, bus.BUNDLES, bundle_subject(C, bundle))
            assert last is not None, bundle
            assert revision.encode() in (last.data or b""), bundle

        # a status of its bundle (published by the planner, as in production) reaches it
        await planner.publish(bundle_status_subject(C, "team-a/web"), b"{}")
        await planner.flush()
        await asyncio.wait_for(status.wait(), 10)
        assert received == [bundle_status_subject(C, "team-a/web")]
        assert not errors, errors  # nothing of the above was refused
    finally:
        await nc.close()
        await planner.close()


async def test_a_tenant_is_refused_everything_not_its_own(sec: TenantBus) -> None:
    tc = encode_token(C)
    api = "$JS.API"
    refusals = [
        # another tenant's bundles, platform bundles (the tenant token "="), another cluster
        await refused_publish(sec, USER_A, bundle_subject(C, "team-b/web")),
        await refused_publish(sec, USER_A, bundle_subject(C, "web")),
        await refused_publish(sec, USER_A, bundle_subject(C, TENANT_A)),  # platform, named so
        await refused_publish(sec, USER_A, bundle_subject(OTHER, "team-a/web")),
        await refused_publish(sec, USER_B, bundle_subject(C, "team-a/web")),
        # suspend/resume and rollback of another tenant's or a platform bundle (lifecycle.md)
        await refused_publish(sec, USER_A, control_subject(C, "team-b/web")),
        await refused_publish(sec, USER_A, control_subject(C, "web")),
        await refused_publish(sec, USER_A, rollback_subject(C, "team-b/web")),
        await refused_publish(sec, USER_A, rollback_subject(C, "web")),
        # status: another tenant's, every tenant's, platform bundles'; never its own writes
        await refused_subscribe(sec, USER_A, tenant_status_filter(C, TENANT_B)),
        await refused_subscribe(sec, USER_A, bundle_status_subject(C, "team-b/web")),
        await refused_subscribe(sec, USER_A, "driftbus.status.>"),
        await refused_subscribe(sec, USER_A, cluster_filter("status", C)),
        await refused_subscribe(sec, USER_A, bundle_statuses_filter(C)),
        await refused_subscribe(sec, USER_A, bundle_status_subject(C, "web")),
        await refused_subscribe(sec, USER_A, bundle_status_subject(C, TENANT_A)),
        await refused_subscribe(sec, USER_A, tenant_status_filter(OTHER, TENANT_A)),
        await refused_publish(sec, USER_A, bundle_status_subject(C, "team-a/web")),
        # the services' subjects and streams: intents, facts, decisions, other bundles
        await refused_subscribe(sec, USER_A, "driftbus.intent.>"),
        await refused_subscribe(sec, USER_A, "driftbus.decision.>"),
        await refused_subscribe(sec, USER_A, "driftbus.bundle.>"),
        await refused_subscribe(sec, USER_A, "_DRIFTBUS.planner.>"),
        await refused_publish(sec, USER_A, f"driftbus.intent.{tc}.=.ConfigMap.ns.x"),
        await refused_publish(sec, USER_A, f"driftbus.server.{tc}.=.ConfigMap.ns.x"),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.BUNDLES}"),
        await refused_publish(
            sec, USER_A, f"{api}.DIRECT.GET.{bus.BUNDLES}.{bundle_subject(C, 'team-b/web')}"
        ),
        await refused_publish(sec, USER_A, f"{api}.STREAM.MSG.GET.{bus.BUNDLES}"),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.DECISIONS}"),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.STATUS}"),
        await refused_publish(sec, USER_A, f"{api}.STREAM.MSG.GET.{bus.INTENTS}"),
        await refused_publish(
            sec, USER_A, f"{api}.DIRECT.GET.{bus.SERVER}.driftbus.server.{tc}.=.ConfigMap.ns.x"
        ),
        await refused_publish(sec, USER_A, f"{api}.STREAM.DELETE.{bus.BUNDLES}"),
        # checkpoints: every tenant's objects, and what plans read (only planners write them)
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.CHECKPOINTS}"),
        await refused_publish(sec, USER_A, f"driftbus.checkpoint.{tc}.0"),
        # it stores big bundles but cannot read stored objects back (a consumer on the store)
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{permissions.OBJ}"),
        # the tenant policy
        await refused_publish(sec, USER_A, KV_POLICY),
        await refused_publish(sec, USER_A, f"{api}.STREAM.CREATE.{bus.TENANTS_STREAM}"),
        await refused_publish(sec, USER_A, f"{api}.STREAM.DELETE.{bus.TENANTS_STREAM}"),
        await refused_publish(sec, USER_A, f"{api}.STREAM.PURGE.{bus.TENANTS_STREAM}"),
    ]
    print("\n".join(refusals))
    assert len(refusals) == 39


async def test_only_the_admin_writes_the_tenant_policy(sec: TenantBus) -> None:
    errors: list[str] = []
    root = await sec.connect("root", errors)
    try:
        # everything nats-py's KV client does with the policy: open, put, get, update, history
        js = root.jetstream(timeout=5)
        kv = await js.key_value(bus.TENANTS_BUCKET)
        first = await kv.put(bus.TENANTS_KEY, b"policy-1")
        assert (await kv.get(bus.TENANTS_KEY)).value == b"policy-1"
        await kv.update(bus.TENANTS_KEY, b"policy-2", last=first)
        assert [e.value for e in await kv.history(bus.TENANTS_KEY)][-2:] == [
            b"policy-1",
            b"policy-2",
        ]
        assert not errors, errors

        # a tenant's and a platform user's puts are refused by the server ...
        refusals = [
            await refused_publish(sec, USER_A, KV_POLICY),
            await refused_publish(sec, "platform", KV_POLICY),
            await refused_publish(sec, "platform", f"$JS.API.STREAM.CREATE.{bus.TENANTS_STREAM}"),
        ]
        # ... while reading the limits in force is allowed (driftbus plan checks against them)
        for who in (USER_A, "platform"):
            theirs: list[str] = []
            nc = await sec.connect(who, theirs)
            try:
                read = await nc.jetstream(timeout=5).key_value(bus.TENANTS_BUCKET)
                assert (await read.get(bus.TENANTS_KEY)).value == b"policy-2"
                assert not theirs, theirs
            finally:
                await nc.close()
        print("\n".join(refusals))

        # the policy is what the admin wrote: none of the refused writes landed
        assert (await kv.get(bus.TENANTS_KEY)).value == b"policy-2"
        assert not errors, errors
    finally:
        await root.close()


async def test_only_the_admin_records_the_tenants_nats_clusters(sec: TenantBus) -> None:
    """Issue 41 item 8: the clusters of each tenant's publisher, recorded beside the policy
    (``nats-config --record``), are what the rollout driver holds a tenant's fleet to: only
    the admin writes them, the planner (the driver) reads them."""
    errors: list[str] = []
    root = await sec.connect("root", errors)
    planner = await sec.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
    record = TenantCredentials(tenants={TENANT_A: (C,), TENANT_B: (C,)})
    subject = f"$KV.{bus.TENANTS_BUCKET}.{policy.CREDENTIALS_KEY}"
    try:
        await policy.put_credentials(root.jetstream(timeout=5), record)
        refusals = [await refused_publish(sec, who, subject) for who in (USER_A, "platform")]
        print("\n".join(refusals))
        follower = bus.Follower(planner.jetstream(timeout=5), bus.TENANTS_STREAM, subject)
        seen = [policy.credentials_of(m) async for m in follower.snapshot(timeout=5)]
        assert seen == [record]
        assert not errors, errors
    finally:
        await root.close()
        await planner.close()


async def test_a_tenant_publishes_its_own_fleet_bundles_and_reads_its_own_rollouts(
    sec: TenantBus,
) -> None:
    """What the fleet commands take, each as its identity: a watcher registers its cluster, the
    admin labels one, the planner records two tenants' rollouts; team-a then publishes a fleet
    bundle, lists the clusters and reads its own rollout's state and history."""
    errors: list[str] = []
    watcher = await sec.connect(f"watcher-{C}", errors, inbox_prefix=bus.inbox_prefix("watcher", C))
    root = await sec.connect("root", errors)
    planner = await sec.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
    nc = await sec.connect(USER_A, errors)
    try:
        registry = await watcher.jetstream(timeout=5).key_value(bus.CLUSTERS_BUCKET)
        await registry.create(cluster_registry_key(C), msgspec.json.encode(ClusterRecord(name=C)))
        labelled = msgspec.json.encode(ClusterRecord(name=OTHER, labels={"env": "dev"}))
        await (await root.jetstream(timeout=5).key_value(bus.CLUSTERS_BUCKET)).put(
            cluster_registry_key(OTHER), labelled
        )
        pjs = planner.jetstream(timeout=5)
        rollouts = await pjs.key_value(bus.ROLLOUTS_BUCKET)
        for bundle in ("team-a/web", "team-b/web"):
            await rollouts.put(rollout_key(bundle), f"state of {bundle}".encode())
            await pjs.publish(rollout_event_subject(bundle), f"event of {bundle}".encode())
            # its placement's status in a cluster not among the tenant's own credentials'
            await pjs.publish(bundle_status_subject(OTHER, bundle), f"status of {bundle}".encode())

        js = nc.jetstream(timeout=5)
        ack = await js.publish(fleet_subject("team-a/web"), b"fleet-r1")
        assert ack.stream == bus.FLEET
        clusters = await js.key_value(bus.CLUSTERS_BUCKET)
        assert sorted(await clusters.keys()) == sorted([C, OTHER])  # driftbus clusters
        assert (await clusters.get(cluster_registry_key(OTHER))).value == labelled
        mine = await js.key_value(bus.ROLLOUTS_BUCKET)
        assert (await mine.get(rollout_key("team-a/web"))).value == b"state of team-a/web"
        history = await js.pull_subscribe(rollout_event_subject("team-a/web"), stream=bus.ROLLOUTS)
        [event] = await history.fetch(1, timeout=5)
        assert event.data == b"event of team-a/web"
        await event.ack()
        await history.unsubscribe()
        # rollout status: its own bundle's summary status in every cluster of the fleet
        status = await bus.last_message(js, bus.STATUS, bundle_status_subject(OTHER, "team-a/web"))
        assert status is not None
        assert status.data == b"status of team-a/web"
        assert not errors, errors  # nothing of the above was refused

        # the fleet bundle is stored: read back by the planner, and by the tenant (undo)
        last = await bus.last_message(pjs, bus.FLEET, fleet_subject("team-a/web"))
        assert last is not None
        assert last.data == b"fleet-r1"
        revisions = await js.pull_subscribe(fleet_subject("team-a/web"), stream=bus.FLEET)
        assert [m.data for m in await revisions.fetch(1, timeout=5)] == [b"fleet-r1"]
        await revisions.unsubscribe()
        assert not errors, errors
    finally:
        for c in (watcher, root, planner, nc):
            await c.close()


async def test_a_tenant_is_refused_every_fleet_and_rollout_not_its_own(sec: TenantBus) -> None:
    api = "$JS.API"
    kv_rollouts, kv_clusters = grants.KV_ROLLOUTS, grants.KV_CLUSTERS
    rollouts = bus.ROLLOUTS_STREAM
    theirs = f"{kv_rollouts}.{rollout_key('team-b/web')}"
    refusals = [
        # another tenant's and platform fleet bundles
        await refused_publish(sec, USER_A, fleet_subject("team-b/x")),
        await refused_publish(sec, USER_A, fleet_subject("web")),
        await refused_publish(sec, USER_A, fleet_subject(TENANT_A)),  # platform, named so
        # the cluster registry: no entry, not even of a cluster it may use
        await refused_publish(sec, USER_A, f"{kv_clusters}.{cluster_registry_key(C)}"),
        await refused_publish(sec, USER_A, f"{kv_clusters}.{cluster_registry_key('new')}"),
        await refused_publish(sec, USER_A, f"{api}.STREAM.PURGE.{bus.CLUSTERS_STREAM}"),
        # rollouts: no write, not even its own (the driver's); no other tenant's read
        await refused_publish(sec, USER_A, f"{kv_rollouts}.{rollout_key('team-a/web')}"),
        await refused_publish(sec, USER_A, theirs),
        await refused_publish(sec, USER_A, f"{api}.DIRECT.GET.{rollouts}.{theirs}"),
        await refused_publish(sec, USER_A, f"{api}.DIRECT.GET.{rollouts}"),  # by sequence
        await refused_publish(sec, USER_A, f"{api}.STREAM.MSG.GET.{rollouts}"),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{rollouts}"),  # kv.watch
        await refused_publish(
            sec,
            USER_A,
            f"{api}.CONSUMER.CREATE.{bus.ROLLOUTS}.h.{rollout_event_subject('team-b/web')}",
        ),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.ROLLOUTS}"),
        await refused_publish(sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.FLEET}"),
        # another tenant's status in a cluster of a fleet
        await refused_publish(
            sec,
            USER_A,
            f"{api}.DIRECT.GET.{bus.STATUS}.{bundle_status_subject(OTHER, 'team-b/web')}",
        ),
        await refused_publish(
            sec, USER_A, f"{api}.CONSUMER.CREATE.{bus.FLEET}.h.{fleet_subject('team-b/x')}"
        ),
        await refused_subscribe(sec, USER_A, rollout_event_subject("team-b/web")),
        await refused_subscribe(sec, USER_A, "driftbus.rollout.>"),
        await refused_publish(sec, USER_A, rollout_event_subject("team-a/web")),
        # a watcher registers its own cluster only; a platform user publishes no fleet bundle
        await refused_publish(sec, f"watcher-{C}", f"{kv_clusters}.{cluster_registry_key(OTHER)}"),
        await refused_publish(sec, "platform", fleet_subject("web")),
        await refused_publish(sec, "platform", f"{kv_clusters}.{cluster_registry_key(C)}"),
    ]
    print("\n".join(refusals))
    assert len(refusals) == 23


def test_nats_config_flags_generate_a_configuration_nats_server_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    security.add_parser(parser.add_subparsers())
    flags = [
        "nats-config",
        "--cluster",
        C,
        "--cluster",
        OTHER,
        "--user",
        f"platform={C}",
        "--tenant",
        f"{TENANT_A}={C},{OTHER}",
        "--tenant",
        f"{TENANT_B}={C}",
        "--admin",
        "root",
    ]
    args = parser.parse_args(flags)
    assert args.func(args) == 0
    conf = capsys.readouterr().out
    assert f"--tenant {TENANT_A}={C},{OTHER} --tenant {TENANT_B}={C} --admin root`" in conf
    for name in (USER_A, USER_B, "root", "platform"):
        assert f'user: "{name}"' in conf
    assert tenant_bundle_filter(OTHER, TENANT_A) in conf
    (tmp_path / "auth.conf").write_text(conf)
    args = parser.parse_args([*flags, "--passwords"])  # the .env nats-server reads them from
    assert args.func(args) == 0
    env = dict(line.split("=", 1) for line in capsys.readouterr().out.splitlines())
    assert "DRIFTBUS_NATS_PASSWORD_TENANT_TEAM_A" in env
    assert "DRIFTBUS_NATS_PASSWORD_ROOT" in env
    check = subprocess.run(
        [str(assets.ensure("nats-server")), "-c", "auth.conf", "-t"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
