"""NATS permission sets per role, and the nats-server configuration that grants them.

Every process authenticates as one role and may touch only its own subjects (docs/security.md):

- ``watcher-<cluster>`` publishes only that cluster's server facts;
- ``applier-<cluster>`` consumes only that cluster's intents (its durable consumer, created on
  the filter-bearing API subject so the filter is enforced by the server) and publishes only that
  cluster's applied facts and status;
- ``planner`` owns the streams and reads everything (it serves every cluster), and writes
  its heartbeat and cluster claims to the shards KV bucket;
- a user (the platform team's) publishes bundles to, and reads status of, the clusters listed
  for them: every tenant's bundles and its own;
- a Git source (``driftbus source``) is such a user that may also publish its own
  ``driftbus.status.<cluster>.<bundle>.source`` status;
- ``tenant-<name>`` publishes only that tenant's bundles (``driftbus.bundle.<cluster>.<name>.*``)
  and reads only their status, in the clusters listed for it;
- an admin is a user of every cluster that also writes the tenant policy (the tenants KV
  bucket), which nobody else may (the planner creates the bucket and follows the policy
  through the JetStream API, but does not write it);
- ``notify`` (``driftbus notify``) reads the notification configurations, bundle statuses,
  decisions, rollout transitions and the cluster registry, and publishes nothing.

Of the configuration buckets (issue 34), the sync windows (``driftbus-windows``) are read by
every identity that reads status (users, sources, tenants, viewers) and by the planner (its
``$JS.API.>``), and written by the admin only; a notification configuration
(``driftbus-notify``) is written by the admin (any key) or by a tenant (its own key
``tenant.<tenant>`` only).

Of fleets (``schemas/fleet.py``), the planner writes the cluster registry and the rollouts
(the rollout driver beside it is their only writer); a watcher registers its own cluster only;
the admin publishes any fleet bundle, labels and removes clusters, and pauses, resumes and
promotes rollouts (control messages the driver applies); a tenant publishes its own fleet
bundles and reads its own rollouts; everyone who publishes may read the registry.

JetStream is reached through ``$JS.API.*`` request subjects, so the sets below name the API calls
each role makes (the blocks of ``grants.py``). Replies arrive on a per-role inbox
(``bus.inbox_prefix``) that nobody else may subscribe to. The same function produces the shipped
configuration (``deploy/``, ``compose``) and the one the tests run against, so what is
documented is what is tested.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from schemas.subjects import (
    cluster_filter,
    family_filter,
    member_filter,
    member_subject,
    source_status_filter,
    tenant_bundle_filter,
    tenant_control_filter,
    tenant_rollback_filter,
    tenant_status_filter,
)
from services.access import grants
from services.access.grants import JS, OBJ_SUBJECTS
from services.access.grants import OBJ as OBJ  # tests name the Object Store's stream by it
from services.common import bus
from services.core.manifest import TENANT_NAME

TENANT_USER_PREFIX = "tenant-"
"""A tenant's NATS user is ``tenant-<name>``."""


@dataclasses.dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class NatsUser:
    name: str
    permissions: Permissions
    password: str | None = None
    """A literal password (tests); None refers to an environment variable of nats-server."""

    @property
    def password_env(self) -> str:
        return "DRIFTBUS_NATS_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", self.name.upper())


# wildcards match whole tokens only, so each stream is named
ALL_STREAMS = (
    bus.BUNDLES,
    bus.SERVER,
    bus.APPLIED,
    bus.INTENTS,
    bus.STATUS,
    bus.DECISIONS,
    bus.OUTCOMES,
    bus.MEMBERS,
    bus.CONTROL,
    bus.FLEET,
    bus.ROLLOUTS,
    bus.CHECKPOINTS,
)
STREAM_INFO = tuple(f"{JS}.STREAM.INFO.{s}" for s in ALL_STREAMS)


def watcher(cluster: str) -> Permissions:
    return Permissions(
        publish=(
            cluster_filter("server", cluster),
            member_subject(cluster, "watcher"),
            *STREAM_INFO,
            # its seed: the cluster's checkpoint and the SERVER facts after it (stored/facts.py)
            *grants.read_streams(bus.BUNDLES, bus.SERVER, bus.CHECKPOINTS),
            *grants.object_store_read(),
            *grants.registry_entry(cluster),
        ),
        subscribe=(f"{bus.inbox_prefix('watcher', cluster)}.>",),
    )


def applier(cluster: str) -> Permissions:
    consumer = bus.intent_consumer_name(cluster)
    intents = bus.INTENTS
    return Permissions(
        publish=(
            cluster_filter("applied", cluster),
            cluster_filter("status", cluster),
            cluster_filter("outcome", cluster),
            member_subject(cluster, "applier"),
            *STREAM_INFO,
            f"{JS}.CONSUMER.CREATE.{intents}.{consumer}.{cluster_filter('intent', cluster)}",
            f"{JS}.CONSUMER.INFO.{intents}.{consumer}",
            f"{JS}.CONSUMER.MSG.NEXT.{intents}.{consumer}",
            f"$JS.ACK.{intents}.{consumer}.>",
            f"{JS}.DIRECT.GET.{intents}.{cluster_filter('intent', cluster)}",
            # the planner claim on the cluster: its revision fences off deposed planners
            f"{JS}.DIRECT.GET.{bus.SHARDS_STREAM}.{bus.claim_subject(cluster)}",
        ),
        # its inbox, and the claim's writes as they happen (they only say "read it again")
        subscribe=(f"{bus.inbox_prefix('applier', cluster)}.>", bus.claim_subject(cluster)),
    )


def planner() -> Permissions:
    return Permissions(
        publish=(
            family_filter("intent"),
            family_filter("status"),
            family_filter("decision"),
            family_filter("checkpoint"),
            f"{JS}.>",  # it creates and updates the streams and the object store bucket
            f"$KV.{bus.SHARDS_BUCKET}.>",  # heartbeats and cluster claims
            *grants.fleet_planner(),  # the cluster registry, rollouts
            "$JS.FC.>",
            "$JS.ACK.>",
            family_filter("bundle"),  # a rollback republishes an earlier revision
            "_INBOX.>",  # the answer to a rollback request
        ),
        subscribe=(f"{bus.inbox_prefix('planner')}.>", family_filter("rollback")),
    )


def user(clusters: Iterable[str]) -> Permissions:
    """The platform team's user: every bundle (every tenant's too) and all status of these
    clusters."""
    clusters = list(clusters)
    return Permissions(
        publish=(
            *(cluster_filter("bundle", c) for c in clusters),
            *(cluster_filter("control", c) for c in clusters),
            *(cluster_filter("rollback", c) for c in clusters),
            *STREAM_INFO,
            # big bundles go to the Object Store; its digest is checked against the bundle
            # message (which only the cluster's users may publish), so a user can spoil but not
            # forge another's stored manifests
            f"{OBJ_SUBJECTS}.C.>",
            f"{OBJ_SUBJECTS}.M.>",
            f"{JS}.STREAM.PURGE.{OBJ}",
            *grants.object_store_read(),
            # is anybody serving the cluster? (publish warns when not)
            *(f"{JS}.DIRECT.GET.{bus.MEMBERS}.{member_filter(c)}" for c in clusters),
            *grants.policy_read(),
            *grants.registry_read(),
            *grants.windows_read(),
        ),
        subscribe=(*(cluster_filter("status", c) for c in clusters), "_INBOX.>"),
    )


def tenant(tenant: str, clusters: Iterable[str]) -> Permissions:
    """A tenant's publisher: that tenant's bundles of these clusters and their status, nothing
    of another tenant's or of the platform's (whose bundles' tenant token is ``=``, which no
    tenant name encodes to). Of the Object Store it gets what a put takes, not the consumers
    that read objects back (only the planner and the watchers read manifests)."""
    if not TENANT_NAME.match(tenant):
        raise ValueError(
            f"tenant {tenant!r} must be a DNS label (≤ 63 characters, lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)"
        )
    clusters = list(clusters)
    return Permissions(
        publish=(
            *(tenant_bundle_filter(c, tenant) for c in clusters),
            *(tenant_control_filter(c, tenant) for c in clusters),
            *(tenant_rollback_filter(c, tenant) for c in clusters),
            *STREAM_INFO,
            *grants.object_store_put(),
            # is anybody serving the cluster? (publish warns when not)
            *(f"{JS}.DIRECT.GET.{bus.MEMBERS}.{member_filter(c)}" for c in clusters),
            *grants.policy_read(),
            *grants.tenant_fleet(tenant),
            *grants.windows_read(),
            *grants.notify_tenant(tenant),
        ),
        subscribe=(
            *(tenant_status_filter(c, tenant) for c in clusters),
            grants.tenant_rollout_events(tenant),
            "_INBOX.>",
        ),
    )


def admin() -> Permissions:
    """The platform admin: a user of every cluster (every bundle, all status) who also writes
    and reads the tenant policy (the only identity that may), publishes any fleet bundle,
    labels and removes clusters, and pauses, resumes and promotes rollouts."""
    return Permissions(
        publish=(
            family_filter("bundle"),
            family_filter("control"),
            family_filter("rollback"),
            *STREAM_INFO,
            f"{OBJ_SUBJECTS}.C.>",
            f"{OBJ_SUBJECTS}.M.>",
            f"{JS}.STREAM.PURGE.{OBJ}",
            *grants.object_store_read(),
            f"{JS}.DIRECT.GET.{bus.MEMBERS}.{family_filter('member')}",
            *grants.tenants_bucket(),
            *grants.fleet_admin(),
            *grants.windows_admin(),
            *grants.notify_admin(),
        ),
        subscribe=(family_filter("status"), family_filter("rollout"), "_INBOX.>"),
    )


UI_INBOX = bus.inbox_prefix("ui")
"""Where the status page's replies arrive (``driftbus ui`` connects with it)."""


def viewer() -> Permissions:
    """Reads what ``driftbus status``, ``why``, ``bundles`` and the status page show: every
    stream but the intents (whose consumer it may only ask how much is pending), the Object
    Store, the tenant policy, the cluster registry and the rollouts; publishes nothing but those
    reads. The identity ``driftbus up`` gives its status page; replies on the page's own
    inbox."""
    kv = [bus.SHARDS_STREAM, bus.CLUSTERS_STREAM, bus.ROLLOUTS_STREAM]
    streams = [s for s in ALL_STREAMS if s != bus.INTENTS] + kv
    gets = [f"{JS}.DIRECT.GET.{s}" for s in streams]
    gets += [f"{JS}.DIRECT.GET.{s}.>" for s in streams]
    gets += [f"{JS}.STREAM.MSG.GET.{s}" for s in streams]
    return Permissions(
        publish=(
            *STREAM_INFO,
            *(f"{JS}.STREAM.INFO.{s}" for s in kv),
            *grants.read_streams(*streams),
            *gets,
            f"{JS}.CONSUMER.INFO.{bus.INTENTS}.*",
            *grants.object_store_read(),
            *grants.policy_read(),
            *grants.windows_read(),
        ),
        subscribe=(f"{UI_INBOX}.>",),
    )


def operator() -> Permissions:
    """An admin who also reads what a viewer reads: the person who ran ``driftbus up``, whose
    commands (publish, status, why, plan, tenants…) find the stack through its context."""
    a, v = admin(), viewer()
    return Permissions(
        publish=tuple(dict.fromkeys([*a.publish, *v.publish])),
        subscribe=tuple(dict.fromkeys([*a.subscribe, *v.subscribe])),
    )


def source(clusters: Iterable[str]) -> Permissions:
    """``driftbus source``: a user of these clusters that also reports its own status (and only
    that: not a bundle's or an object's, which the planner and appliers own)."""
    clusters = list(clusters)
    base = user(clusters)
    return Permissions(
        publish=(*base.publish, *(source_status_filter(c) for c in clusters)),
        subscribe=base.subscribe,
    )


NOTIFY_INBOX = bus.inbox_prefix("notify")
"""Where ``driftbus notify``'s replies arrive."""


def notify() -> Permissions:
    """``driftbus notify``: reads what it tells of (every configuration, every bundle's status,
    decisions, rollouts, the registry); sends nothing on the bus."""
    return Permissions(
        publish=(*STREAM_INFO, *grants.notify_service()),
        subscribe=(f"{NOTIFY_INBOX}.>",),
    )


def fleet(
    clusters: Iterable[str],
    users: Mapping[str, Iterable[str]] = {},
    passwords: Mapping[str, str] | None = None,
    sources: Mapping[str, Iterable[str]] = {},
    tenants: Mapping[str, Iterable[str]] = {},
    admins: Iterable[str] = (),
    notifiers: Iterable[str] = (),
) -> list[NatsUser]:
    """Every identity of a deployment: a planner, a watcher and an applier per cluster, the
    given users and Git sources (name → clusters), a ``tenant-<name>`` publisher per tenant
    (tenant name → clusters), the admins and the ``driftbus notify`` services (names).
    ``passwords`` (name → password) inlines
    them (tests). A name given twice is a ValueError (nats-server refuses a duplicate user)."""
    clusters = list(clusters)
    entries = [("planner", planner())]
    for c in clusters:
        entries += [(f"watcher-{c}", watcher(c)), (f"applier-{c}", applier(c))]
    entries += [(name, user(cs)) for name, cs in users.items()]
    entries += [(name, source(cs)) for name, cs in sources.items()]
    entries += [(TENANT_USER_PREFIX + name, tenant(name, cs)) for name, cs in tenants.items()]
    entries += [(name, admin()) for name in admins]
    entries += [(name, notify()) for name in notifiers]
    seen: set[str] = set()
    for name, _ in entries:
        if name in seen:
            raise ValueError(f"NATS user {name!r} is defined twice")
        seen.add(name)
    pw = passwords or {}
    return [NatsUser(name, p, pw.get(name)) for name, p in entries]


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


def authorization_conf(users: Iterable[NatsUser]) -> str:
    """The ``authorization`` block of a nats-server configuration for ``users``. Passwords not
    given literally are ``$DRIFTBUS_NATS_PASSWORD_<NAME>`` variables nats-server reads from its
    environment, so the file itself holds no secret."""
    lines = ["authorization {", "  users = ["]
    for u in users:
        password = _quote(u.password) if u.password is not None else f"${u.password_env}"
        lines += [
            "    {",
            f"      user: {_quote(u.name)}",
            f"      password: {password}",
            "      permissions: {",
            f"        publish: {{ allow: {_list(u.permissions.publish)} }}",
            f"        subscribe: {{ allow: {_list(u.permissions.subscribe)} }}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
