"""The permission sets of tenancy (issue 20) and fleets (issue 31), checked subject by subject
with NATS's wildcard rules: a tenant's publisher touches only its own bundles, fleet bundles,
rollouts and status, the platform's and every other tenant's are out of its reach whatever their
names; only the admin writes the tenant policy; only the admin, the planner and a cluster's own
watcher write that cluster's registry entry. tests/integration/test_tenant_credentials.py has
nats-server itself refuse them."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import (
    ROLLOUT_DRIVER_KEY,
    ObjectKey,
    bundle_status_subject,
    bundle_statuses_filter,
    bundle_subject,
    cluster_filter,
    cluster_registry_key,
    family_filter,
    fleet_subject,
    object_status_subject,
    object_subject,
    rollout_control_subject,
    rollout_event_subject,
    rollout_key,
    source_status_subject,
    tenant_status_filter,
)
from services.access import grants, permissions
from services.cli import security
from services.common import bus
from tests.unit.test_subjects import TEAM_A_BUNDLES, _matches

KEY = ObjectKey("apps", "Deployment", "ns", "web")
TENANTS_STREAM = bus.TENANTS_STREAM
KV_POLICY = f"$KV.{bus.TENANTS_BUCKET}.{bus.TENANTS_KEY}"
# what nats-py's KV client sends for the policy (nats/js/client.py, kv.py, manager.py)
POLICY_API = [
    f"$JS.API.STREAM.INFO.{TENANTS_STREAM}",  # js.key_value
    f"$JS.API.STREAM.CREATE.{TENANTS_STREAM}",  # js.create_key_value
    f"$JS.API.STREAM.MSG.GET.{TENANTS_STREAM}",  # kv.get (the bucket is not a direct one)
    f"$JS.API.DIRECT.GET.{TENANTS_STREAM}.{KV_POLICY}",  # kv.get of a direct bucket
    f"$JS.API.CONSUMER.CREATE.{TENANTS_STREAM}",  # kv.history, kv.watch
    KV_POLICY,  # kv.put, create, update, delete
]
POLICY_READ = POLICY_API[0::2][:2]  # stream info and the message get: what read_policy takes
POLICY_WRITE = [s for s in POLICY_API if s not in POLICY_READ]


def _covers(pattern: str, subscription: str) -> bool:
    """Whether every subject ``subscription`` (itself possibly a wildcard) matches is matched by
    ``pattern``: what nats-server requires of a subscription to allow it."""
    p, s = pattern.split("."), subscription.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or s[i] == ">" or (token != "*" and (s[i] == "*" or token != s[i])):
            return False
    return len(p) == len(s)


def may_publish(perms: permissions.Permissions, subject: str) -> bool:
    return any(_matches(p, subject) for p in perms.publish)


def may_subscribe(perms: permissions.Permissions, subscription: str) -> bool:
    return any(_covers(p, subscription) for p in perms.subscribe)


def test_the_matchers_follow_nats_wildcards() -> None:
    assert _matches("a.*.c", "a.b.c")
    assert not _matches("a.*.c", "a.b.c.d")
    assert _matches("a.>", "a.b.c")
    assert not _matches("a.>", "a")
    assert _covers("a.>", "a.*.c")
    assert _covers("a.*.c", "a.b.c")
    assert not _covers("a.b.>", "a.>")
    assert not _covers("a.b.>", "a.*.c")
    assert not _covers("a.*", "a.>")


def _status_subjects(cluster: str, bundle: str) -> list[str]:
    return [
        bundle_status_subject(cluster, bundle),
        object_status_subject(cluster, bundle, KEY),
        source_status_subject(cluster, bundle),
    ]


@pytest.mark.parametrize(("bundle", "mine"), TEAM_A_BUNDLES)
def test_a_tenant_publishes_and_reads_only_its_own_bundles(bundle: str, mine: bool) -> None:
    perms = permissions.tenant("team-a", ["c", "d"])
    for cluster in ("c", "d"):
        assert may_publish(perms, bundle_subject(cluster, bundle)) is mine
        for subject in _status_subjects(cluster, bundle):
            assert may_subscribe(perms, subject) is mine
            assert not may_publish(perms, subject)  # status is the planner's and appliers'
    # nothing in a cluster not listed for it
    assert not may_publish(perms, bundle_subject("e", bundle))
    assert not any(may_subscribe(perms, s) for s in _status_subjects("e", bundle))


def test_a_tenant_may_not_subscribe_more_than_its_own_status() -> None:
    perms = permissions.tenant("team-a", ["c"])
    assert may_subscribe(perms, tenant_status_filter("c", "team-a"))
    for subscription in (
        tenant_status_filter("c", "team-b"),
        tenant_status_filter("d", "team-a"),
        family_filter("status"),
        cluster_filter("status", "c"),
        bundle_statuses_filter("c"),
        "driftbus.status.c.*.web.bundle",
        "driftbus.>",
        ">",
        family_filter("bundle"),
        family_filter("intent"),
        family_filter("decision"),
        family_filter("server"),
        f"{bus.inbox_prefix('planner')}.>",
    ):
        assert not may_subscribe(perms, subscription), subscription
    # replies arrive on the default inbox of the CLI; besides, only its own rollouts' events
    others = [s for s in perms.subscribe if not s.startswith("driftbus.status.")]
    assert others == ["driftbus.rollout.team-a.*", "_INBOX.>"]


def test_a_tenant_reads_none_of_the_services_streams_nor_writes_the_policy() -> None:
    perms = permissions.tenant("team-a", ["c"])
    for subject in (
        object_subject("intent", "c", KEY),
        object_subject("server", "c", KEY),
        object_subject("applied", "c", KEY),
        object_subject("decision", "c", KEY),
        *(f"$JS.API.CONSUMER.CREATE.{s}" for s in permissions.ALL_STREAMS),
        *(f"$JS.API.STREAM.MSG.GET.{s}" for s in permissions.ALL_STREAMS),
        *(f"$JS.API.DIRECT.GET.{s}.{bundle_subject('c', 'team-b/web')}" for s in [bus.BUNDLES]),
        f"$JS.API.DIRECT.GET.{bus.SERVER}.{object_subject('server', 'c', KEY)}",
        f"$JS.API.STREAM.DELETE.{bus.BUNDLES}",
        f"$JS.API.CONSUMER.CREATE.{permissions.OBJ}",  # reading stored manifests back
        *POLICY_WRITE,
        f"$JS.API.STREAM.PURGE.{TENANTS_STREAM}",
        f"$JS.API.STREAM.DELETE.{TENANTS_STREAM}",
    ):
        assert not may_publish(perms, subject), subject


tenant_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
bundle_names = st.from_regex(r"[A-Za-z0-9]([-_.A-Za-z0-9]{0,10}[A-Za-z0-9])?", fullmatch=True)


@given(tenant_names, tenant_names, bundle_names)
def test_no_tenant_reaches_another_tenants_or_a_platform_bundle(
    mine: str, other: str, name: str
) -> None:
    perms = permissions.tenant(mine, ["c"])
    theirs = [f"{other}/{name}"] if other != mine else []
    for bundle in [*theirs, name, other]:  # other's, a platform bundle, one named like a tenant
        assert not may_publish(perms, bundle_subject("c", bundle)), bundle
        for subject in _status_subjects("c", bundle):
            assert not may_subscribe(perms, subject), subject
    assert may_publish(perms, bundle_subject("c", f"{mine}/{name}"))
    assert all(may_subscribe(perms, s) for s in _status_subjects("c", f"{mine}/{name}"))


def test_only_the_admins_write_the_tenant_policy() -> None:
    """The planner creates the bucket and follows the policy (``$JS.API.>``) but does not write
    it: its ``$KV`` rights are the shards bucket's."""
    users = permissions.fleet(
        ["c", "d"],
        {"platform": ["c", "d"]},
        sources={"gitops": ["c"]},
        tenants={"team-a": ["c"], "team-b": ["c", "d"]},
        admins=["root", "ops"],
    )
    writers = {u.name for u in users if may_publish(u.permissions, KV_POLICY)}
    assert writers == {"root", "ops"}
    for u in users:
        api = [s for s in POLICY_API if s != KV_POLICY]
        if u.name in ("root", "ops"):
            assert all(may_publish(u.permissions, s) for s in POLICY_API)
        elif u.name == "planner":
            assert all(may_publish(u.permissions, s) for s in api)
        elif u.name.startswith(("watcher-", "applier-")):
            assert not any(may_publish(u.permissions, s) for s in POLICY_API), u.name
        else:  # users, sources, tenants read the limits (plan checks against them)
            assert all(may_publish(u.permissions, s) for s in POLICY_READ), u.name
            assert not any(may_publish(u.permissions, s) for s in POLICY_WRITE), u.name


def test_an_admin_is_a_user_of_every_cluster() -> None:
    admin = permissions.admin()
    for bundle in ("web", "team-a/web", "team-b/x.y"):
        for cluster in ("c", "anything"):
            assert may_publish(admin, bundle_subject(cluster, bundle))
            assert all(may_subscribe(admin, s) for s in _status_subjects(cluster, bundle))
    assert may_subscribe(admin, family_filter("status"))
    user = permissions.user(["c"])
    for subject in user.publish:  # what a user of a cluster may, the admin may too
        assert may_publish(admin, subject.replace("*", "x").replace(">", "x")), subject
    for subject in (
        object_subject("intent", "c", KEY),
        f"$JS.API.STREAM.DELETE.{bus.BUNDLES}",
        f"$JS.API.CONSUMER.CREATE.{bus.INTENTS}",
        f"$KV.{bus.SHARDS_BUCKET}.clusters.c",
    ):
        assert not may_publish(admin, subject), subject


def test_the_platform_user_is_unchanged_and_reads_every_tenants_status() -> None:
    user = permissions.user(["c"])
    assert may_publish(user, bundle_subject("c", "team-a/web"))
    assert may_publish(user, bundle_subject("c", "web"))
    assert may_subscribe(user, cluster_filter("status", "c"))
    assert not may_publish(user, KV_POLICY)


def test_fleet_names_tenants_and_admins_and_refuses_bad_names() -> None:
    users = permissions.fleet(["c"], tenants={"team-a": ["c"]}, admins=["root"])
    by_name = {u.name: u for u in users}
    assert by_name["tenant-team-a"].permissions == permissions.tenant("team-a", ["c"])
    assert by_name["root"].permissions == permissions.admin()
    assert by_name["tenant-team-a"].password_env == "DRIFTBUS_NATS_PASSWORD_TENANT_TEAM_A"
    for bad in ("", "Team-A", "team_a", "team/a", "-a", "a" * 64):
        with pytest.raises(ValueError, match="DNS label"):
            permissions.tenant(bad, ["c"])
    with pytest.raises(ValueError, match="defined twice"):
        permissions.fleet(["c"], {"root": ["c"]}, admins=["root"])
    with pytest.raises(ValueError, match="defined twice"):
        permissions.fleet(["c"], {"tenant-a": ["c"]}, tenants={"a": ["c"]})


def _nats_config(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    security.add_parser(parser.add_subparsers())
    return parser.parse_args(["nats-config", "--cluster", "c", *flags])


def test_nats_config_takes_tenants_and_admins(capsys: pytest.CaptureFixture[str]) -> None:
    args = _nats_config("--user", "platform=c", "--tenant", "team-a=c", "--admin", "root")
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "# generated by `driftbus nats-config --cluster c --user platform=c --tenant team-a=c "
        "--admin root`"
    )
    expected = permissions.fleet(["c"], {"platform": ["c"]}, tenants={"team-a": ["c"]})
    expected += [permissions.NatsUser("root", permissions.admin())]
    assert out.split("\n", 1)[1] == permissions.authorization_conf(expected)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tenant", "team-a"], "expected NAME=CLUSTER"),
        (["--tenant", "Team_A=c"], "DNS label"),
        (["--admin", "planner"], "defined twice"),
    ],
)
def test_nats_config_refuses_bad_tenants_and_admins(flags: list[str], message: str) -> None:
    args = _nats_config(*flags)
    with pytest.raises(SystemExit, match=message):
        args.func(args)


# --- fleets (issue 31): the cluster registry, fleet bundles, rollouts ----------------------------

CLUSTERS, ROLLOUTS = bus.CLUSTERS_STREAM, bus.ROLLOUTS_STREAM


def _fleet_users() -> dict[str, permissions.Permissions]:
    users = permissions.fleet(
        ["c", "d"],
        {"platform": ["c", "d"]},
        sources={"gitops": ["c"]},
        tenants={"team-a": ["c"], "team-b": ["c", "d"]},
        admins=["root"],
    )
    return {u.name: u.permissions for u in users} | {
        "operator": permissions.operator(),
        "page": permissions.viewer(),
    }


def _kv_get(stream: str, kv: str, key: str) -> str:
    """What nats-py's ``kv.get(key)`` sends on a ``direct`` bucket."""
    return f"$JS.API.DIRECT.GET.{stream}.{kv}.{key}"


def test_every_identity_may_wait_for_every_stream_the_planner_makes() -> None:
    """Every role but the planner waits for the streams (``ensure_streams(manage=False)``: a
    stream info of each); one it may not ask about is a wait that never ends."""
    names = [c.name for c in bus.stream_configs()]
    assert {bus.FLEET, bus.ROLLOUTS} <= set(names)
    for who, perms in _fleet_users().items():
        for name in names:
            assert may_publish(perms, f"$JS.API.STREAM.INFO.{name}"), (who, name)


def test_only_the_admin_the_planner_and_its_own_watcher_write_a_clusters_entry() -> None:
    users = _fleet_users()
    for cluster in ("c", "d"):
        entry = f"{grants.KV_CLUSTERS}.{cluster_registry_key(cluster)}"
        writers = {who for who, perms in users.items() if may_publish(perms, entry)}
        assert writers == {"planner", f"watcher-{cluster}", "root", "operator"}, cluster
    # a cluster not in the deployment yet: only the admin (clusters label) and the planner
    entry = f"{grants.KV_CLUSTERS}.{cluster_registry_key('new')}"
    assert {w for w, p in users.items() if may_publish(p, entry)} == {"planner", "root", "operator"}
    for who in ("watcher-c", "tenant-team-a", "platform"):  # nor the bucket itself
        for subject in (
            f"$JS.API.STREAM.PURGE.{CLUSTERS}",
            f"$JS.API.STREAM.DELETE.{CLUSTERS}",
            f"$JS.API.STREAM.CREATE.{CLUSTERS}",
        ):
            assert not may_publish(users[who], subject), (who, subject)


def test_whoever_publishes_reads_the_registry_and_the_appliers_do_not() -> None:
    get = _kv_get(CLUSTERS, grants.KV_CLUSTERS, cluster_registry_key("d"))
    listing = f"$JS.API.CONSUMER.CREATE.{CLUSTERS}"  # kv.keys(), kv.watch()
    for who, perms in _fleet_users().items():
        if who.startswith("applier-"):
            assert not may_publish(perms, get), who
        else:  # a watcher by key only (its own entry, and any other); the rest list them too
            reads = (may_publish(perms, get), may_publish(perms, listing))
            assert reads == (True, not who.startswith("watcher-")), who


@given(tenant_names, tenant_names, bundle_names)
def test_a_tenant_publishes_only_its_own_fleet_bundles(mine: str, other: str, name: str) -> None:
    perms = permissions.tenant(mine, ["c"])
    revisions = f"$JS.API.CONSUMER.CREATE.{bus.FLEET}.h"  # + the filter: reading them back
    assert may_publish(perms, fleet_subject(f"{mine}/{name}"))
    assert may_publish(perms, f"{revisions}.{fleet_subject(f'{mine}/{name}')}")
    theirs = [f"{other}/{name}"] if other != mine else []
    for bundle in [*theirs, name, mine]:  # other's, a platform one, one named like the tenant
        assert not may_publish(perms, fleet_subject(bundle)), bundle
        assert not may_publish(perms, f"{revisions}.{fleet_subject(bundle)}"), bundle


@given(tenant_names, tenant_names, bundle_names)
def test_a_tenant_reads_its_own_rollouts_and_writes_none(mine: str, other: str, name: str) -> None:
    perms = permissions.tenant(mine, ["c"])
    own, platform = f"{mine}/{name}", name
    kv = grants.KV_ROLLOUTS
    assert may_publish(perms, _kv_get(ROLLOUTS, kv, rollout_key(own)))
    assert may_subscribe(perms, rollout_event_subject(own))
    events = f"$JS.API.CONSUMER.CREATE.{bus.ROLLOUTS}.history1.{rollout_event_subject(own)}"
    assert may_publish(perms, events)  # a pull consumer whose filter the server checks
    theirs = [f"{other}/{name}"] if other != mine else []
    for bundle in [*theirs, platform]:
        assert not may_publish(perms, _kv_get(ROLLOUTS, kv, rollout_key(bundle))), bundle
        assert not may_subscribe(perms, rollout_event_subject(bundle)), bundle
        filtered = f"$JS.API.CONSUMER.CREATE.{bus.ROLLOUTS}.h.{rollout_event_subject(bundle)}"
        assert not may_publish(perms, filtered), bundle
    for bundle in [own, *theirs, platform]:  # the states are the driver's
        assert not may_publish(perms, f"{kv}.{rollout_key(bundle)}"), bundle
        assert not may_publish(perms, rollout_control_subject(bundle, "pause")), bundle
    assert not may_publish(perms, f"{kv}.{ROLLOUT_DRIVER_KEY}")


def test_a_tenant_reads_no_rollout_but_its_own_by_any_other_way() -> None:
    perms = permissions.tenant("team-a", ["c"])
    for subject in (
        f"$JS.API.DIRECT.GET.{ROLLOUTS}",  # by sequence: any entry
        f"$JS.API.STREAM.MSG.GET.{ROLLOUTS}",
        f"$JS.API.CONSUMER.CREATE.{ROLLOUTS}",  # kv.watch, kv.keys: every tenant's
        f"$JS.API.DIRECT.GET.{ROLLOUTS}.{grants.KV_ROLLOUTS}.{ROLLOUT_DRIVER_KEY}",
        f"$JS.API.CONSUMER.CREATE.{bus.ROLLOUTS}",  # an unfiltered consumer on the events
        f"$JS.API.CONSUMER.CREATE.{bus.ROLLOUTS}.h.driftbus.rollout.>",
        f"$JS.API.CONSUMER.CREATE.{bus.FLEET}",
        f"$JS.API.DIRECT.GET.{bus.FLEET}.{fleet_subject('team-b/web')}",
        f"$JS.API.STREAM.MSG.GET.{bus.FLEET}",
        f"{grants.KV_CLUSTERS}.{cluster_registry_key('c')}",
    ):
        assert not may_publish(perms, subject), subject
    for subscription in ("driftbus.rollout.>", "driftbus.rollout.*.*", family_filter("fleet")):
        assert not may_subscribe(perms, subscription), subscription


def test_the_admin_steers_every_fleet_and_rollout_but_not_the_drivers_lease() -> None:
    admin = permissions.admin()
    kv = grants.KV_ROLLOUTS
    for bundle in ("web", "team-a/web", "team-b/x.y"):
        assert may_publish(admin, fleet_subject(bundle))
        for action in ("pause", "resume", "promote"):  # requests the driver applies
            assert may_publish(admin, rollout_control_subject(bundle, action))
        assert not may_publish(admin, f"{kv}.{rollout_key(bundle)}")  # the driver's to write
        assert may_publish(admin, _kv_get(ROLLOUTS, kv, rollout_key(bundle)))
        assert may_subscribe(admin, rollout_event_subject(bundle))
    assert may_subscribe(admin, family_filter("rollout"))
    assert may_publish(admin, f"$JS.API.CONSUMER.CREATE.{bus.ROLLOUTS}")  # rollout history
    assert not may_publish(admin, f"{kv}.{ROLLOUT_DRIVER_KEY}")
    assert not may_publish(admin, rollout_event_subject("web"))  # transitions are the driver's


def test_the_planner_drives_rollouts_and_places_fleet_revisions() -> None:
    planner = permissions.planner()
    kv = grants.KV_ROLLOUTS
    for subject in (
        f"{kv}.{rollout_key('team-a/web')}",
        f"{kv}.{ROLLOUT_DRIVER_KEY}",
        f"{grants.KV_CLUSTERS}.{cluster_registry_key('c')}",
        rollout_event_subject("team-a/web"),
        bundle_subject("c", "team-a/web"),  # a placement is an ordinary bundle
        f"$JS.API.STREAM.CREATE.{bus.FLEET}",
        f"$JS.API.STREAM.CREATE.{CLUSTERS}",
        f"$JS.API.CONSUMER.CREATE.{bus.FLEET}",
    ):
        assert may_publish(planner, subject), subject
    assert not may_publish(planner, fleet_subject("team-a/web"))  # users publish those


def test_users_and_sources_read_the_registry_but_publish_no_fleet_bundle() -> None:
    """A user's rights are per cluster, and a fleet subject names none: fleet bundles are the
    admin's and the tenants' (whose clusters the planner checks per placement)."""
    for perms in (permissions.user(["c"]), permissions.source(["c"])):
        for subject in (
            fleet_subject("web"),
            fleet_subject("team-a/web"),
            f"{grants.KV_CLUSTERS}.{cluster_registry_key('c')}",
            f"{grants.KV_ROLLOUTS}.{rollout_key('web')}",
        ):
            assert not may_publish(perms, subject), subject
