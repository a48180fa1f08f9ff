"""The building blocks of the NATS permission sets (``permissions.py`` composes them per role).

Each block names the subjects nats-py sends for one thing a role does — follow a stream, put to
or read the Object Store, read or write a KV bucket — so a role's set reads as what it does, and
the subjects one client call needs are written once. JetStream is reached through ``$JS.API.*``
request subjects, and NATS wildcards match whole tokens only, so streams are named one by one.

The fleet blocks (``schemas/fleet.py``, DESIGN §13) are what the cluster registry
(``driftbus-clusters``), fleet bundles (``driftbus.fleet.<tenant>.<name>``) and rollouts (the
``driftbus-rollouts`` bucket, ``driftbus.rollout.<tenant>.<name>`` events) take: a watcher
registers its own cluster only, the admin labels and removes any and pauses, resumes and promotes
any rollout, a tenant publishes its own fleet bundles and reads its own rollouts, and anyone who
publishes may read the registry.

The configuration blocks are the two buckets of issue 34: the sync windows
(``driftbus-windows``: read by whoever reads status, written by the admin) and the notification
configurations (``driftbus-notify``: the notify service reads every one, a tenant writes and
reads only its own key ``tenant.<tenant>``, the admin any).
"""

from __future__ import annotations

from schemas.subjects import (
    PREFIX,
    cluster_registry_key,
    encode_token,
    family_filter,
    tenant_fleet_filter,
)
from services.common import bus

JS = "$JS.API"
OBJ = f"OBJ_{bus.OBJECT_STORE_BUCKET}"
OBJ_SUBJECTS = f"$O.{bus.OBJECT_STORE_BUCKET}"
KV_TENANTS = f"$KV.{bus.TENANTS_BUCKET}"
KV_CLUSTERS = f"$KV.{bus.CLUSTERS_BUCKET}"
KV_ROLLOUTS = f"$KV.{bus.ROLLOUTS_BUCKET}"
KV_NOTIFY = f"$KV.{bus.NOTIFY_BUCKET}"
NOTIFY_STREAM = f"KV_{bus.NOTIFY_BUCKET}"
KV_WINDOWS = f"$KV.{bus.WINDOWS_BUCKET}"
WINDOWS_STREAM = f"KV_{bus.WINDOWS_BUCKET}"


def read_streams(*streams: str) -> list[str]:
    """What following a stream with an ordered consumer takes (nats-py creates those on the
    unfiltered API subject, so the filter cannot be pinned by permissions: see docs)."""
    out = []
    for s in streams:
        out += [
            f"{JS}.CONSUMER.CREATE.{s}",
            f"{JS}.CONSUMER.INFO.{s}.*",
            f"{JS}.CONSUMER.DELETE.{s}.*",
            f"$JS.FC.{s}.>",
        ]
    return out


def object_store_put() -> list[str]:
    """What ``ObjectStore.put`` of nats-py takes: the bucket's info, the object's current
    metadata (a stream message get by subject), its chunks and metadata, and purging the
    chunks it replaces. Big bundles go there; its digest is checked against the bundle message
    (which only the bundle's publishers may publish), so a publisher can spoil but not forge
    another's stored manifests."""
    return [
        f"{JS}.STREAM.INFO.{OBJ}",
        f"{JS}.STREAM.MSG.GET.{OBJ}",
        f"{OBJ_SUBJECTS}.C.>",
        f"{OBJ_SUBJECTS}.M.>",
        f"{JS}.STREAM.PURGE.{OBJ}",
    ]


def object_store_read() -> list[str]:
    return [
        f"{JS}.STREAM.INFO.{OBJ}",
        f"{JS}.DIRECT.GET.{OBJ}.{OBJ_SUBJECTS}.M.>",
        f"{JS}.STREAM.MSG.GET.{OBJ}",
        *read_streams(OBJ),
    ]


def policy_read() -> list[str]:
    """Reading the tenant policy in force (``policy.read_policy``: ``driftbus plan`` checks a
    revision against it before anything is published): the limits are no secret from those
    they bind. Writing it is the admin's alone."""
    s = bus.TENANTS_STREAM
    return [f"{JS}.STREAM.INFO.{s}", f"{JS}.STREAM.MSG.GET.{s}"]


def tenants_bucket() -> list[str]:
    """What nats-py's KV client takes on the tenants bucket: ``js.key_value`` (stream info),
    ``js.create_key_value`` (stream create), ``kv.get`` (a stream message get: the bucket is
    not created ``direct``; the direct gets, by subject or by sequence, are there for when it
    is), ``kv.put`` / ``create`` / ``update`` / ``delete`` (publishes to
    ``$KV.<bucket>.<key>``), and ``kv.watch`` / ``history`` (an ordered consumer) for reading
    earlier policies."""
    s = bus.TENANTS_STREAM
    return [
        f"{KV_TENANTS}.>",
        f"{JS}.STREAM.INFO.{s}",
        f"{JS}.STREAM.CREATE.{s}",
        f"{JS}.DIRECT.GET.{s}",
        f"{JS}.DIRECT.GET.{s}.>",
        f"{JS}.STREAM.MSG.GET.{s}",
        *read_streams(s),
    ]


# --- fleets: the cluster registry, fleet bundles, rollouts ---------------------------------------


def kv_read(stream: str) -> list[str]:
    """Reading a whole KV bucket with nats-py's client (the fleet buckets are ``direct``): open
    it (stream info), ``get`` (a direct get on the key's subject; by revision, the bare one),
    ``keys`` / ``watch`` / ``history`` (an ordered consumer, unfiltered on the API subject)."""
    return [
        f"{JS}.STREAM.INFO.{stream}",
        f"{JS}.DIRECT.GET.{stream}",
        f"{JS}.DIRECT.GET.{stream}.>",
        *read_streams(stream),
    ]


def registry_read() -> list[str]:
    """Listing the clusters and their labels (``driftbus clusters``; what a selector names):
    no secret from anyone who publishes to them. Writing is the admin's, the planner's, and
    each watcher's for its own cluster."""
    return kv_read(bus.CLUSTERS_STREAM)


def registry_entry(cluster: str) -> list[str]:
    """A watcher registers its cluster: ``create`` / ``update`` / ``put`` publish to the key's
    subject (nats-server cannot tell them apart, so it may rewrite or delete its own entry and
    no other), and it reads entries by key (a ``create`` over a deleted entry reads it first)."""
    s = bus.CLUSTERS_STREAM
    return [
        f"{KV_CLUSTERS}.{cluster_registry_key(cluster)}",
        f"{JS}.STREAM.INFO.{s}",
        f"{JS}.DIRECT.GET.{s}.{KV_CLUSTERS}.>",
    ]


def tenant_rollout_events(tenant: str) -> str:
    """The transitions of every rollout of one tenant's fleet bundles (what it subscribes to)."""
    return f"{PREFIX}.rollout.{encode_token(tenant)}.*"


def filtered_history(stream: str, subjects: str) -> list[str]:
    """Reading one's own messages of a shared stream: a pull consumer (``js.pull_subscribe``
    with a subject) is created on the filter-bearing API subject, whose filter the server checks
    against the consumer's, so ``subjects`` pins what it reads. Ordered consumers cannot be
    pinned so (nats-py creates them on the unfiltered subject)."""
    return [
        f"{JS}.CONSUMER.CREATE.{stream}.*.{subjects}",
        f"{JS}.CONSUMER.MSG.NEXT.{stream}.*",
        f"$JS.ACK.{stream}.>",
    ]


def tenant_fleet(tenant: str) -> list[str]:
    """A tenant's fleet: it publishes its own fleet bundles (``driftbus.fleet.<tenant>.*``)
    and reads back their revisions (``rollout undo``), reads the registry, reads its own
    rollouts' states by key (a direct get on the key's subject; not the bare direct get, a
    message get or a consumer, which would read any tenant's) and their transitions (live, and
    their history through ``filtered_history``). The states are the driver's: it writes none
    (pausing, resuming and promoting are the admin's)."""
    mine = f"{KV_ROLLOUTS}.rollout.{encode_token(tenant)}.*"
    return [
        # its own bundles' summary status in any cluster of its fleets (rollout status)
        f"{JS}.DIRECT.GET.{bus.STATUS}.{PREFIX}.status.*.{encode_token(tenant)}.*.bundle",
        tenant_fleet_filter(tenant),
        *filtered_history(bus.FLEET, tenant_fleet_filter(tenant)),
        *registry_read(),
        f"{JS}.STREAM.INFO.{bus.ROLLOUTS_STREAM}",
        f"{JS}.DIRECT.GET.{bus.ROLLOUTS_STREAM}.{mine}",
        *filtered_history(bus.ROLLOUTS, tenant_rollout_events(tenant)),
    ]


def fleet_admin() -> list[str]:
    """The admin's: every fleet bundle (the platform's and every tenant's), every registry
    entry (``clusters label``, ``clusters remove``), every rollout's steering (``rollout pause``,
    ``resume``, ``promote``: a ``RolloutControl`` the driver applies; the states are the
    driver's alone to write, and its lease the planners'), every rollout's state and history
    read."""
    return [
        family_filter("fleet"),
        family_filter("rollout-control"),
        f"{KV_CLUSTERS}.>",
        *kv_read(bus.CLUSTERS_STREAM),
        *kv_read(bus.ROLLOUTS_STREAM),
        *(f"{JS}.DIRECT.GET.{s}.>" for s in (bus.FLEET, bus.ROLLOUTS)),
        *read_streams(bus.FLEET, bus.ROLLOUTS),
    ]


def fleet_planner() -> list[str]:
    """The planner's, besides its ``$JS.API.>`` (it creates the fleet streams and buckets,
    and reads fleet bundles): it reads and writes the registry, drives the rollouts (their
    states and the driver's lease) and records each transition. Its placements in each cluster
    are ordinary bundles (``driftbus.bundle.>``, which it has for rollbacks)."""
    return [f"{KV_CLUSTERS}.>", f"{KV_ROLLOUTS}.>", family_filter("rollout")]


# --- configuration buckets: sync windows, notifications -----------------------------------------


def config_bucket_admin(stream: str, subjects: str) -> list[str]:
    """Writing and reading a configuration bucket whole (the admin's): its entries, open and
    create it, read entries (a message get: these buckets are not ``direct``; the direct gets
    for when they are), list keys and follow (an ordered consumer)."""
    return [
        f"{subjects}.>",
        f"{JS}.STREAM.INFO.{stream}",
        f"{JS}.STREAM.CREATE.{stream}",
        f"{JS}.STREAM.MSG.GET.{stream}",
        f"{JS}.DIRECT.GET.{stream}",
        f"{JS}.DIRECT.GET.{stream}.>",
        *read_streams(stream),
    ]


def windows_read() -> list[str]:
    """Reading the sync windows in force (``driftbus windows``, ``status``, the page): no
    secret from those they hold back. Writing them is the admin's alone."""
    s = WINDOWS_STREAM
    return [
        f"{JS}.STREAM.INFO.{s}",
        f"{JS}.STREAM.MSG.GET.{s}",
        f"{JS}.DIRECT.GET.{s}",
        f"{JS}.DIRECT.GET.{s}.>",
        *read_streams(s),
    ]


def windows_admin() -> list[str]:
    return config_bucket_admin(WINDOWS_STREAM, KV_WINDOWS)


def notify_admin() -> list[str]:
    """Every notification configuration, the platform's and every tenant's."""
    return config_bucket_admin(NOTIFY_STREAM, KV_NOTIFY)


def notify_key(tenant: str) -> str:
    """The subject of a tenant's notification configuration in the bucket."""
    return f"{KV_NOTIFY}.tenant.{encode_token(tenant)}"


def notify_tenant(tenant: str) -> list[str]:
    """A tenant's own notification configuration: put and delete it (a publish to its key's
    subject, nothing else's), open the bucket, and read it back by key (a direct get on its
    subject, which names the key: only once the bucket is ``direct``; a message get or a
    consumer would read any tenant's, so neither is granted)."""
    return [
        notify_key(tenant),
        f"{JS}.STREAM.INFO.{NOTIFY_STREAM}",
        f"{JS}.DIRECT.GET.{NOTIFY_STREAM}.{notify_key(tenant)}",
    ]


def notify_service() -> list[str]:
    """What ``driftbus notify`` reads: every configuration and the tenant policy (followed:
    what the platform's commit statuses may be posted on for a tenant's bundle), bundle
    statuses, decisions and rollout transitions (followed), and clusters' registry labels (for
    alerts selecting clusters by label). It publishes nothing on the bus; it creates, reads from
    and acknowledges its own durable consumers (``bus.NOTIFY_CONSUMERS``, shared by its
    replicas), each pinned to its name and filter."""
    durable = []
    for stream, (name, subject) in bus.NOTIFY_CONSUMERS.items():
        durable += [
            f"{JS}.CONSUMER.CREATE.{stream}.{name}.{subject}",
            f"{JS}.CONSUMER.MSG.NEXT.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>",
        ]
    return [
        f"{JS}.STREAM.INFO.{NOTIFY_STREAM}",
        f"{JS}.STREAM.INFO.{bus.TENANTS_STREAM}",
        *read_streams(NOTIFY_STREAM, bus.TENANTS_STREAM, bus.STATUS, bus.DECISIONS, bus.ROLLOUTS),
        *durable,
        *registry_read(),
    ]
