"""The streams, buckets and limits of the bus (DESIGN §4), created idempotently with every limit
spelled out, so nothing depends on a server default by accident.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from nats.errors import ConnectionClosedError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)

from schemas.subjects import PREFIX, family_filter
from services.common.bus import objects

log = logging.getLogger("driftbus.bus")


CONTROL = "DRIFTBUS_CONTROL"
"""Each bundle's last ``BundleControl`` (suspended or not), per ``driftbus.control.<c>.<b>``,
and each rollout's last ``RolloutControl`` per action (``driftbus.rollout-control.<b>.<a>``)."""
FLEET = "DRIFTBUS_FLEET"
"""The last revisions of every fleet bundle, per ``driftbus.fleet.<tenant>.<name>``."""
ROLLOUTS = "DRIFTBUS_ROLLOUTS"
"""The audit log of rollout transitions (``RolloutEvent``), per ``driftbus.rollout.<t>.<n>``."""
CHECKPOINTS = "DRIFTBUS_CHECKPOINTS"
"""Each cluster's last checkpoint (``schemas.checkpoint``), per ``driftbus.checkpoint.<c>.<n>``."""
BUNDLES, SERVER, APPLIED, INTENTS, STATUS, DECISIONS, OUTCOMES, MEMBERS = (
    "DRIFTBUS_BUNDLES",
    "DRIFTBUS_SERVER",
    "DRIFTBUS_APPLIED",
    "DRIFTBUS_INTENTS",
    "DRIFTBUS_STATUS",
    "DRIFTBUS_DECISIONS",
    "DRIFTBUS_OUTCOMES",
    "DRIFTBUS_MEMBERS",
)
OBJECT_STORE_BUCKET = "driftbus-bundles"
SHARDS_BUCKET = "driftbus-shards"
"""KV bucket of planner heartbeats (``planners.<id>``) and cluster claims (``clusters.<c>``)."""
SHARDS_STREAM = f"KV_{SHARDS_BUCKET}"
TENANTS_BUCKET = "driftbus-tenants"
"""KV bucket holding the tenant policy in force (key ``TENANTS_KEY``; docs/tenancy.md)."""
TENANTS_STREAM = f"KV_{TENANTS_BUCKET}"
TENANTS_KEY = "policy"
CLUSTERS_BUCKET = "driftbus-clusters"
"""KV bucket of the cluster registry: one ``ClusterRecord`` per cluster (docs/fleet.md)."""
CLUSTERS_STREAM = f"KV_{CLUSTERS_BUCKET}"
ROLLOUTS_BUCKET = "driftbus-rollouts"
"""KV bucket of rollout states (``rollout.<t>.<n>``) and the driver's lease (``driver``)."""
ROLLOUTS_STREAM = f"KV_{ROLLOUTS_BUCKET}"
WINDOWS_BUCKET = "driftbus-windows"
"""KV bucket holding the sync windows in force (key ``WINDOWS_KEY``; docs/windows.md)."""
WINDOWS_KEY = "windows"
NOTIFY_BUCKET = "driftbus-notify"
"""KV bucket of notification configurations (docs/notifications.md): the platform's and each
tenant's, one key each."""
NOTIFY_CONSUMERS = {
    STATUS: ("notify-status", f"{PREFIX}.status.*.*.*.bundle"),
    DECISIONS: ("notify-decisions", family_filter("decision")),
    ROLLOUTS: ("notify-rollouts", family_filter("rollout")),
}
"""stream → (name, filter) of the durable consumers ``driftbus notify`` replicas share."""
DAY = 24 * 3600.0
DEDUPE_WINDOW = 120.0
"""Seconds during which a repeated Nats-Msg-Id is dropped: covers publish retries across a
reconnect and a restarted planner re-emitting the intents it had in flight."""


WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a publish whose expected last sequence did not match."""
COMPARE_REFUSED = frozenset((WRONG_LAST_SEQUENCE, 10163, 10164))
STREAM_NOT_FOUND = 10059
"""JetStream's err_code for a stream that does not exist (yet: planners make them)."""
"""Codes of a refused compare-and-publish worth comparing again: the wrong sequence, and on a
clustered stream "not ready" (10163) and another expected-sequence publish on the subject still
in flight (10164)."""


BUS_AWAY: tuple[type[BaseException], ...] = (
    NatsTimeout,
    NoRespondersError,
    # the stream has no leader for a moment (a NATS cluster node was lost)
    NoStreamResponseError,
    ServiceUnavailableError,
    TimeoutError,
)
"""Errors of a bus that is away for a moment (a restart, a reconnect, a leader election): what
is asked again rather than reported."""
PUBLISH_RETRIED: tuple[type[BaseException], ...] = (*BUS_AWAY, ConnectionClosedError)
"""A publish is retried on these too: the client may close while it reconnects."""


class BusError(RuntimeError):
    """A JetStream operation failed; the message says which and why."""


def stream_configs(*, replicas: int = 1) -> list[js_api.StreamConfig]:
    common: dict[str, Any] = {
        "storage": js_api.StorageType.FILE,
        "num_replicas": replicas,
        "discard": js_api.DiscardPolicy.OLD,
        "duplicate_window": DEDUPE_WINDOW,
        "max_msg_size": -1,  # bounded by the server's max_payload
        "allow_direct": True,  # get-last-by-subject without a consumer
        "allow_batched": True,  # fast batches: one ack per window (batching.py)
        "max_consumers": -1,
    }

    def cfg(
        name: str, family: str, description: str, *also: str, **limits: Any
    ) -> js_api.StreamConfig:
        values = {
            "retention": js_api.RetentionPolicy.LIMITS,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0.0,
            "max_msgs_per_subject": -1,
            **common,
            **limits,
        }
        return js_api.StreamConfig(
            name=name,
            subjects=[family_filter(f) for f in (family, *also)],
            description=description,
            **values,
        )

    return [
        cfg(
            BUNDLES,
            "bundle",
            "desired state: the last revisions of every bundle",
            max_msgs_per_subject=5,
        ),
        cfg(
            SERVER,
            "server",
            "compacted: latest serverSHA/health per live object",
            max_msgs_per_subject=1,
        ),
        cfg(
            APPLIED,
            "applied",
            "compacted: latest applySHA + applied manifestSHA per object",
            max_msgs_per_subject=1,
        ),
        cfg(
            INTENTS,
            "intent",
            "work queue of apply/delete intents; a newer intent for an "
            "object replaces the pending one",
            retention=js_api.RetentionPolicy.WORK_QUEUE,
            max_msgs_per_subject=1,
        ),
        cfg(
            STATUS,
            "status",
            "per-object and per-bundle status for users",
            max_age=7 * DAY,
            max_msgs_per_subject=20,
        ),
        cfg(
            DECISIONS,
            "decision",
            "audit log of every planner decision",
            max_age=14 * DAY,
            max_bytes=2 * 1024**3,
        ),
        cfg(
            OUTCOMES,
            "outcome",
            "compacted: the last failure/conflict/wait/declined prune per object; no age limit, "
            "the planner decides on it for as long as the object is desired",
            max_msgs_per_subject=1,
        ),
        cfg(
            CONTROL,
            "control",
            "compacted: each bundle's last suspend/resume, each rollout's last pause, resume "
            "and promote",
            "rollout-control",
            max_msgs_per_subject=1,
        ),
        cfg(
            MEMBERS,
            "member",
            "the last heartbeat of the watchers and appliers of each cluster",
            max_msgs_per_subject=1,
            max_age=DAY,
        ),
        cfg(
            FLEET,
            "fleet",
            "the last revisions of every fleet bundle",
            max_msgs_per_subject=10,
        ),
        cfg(
            ROLLOUTS,
            "rollout",
            "audit log of rollout transitions",
            max_age=30 * DAY,
            max_bytes=256 * 1024**2,
        ),
        cfg(
            CHECKPOINTS,
            "checkpoint",
            "compacted: each cluster's last checkpoint of what its planner folded from APPLIED, "
            "SERVER and OUTCOMES, in parts",
            max_msgs_per_subject=1,
        ),
    ]


async def wait_for_stream(js: JetStreamContext, name: str, deadline: float | None = None) -> None:
    """Wait until stream ``name`` (a stream, or a bucket's: ``KV_<bucket>``) exists — the
    planner creates them, the streams first, then the buckets — for ever, or until the loop's
    time ``deadline``, then BusError naming it."""
    loop = asyncio.get_running_loop()
    waited = False
    while True:
        try:
            await js.stream_info(name)
            return
        except (NotFoundError, ServiceUnavailableError, NatsTimeout, TimeoutError) as exc:
            last = exc  # not there yet, or a NATS cluster still electing its leaders
        if deadline is not None and loop.time() > deadline:
            if isinstance(last, NotFoundError):
                raise BusError(
                    f"stream {name} does not exist; the planner creates the streams: is it "
                    "running against this NATS?"
                )
            raise BusError(  # saying "does not exist" here sent people looking the wrong way
                f"stream {name}: NATS did not answer whether it exists ({type(last).__name__}): "
                "its JetStream API is busy or unavailable"
            )
        if not waited:
            log.info("waiting for the planner to create the streams", extra={"stream": name})
            waited = True
        await asyncio.sleep(0.5)


async def ensure_streams(
    js: JetStreamContext, *, replicas: int = 1, manage: bool = True, within: float | None = None
) -> None:
    """Create or update every stream to exactly our configuration (``manage``: the planner's
    job), or else wait until they exist. Only the planner may create streams when the bus is
    locked down (docs/security.md), so the other roles never try: they wait for it, forever
    (services) or ``within`` seconds (the CLI), then fail naming the missing stream."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    for config in stream_configs(replicas=replicas):
        assert config.name is not None
        if not manage:
            deadline = None if within is None else started + within
            await wait_for_stream(js, config.name, deadline)
            continue
        await _create_or_update(js, config, started + (within or 120.0))
    if manage:
        await _ensure_shards_bucket(js, replicas)
        await ensure_tenants_bucket(js, replicas)
        await ensure_fleet_buckets(js, replicas)
        await ensure_config_buckets(js, replicas)
        # the bucket big bundles go to exists before any user needs it (users may not create
        # it), bounded; an older driftbus's unbounded bucket gets the limits
        await ensure_object_store(js, replicas, started + (within or 120.0))


async def ensure_object_store(
    js: JetStreamContext, replicas: int = 1, deadline: float | None = None
) -> None:
    """Create the Object Store bucket with the limits in force (``objects.configure``), or bring
    an existing one to them."""
    config = objects.bucket_config(
        OBJECT_STORE_BUCKET, replicas=replicas, max_bytes=objects.limits().store_max_bytes
    )
    if deadline is None:
        deadline = asyncio.get_running_loop().time() + 120.0
    try:
        await _create_or_update(js, config, deadline)
    except APIError as exc:  # e.g. 10047: the server cannot reserve max_bytes of storage
        raise BusError(
            f"the Object Store bucket {OBJECT_STORE_BUCKET} cannot be given "
            f"--object-store-max-bytes={config.max_bytes:,}: {exc.description}"
        ) from None


async def ensure_tenants_bucket(js: JetStreamContext, replicas: int = 1) -> None:
    """The tenant policy's bucket (made by the planner, or by whoever applies a policy
    first). History 10: earlier policies stay readable for an audit."""
    await _ensure_bucket(
        js, TENANTS_BUCKET, "driftbus tenant policy (driftbus tenants apply)", 10, replicas
    )


async def ensure_fleet_buckets(js: JetStreamContext, replicas: int = 1) -> None:
    """The cluster registry and the rollout states (made by the planner; a test bus may make
    them first). The registry keeps 5 versions of an entry: a relabelling stays auditable."""
    for bucket, history, description in (
        (CLUSTERS_BUCKET, 5, "driftbus cluster registry: labels of every cluster"),
        (ROLLOUTS_BUCKET, 1, "driftbus rollout states and the rollout driver's lease"),
    ):
        await _ensure_bucket(js, bucket, description, history, replicas, direct=True)


async def ensure_config_buckets(js: JetStreamContext, replicas: int = 1) -> None:
    """The sync windows and the notification configurations (made by the planner, or by
    whoever applies one first). History 10, like the tenant policy: an audit reads earlier ones."""
    await _ensure_bucket(
        js, WINDOWS_BUCKET, "driftbus sync windows (driftbus windows apply)", 10, replicas
    )
    # direct: a tenant reads its own key with a direct get (no stream-wide read)
    await _ensure_bucket(
        js,
        NOTIFY_BUCKET,
        "driftbus notifications (driftbus notify apply)",
        10,
        replicas,
        direct=True,
    )


async def _ensure_shards_bucket(js: JetStreamContext, replicas: int) -> None:
    description = "driftbus planner heartbeats and cluster claims"
    # direct: appliers read their cluster's claim with a direct get
    await _ensure_bucket(js, SHARDS_BUCKET, description, 1, replicas, direct=True)


async def _ensure_bucket(
    js: JetStreamContext,
    bucket: str,
    description: str,
    history: int,
    replicas: int,
    *,
    direct: bool | None = None,
) -> None:
    """Create the file-backed KV bucket unless it exists (another process may create it
    meanwhile), keeping ``history`` versions of an entry."""
    try:
        await js.key_value(bucket)
    except BucketNotFoundError:
        config = js_api.KeyValueConfig(
            bucket=bucket,
            description=description,
            history=history,
            storage=js_api.StorageType.FILE,
            replicas=replicas,
            direct=direct,
        )
        with contextlib.suppress(BadRequestError):
            await js.create_key_value(config)


async def _create_or_update(
    js: JetStreamContext, config: js_api.StreamConfig, deadline: float
) -> None:
    """Create the stream, or bring an existing one (older driftbus) to ``config``. While a NATS
    cluster is still forming (no meta leader, replicas' peers not yet online) the request fails
    in passing: retried until ``deadline``, then the last error says why."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            try:
                await js.add_stream(config=config)
            except BadRequestError as exc:
                if exc.err_code == 10005:  # no suitable peers for placement: cluster forming
                    raise
                await js.update_stream(config=config)  # exists with another configuration
            return
        except (BadRequestError, NotFoundError, ServiceUnavailableError, NatsTimeout) as exc:
            if isinstance(exc, BadRequestError) and exc.err_code != 10005:
                raise  # a configuration the server refuses: retrying cannot help
            if loop.time() > deadline:
                raise BusError(f"stream {config.name} cannot be created: {exc}") from None
            log.info(
                "stream %s not created yet (%s); retrying",
                config.name,
                exc,
                extra={"error": str(exc)},
            )
            await asyncio.sleep(1.0)
