"""The permission sets of tenancy (issue 20), checked subject by subject with NATS's wildcard
rules: a tenant's publisher touches only its own bundles and their status, the platform's and
every other tenant's are out of its reach whatever their names, and only the admin and the
planner write the tenant policy. tests/integration/test_tenant_credentials.py has nats-server
itself refuse them."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import (
    ObjectKey,
    bundle_status_subject,
    bundle_statuses_filter,
    bundle_subject,
    cluster_filter,
    family_filter,
    object_status_subject,
    object_subject,
    source_status_subject,
    tenant_status_filter,
)
from services.cli import security
from services.common import bus, permissions
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
    # replies arrive on the default inbox of the CLI; nothing else outside driftbus.status
    assert [s for s in perms.subscribe if not s.startswith("driftbus.status.")] == ["_INBOX.>"]


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
