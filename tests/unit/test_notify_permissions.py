"""NATS permissions of the configuration buckets (issue 34): the notify service reads what it
follows and writes nothing; a tenant writes only its own notification configuration; the sync
windows are read by status readers and the planner, written by the admin only."""

from __future__ import annotations

import pytest

from services.access import grants, permissions
from services.common import bus
from tests.unit.test_tenant_permissions import may_publish, may_subscribe

JS = "$JS.API"
NOTIFY = f"KV_{bus.NOTIFY_BUCKET}"
WINDOWS = f"KV_{bus.WINDOWS_BUCKET}"
KEY_A = f"$KV.{bus.NOTIFY_BUCKET}.tenant.team-a"
KEY_B = f"$KV.{bus.NOTIFY_BUCKET}.tenant.team-b"
PLATFORM = f"$KV.{bus.NOTIFY_BUCKET}.platform"
WINDOWS_KEY = f"$KV.{bus.WINDOWS_BUCKET}.{bus.WINDOWS_KEY}"


def users() -> dict[str, permissions.Permissions]:
    fleet = permissions.fleet(
        ["c"],
        {"platform": ["c"]},
        sources={"gitops": ["c"]},
        tenants={"team-a": ["c"], "team-b": ["c"]},
        admins=["root"],
        notifiers=["notify"],
    )
    return {u.name: u.permissions for u in fleet} | {
        "page": permissions.viewer(),
        "operator": permissions.operator(),
    }


def test_the_notify_service_reads_what_it_follows() -> None:
    n = users()["notify"]
    for stream in (NOTIFY, bus.STATUS, bus.DECISIONS, bus.ROLLOUTS):
        assert may_publish(n, f"{JS}.CONSUMER.CREATE.{stream}"), stream
        assert may_publish(n, f"{JS}.CONSUMER.INFO.{stream}.x"), stream
    for c in bus.stream_configs():
        assert may_publish(n, f"{JS}.STREAM.INFO.{c.name}")  # it waits for the streams
    assert may_publish(n, f"{JS}.STREAM.INFO.{NOTIFY}")
    # a cluster's labels, for clusterSelector
    assert may_publish(n, f"{JS}.DIRECT.GET.{bus.CLUSTERS_STREAM}.$KV.{bus.CLUSTERS_BUCKET}.prod-1")
    assert may_subscribe(n, f"{permissions.NOTIFY_INBOX}.abc")
    assert not may_subscribe(n, "_INBOX.abc")


def test_the_notify_service_uses_only_its_own_durable_consumers() -> None:
    """(issue 41) its replicas share one durable consumer per stream: created with its own
    name and filter, read and acknowledged; no other consumer, no other filter."""
    n = users()["notify"]
    for stream, (name, subject) in bus.NOTIFY_CONSUMERS.items():
        assert may_publish(n, f"{JS}.CONSUMER.CREATE.{stream}.{name}.{subject}"), stream
        assert may_publish(n, f"{JS}.CONSUMER.MSG.NEXT.{stream}.{name}"), stream
        assert may_publish(n, f"$JS.ACK.{stream}.{name}.1.2.3.4.5"), stream
        assert not may_publish(n, f"{JS}.CONSUMER.CREATE.{stream}.{name}.driftbus.>"), stream
        assert not may_publish(n, f"{JS}.CONSUMER.MSG.NEXT.{stream}.other"), stream
        assert not may_publish(n, f"$JS.ACK.{stream}.other.1.2.3.4.5"), stream
    name = bus.intent_consumer_name("c")
    assert not may_publish(n, f"{JS}.CONSUMER.MSG.NEXT.{bus.INTENTS}.{name}")
    assert not may_publish(n, f"$JS.ACK.{bus.INTENTS}.{name}.1.2.3.4.5")


@pytest.mark.parametrize(
    "subject",
    [
        PLATFORM,
        KEY_A,
        "driftbus.bundle.c.=.web",
        "driftbus.status.c.=.web.bundle",
        "driftbus.decision.c.x.y.z.w",
        f"{JS}.STREAM.CREATE.{NOTIFY}",
        f"{JS}.STREAM.DELETE.{bus.STATUS}",
        WINDOWS_KEY,
    ],
)
def test_the_notify_service_writes_nothing(subject: str) -> None:
    assert not may_publish(users()["notify"], subject)


def test_a_tenant_writes_and_reads_only_its_own_notification_configuration() -> None:
    a = users()["tenant-team-a"]
    assert may_publish(a, KEY_A)
    assert may_publish(a, f"{JS}.STREAM.INFO.{NOTIFY}")
    assert may_publish(a, f"{JS}.DIRECT.GET.{NOTIFY}.{KEY_A}")
    for other in (KEY_B, PLATFORM, f"$KV.{bus.NOTIFY_BUCKET}.tenant.team-a-2"):
        assert not may_publish(a, other), other
        assert not may_publish(a, f"{JS}.DIRECT.GET.{NOTIFY}.{other}"), other
    # no read that is not pinned to its key: a message get or a consumer reads any tenant's
    assert not may_publish(a, f"{JS}.STREAM.MSG.GET.{NOTIFY}")
    assert not may_publish(a, f"{JS}.DIRECT.GET.{NOTIFY}")
    assert not may_publish(a, f"{JS}.CONSUMER.CREATE.{NOTIFY}")
    assert grants.notify_key("team-a") == KEY_A


@pytest.mark.parametrize("who", ["platform", "gitops", "page"])
def test_others_write_no_notification_configuration(who: str) -> None:
    for key in (PLATFORM, KEY_A):
        assert not may_publish(users()[who], key), (who, key)


@pytest.mark.parametrize("who", ["root", "operator"])
def test_the_admin_writes_and_reads_every_notification_configuration(who: str) -> None:
    admin = users()[who]
    for key in (PLATFORM, KEY_A, KEY_B):
        assert may_publish(admin, key)
    for api in ("STREAM.INFO", "STREAM.MSG.GET", "CONSUMER.CREATE", "STREAM.CREATE"):
        assert may_publish(admin, f"{JS}.{api}.{NOTIFY}"), api


@pytest.mark.parametrize(
    "who", ["platform", "gitops", "tenant-team-a", "page", "root", "operator", "planner"]
)
def test_status_readers_and_the_planner_read_the_sync_windows(who: str) -> None:
    p = users()[who]
    assert may_publish(p, f"{JS}.STREAM.INFO.{WINDOWS}")
    assert may_publish(p, f"{JS}.STREAM.MSG.GET.{WINDOWS}")
    assert may_publish(p, f"{JS}.DIRECT.GET.{WINDOWS}.{WINDOWS_KEY}")


@pytest.mark.parametrize(
    "who", ["platform", "gitops", "tenant-team-a", "page", "planner", "watcher-c", "applier-c"]
)
def test_only_the_admin_writes_the_sync_windows(who: str) -> None:
    assert not may_publish(users()[who], WINDOWS_KEY)
    assert may_publish(users()["root"], WINDOWS_KEY)
    assert may_publish(users()["root"], f"{JS}.STREAM.CREATE.{WINDOWS}")


def test_a_deployment_without_notifiers_is_unchanged_by_them() -> None:
    names = [u.name for u in permissions.fleet(["c"], {"platform": ["c"]})]
    assert "notify" not in names
    with pytest.raises(ValueError, match="defined twice"):
        permissions.fleet(["c"], admins=["x"], notifiers=["x"])
