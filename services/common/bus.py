"""JetStream plumbing shared by the services: streams, the intent consumer, publishing, replay.

Streams (DESIGN §4) are created idempotently at start-up with every limit spelled out, so nothing
depends on a server default by accident. Publishing goes through ``Publisher``: bounded in-flight
``publish_async`` with a ``Nats-Msg-Id`` on every message (a retried publish is deduplicated) and
a timeout on every ack (nats-py's futures have none). ``Follower`` replays a compacted view
(deliver-last-per-subject) and then keeps delivering live messages, telling when it caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import nats
import orjson
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import (
    APIError,
    BadRequestError,
    BucketNotFoundError,
    KeyNotFoundError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from schemas.subjects import cluster_filter, encode_token, family_filter
from services.common import telemetry
from services.common.settings import setting

log = logging.getLogger("driftbus.bus")
T = TypeVar("T")

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
DAY = 24 * 3600.0
DEDUPE_WINDOW = 120.0
"""Seconds during which a repeated Nats-Msg-Id is dropped: covers publish retries across a
reconnect and a restarted planner re-emitting the intents it had in flight."""


WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a publish whose expected last sequence did not match."""
COMPARE_REFUSED = frozenset((WRONG_LAST_SEQUENCE, 10163, 10164))
"""Codes of a refused compare-and-publish worth comparing again: the wrong sequence, and on a
clustered stream "not ready" (10163) and another expected-sequence publish on the subject still
in flight (10164)."""


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
        "max_consumers": -1,
    }

    def cfg(name: str, family: str, description: str, **limits: Any) -> js_api.StreamConfig:
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
            name=name, subjects=[family_filter(family)], description=description, **values
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
            MEMBERS,
            "member",
            "the last heartbeat of the watchers and appliers of each cluster",
            max_msgs_per_subject=1,
            max_age=DAY,
        ),
    ]


@dataclasses.dataclass(frozen=True)
class NatsSettings:
    """How a process reaches NATS: shared by every service's settings and by the CLI."""

    nats_url: str = setting(
        "nats://127.0.0.1:4222",
        "NATS server URL (tls://... for TLS); a cluster's nodes comma-separated",
        env="NATS_URL",
    )
    nats_user: str = setting("", "NATS user name (see docs/security.md for the roles)")
    nats_password: str = setting(
        "",
        "NATS password; set it in the environment, not as a flag (flags show in `ps`)",
        secret=True,
    )
    nats_password_file: str = setting(
        "", "file holding the NATS password (a mounted secret); instead of --nats-password"
    )
    nats_ca: str = setting("", "CA bundle that signed the NATS server's certificate (TLS)")
    nats_cert: str = setting("", "client certificate for mutual TLS with NATS")
    nats_key: str = setting("", "private key of --nats-cert")
    publish_retry: float = setting(
        90.0,
        "seconds a publish is retried through a NATS outage before the caller is told (at most "
        "the 120 s dedupe window less the ack timeout); facts not published by then are "
        "published again later (the watcher relists, the planner re-sends)",
    )


def inbox_prefix(role: str, cluster: str = "") -> str:
    """Where replies to this process's requests arrive. Each role gets its own prefix so the
    NATS permissions can let a process read its own replies and nobody else's
    (``_INBOX.>`` stays with users)."""
    return f"_DRIFTBUS.{role}" + (f".{encode_token(cluster)}" if cluster else "")


def tls_context(s: NatsSettings) -> ssl.SSLContext | None:
    """A client TLS context when a CA or client certificate is configured, else None."""
    if not (s.nats_ca or s.nats_cert):
        return None
    ctx = ssl.create_default_context(cafile=s.nats_ca or None)
    if s.nats_cert:
        ctx.load_cert_chain(s.nats_cert, s.nats_key or None)
    return ctx


def credentials(s: NatsSettings) -> dict[str, Any]:
    """nats-py's user/password arguments from the settings (read at start-up, once)."""
    if not s.nats_user:
        return {}
    password = s.nats_password
    if s.nats_password_file:
        try:
            password = Path(s.nats_password_file).read_text().strip()
        except OSError as exc:
            raise BusError(f"--nats-password-file: {exc.strerror}: {exc.filename}") from None
    return {"user": s.nats_user, "password": password}


async def connect(
    s: NatsSettings, *, name: str, inbox: str = "_INBOX", reconnect: bool = True, **kwargs: Any
) -> NATS:
    """Connect with the credentials and TLS of ``s``. Services reconnect forever; the CLI
    (``reconnect=False``) fails fast with the server's reason."""

    async def on_error(exc: Exception) -> None:
        # permission violations arrive here: they name the subject, never a credential
        log.warning("nats connection error", extra={"error": str(exc)})

    auth = credentials(s)
    tls = tls_context(s)
    if tls is not None:
        auth["tls"] = tls
    return await nats.connect(
        [u.strip() for u in s.nats_url.split(",") if u.strip()],  # a cluster: any of its nodes
        name=name,
        inbox_prefix=inbox,
        max_reconnect_attempts=-1 if reconnect else 3,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        error_cb=on_error,
        **auth,
        **kwargs,
    )


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
            waited = False
            while True:
                try:
                    await js.stream_info(config.name)
                    break
                except (NotFoundError, ServiceUnavailableError, NatsTimeout, TimeoutError):
                    pass  # not there yet, or a NATS cluster still electing its leaders
                if within is not None and loop.time() - started > within:
                    raise BusError(
                        f"stream {config.name} does not exist; the planner creates the "
                        "streams: is it running against this NATS?"
                    )
                if not waited:
                    log.info(
                        "waiting for the planner to create the streams",
                        extra={"stream": config.name},
                    )
                    waited = True
                await asyncio.sleep(0.5)
            continue
        await _create_or_update(js, config, started + (within or 120.0))
    if manage:
        await _ensure_shards_bucket(js, replicas)
        # the bucket big bundles go to exists before any user needs it (users may not create it)
        try:
            await js.object_store(OBJECT_STORE_BUCKET)
        except BucketNotFoundError:
            await js.create_object_store(
                OBJECT_STORE_BUCKET,
                config=js_api.ObjectStoreConfig(storage=js_api.StorageType.FILE, replicas=replicas),
            )


async def _ensure_shards_bucket(js: JetStreamContext, replicas: int) -> None:
    try:
        await js.key_value(SHARDS_BUCKET)
    except BucketNotFoundError:
        with contextlib.suppress(BadRequestError):  # another planner created it meanwhile
            await js.create_key_value(
                js_api.KeyValueConfig(
                    bucket=SHARDS_BUCKET,
                    description="driftbus planner heartbeats and cluster claims",
                    history=1,
                    storage=js_api.StorageType.FILE,
                    replicas=replicas,
                    direct=True,  # appliers read their cluster's claim with a direct get
                )
            )


def claim_key(cluster: str) -> str:
    return f"clusters.{encode_token(cluster)}"


def heartbeat_key(planner_id: str) -> str:
    # KV keys allow [-/_=.a-zA-Z0-9]; the id is a hostname-pid or a name a user chose
    return "planners." + encode_token(planner_id)


@dataclasses.dataclass(frozen=True)
class Claim:
    planner: str
    """The holder; empty once released."""
    revision: int
    """The entry's revision: the holder's fencing token."""


def claim_holder(data: bytes | None) -> str | None:
    """The planner a claim entry names ("" once released); None when it is not readable."""
    try:
        return str(orjson.loads(data or b"{}").get("planner", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return None


async def read_claim(kv: KeyValue, cluster: str) -> Claim | None:
    """The cluster's claim as the bucket holds it now (None: never claimed)."""
    try:
        entry = await kv.get(claim_key(cluster))
    except KeyNotFoundError:
        return None
    return Claim(claim_holder(entry.value) or "", int(entry.revision or 0))


async def claim_revision(js: JetStreamContext, cluster: str) -> int | None:
    """The revision of the cluster's planner claim (the current fencing token), or None when
    no planner ever claimed it (or the bucket is not there yet)."""
    try:
        last = await last_message(js, SHARDS_STREAM, f"$KV.{SHARDS_BUCKET}.{claim_key(cluster)}")
    except ServiceUnavailableError:
        return None
    return None if last is None else int(last.seq or 0)


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


@dataclasses.dataclass(frozen=True)
class IntentConsumerSettings:
    ack_wait: float = 60.0
    max_deliver: int = -1
    max_ack_pending: int = 4096


def intent_consumer_name(cluster: str) -> str:
    # consumer names may not contain '.', '*', '>' — the token encoding guarantees that
    return "appliers-" + encode_token(cluster).replace("=", "_")


async def intents_pending(js: JetStreamContext, cluster: str) -> int | None:
    """Intents of ``cluster`` queued or being applied (the autoscaling signal); None while
    there is no consumer yet (no applier has started) or NATS does not answer."""
    try:
        info = await js.consumer_info(INTENTS, intent_consumer_name(cluster))
    except (NotFoundError, ServiceUnavailableError, NatsTimeout, TimeoutError):
        return None
    return (info.num_pending or 0) + (info.num_ack_pending or 0)


async def ensure_intent_consumer(
    js: JetStreamContext, cluster: str, s: IntentConsumerSettings
) -> str:
    """The one durable pull consumer per cluster that every applier replica shares."""
    name = intent_consumer_name(cluster)
    config = js_api.ConsumerConfig(
        # name + filter: nats-py then creates it on $JS.API.CONSUMER.CREATE.<stream>.<name>.
        # <filter>, which lets NATS permissions pin an applier to its own cluster's intents
        name=name,
        durable_name=name,
        description=f"appliers of cluster {cluster}",
        filter_subject=cluster_filter("intent", cluster),
        ack_policy=js_api.AckPolicy.EXPLICIT,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_wait=s.ack_wait,
        max_deliver=s.max_deliver,
        # No consumer backoff: NATS would use its first step as the ack deadline of the first
        # delivery, redelivering any apply slower than that. Appliers nak with their own delay.
        max_ack_pending=s.max_ack_pending,
        max_waiting=512,
        replay_policy=js_api.ReplayPolicy.INSTANT,
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120.0
    while True:
        try:
            try:
                await js.add_consumer(INTENTS, config=config)
            except BadRequestError:
                await js.update_consumer(INTENTS, config=config)  # type: ignore[attr-defined]
            return name
        except (ServiceUnavailableError, NatsTimeout, TimeoutError) as exc:
            # a NATS cluster still electing the stream's leader: not an error yet
            if loop.time() > deadline:
                raise BusError(f"intent consumer {name} cannot be created: {exc!r}") from None
            await asyncio.sleep(1.0)


class Publisher:
    """Bounded, deduplicated, timed JetStream publishing."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        max_inflight: int = 512,
        ack_timeout: float = 10.0,
        retry_for: float = 90.0,
    ) -> None:
        self._js = js
        self._slots = asyncio.Semaphore(max_inflight)
        self._timeout = ack_timeout
        # Long enough to ride out a reconnect or a stream leader election on a NATS cluster,
        # and within the dedupe window, so a retry of a publish that did land is dropped.
        self._retry_for = min(retry_for, DEDUPE_WINDOW - ack_timeout)
        self._pending: set[asyncio.Task[js_api.PubAck]] = set()
        self.errors = 0

    async def publish(
        self, subject: str, data: bytes, *, msg_id: str, headers: dict[str, str] | None = None
    ) -> asyncio.Task[js_api.PubAck]:
        """Queue a publish; returns a task resolving to the ack (retried with the same id).
        The current trace context travels along in the headers."""
        headers = telemetry.inject(headers)
        await self._slots.acquire()
        task = asyncio.create_task(self._publish(subject, data, msg_id, headers))
        self._pending.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[js_api.PubAck]) -> None:
        self._pending.discard(task)
        self._slots.release()
        if not task.cancelled() and (exc := task.exception()) is not None:
            if isinstance(exc, APIError) and exc.err_code in COMPARE_REFUSED:
                return  # a refused compare-and-publish: the caller compares again (newest.py)
            self.errors += 1
            # Never silent: a lost publish is a lost fact (the caller may also await the task).
            log.error("publish failed: %s: %s", type(exc).__name__, exc)

    async def _publish(
        self, subject: str, data: bytes, msg_id: str, headers: dict[str, str] | None
    ) -> js_api.PubAck:
        hdrs = {"Nats-Msg-Id": msg_id, **(headers or {})}
        # Unknown outcome on a timeout: retrying with the same Nats-Msg-Id cannot duplicate it.
        return await self.retrying(
            f"publish to {subject}",
            lambda: self._js.publish(subject, data, headers=hdrs, timeout=self._timeout),
        )

    async def retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` again, with backoff, while the bus is away or a stream has no leader (a
        reconnect, a NATS cluster node lost), for as long as a publish is retried."""
        delay = 0.2
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self._retry_for
        attempt = 0
        while True:
            attempt += 1
            try:
                return await call()
            except (
                NatsTimeout,
                nats.errors.ConnectionClosedError,
                nats.errors.NoRespondersError,
                # the stream has no leader for a moment (a NATS cluster node was lost)
                NoStreamResponseError,
                ServiceUnavailableError,
                TimeoutError,
            ) as exc:
                if loop.time() + delay > give_up:
                    raise BusError(
                        f"{what} failed after {attempt} tries: {type(exc).__name__}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def flush(self) -> None:
        """Wait for every queued publish; raises the first failure."""
        while self._pending:
            done = await asyncio.gather(*list(self._pending), return_exceptions=True)
            for result in done:
                if isinstance(result, BaseException):
                    raise result


class Follower:
    """Replay the last message per subject of a filter, then follow live messages.

    ``caught_up`` is set once everything that existed at subscription time was delivered, which
    is when a service may start deciding (the planner) or publishing (the watcher).
    """

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        subject: str,
        *,
        last_per_subject: bool = True,
        history: bool = False,
        headers_only: bool = False,
    ) -> None:
        self._js = js
        self._stream = stream
        self._subject = subject
        # history: every message (an audit log); otherwise the compacted view (last per subject)
        # or, without last_per_subject, only new messages
        self._policy = (
            js_api.DeliverPolicy.ALL
            if history
            else js_api.DeliverPolicy.LAST_PER_SUBJECT
            if last_per_subject
            else js_api.DeliverPolicy.NEW
        )
        self._headers_only = headers_only  # subjects and headers, no payloads (cheap to watch)
        self.caught_up = asyncio.Event()
        self._sub: Any = None

    async def _subscribe(self) -> Any:
        return await self._js.subscribe(
            self._subject,
            stream=self._stream,
            ordered_consumer=True,
            deliver_policy=self._policy,
            idle_heartbeat=2.0,
            headers_only=self._headers_only or None,
            pending_msgs_limit=1_000_000,
            pending_bytes_limit=1024**3,
        )

    @staticmethod
    async def _empty(sub: Any) -> bool:
        """True only if the view is empty. A push consumer starts delivering as soon as it
        exists, so ``num_pending == 0`` alone may just mean "all already in our buffer"; the
        view is empty only if nothing was delivered either. Otherwise the message whose own
        metadata says ``num_pending == 0`` is the last one of the view."""
        info = await sub.consumer_info()
        return (info.num_pending or 0) == 0 and (info.delivered.consumer_seq or 0) == 0

    async def messages(self) -> AsyncIterator[Msg]:
        """The current view, then live messages, forever; ``caught_up`` marks the boundary."""
        sub = await self._subscribe()
        try:
            if await self._empty(sub):
                self.caught_up.set()
            while True:
                try:
                    msg = await sub.next_msg(timeout=1.0)
                except (NatsTimeout, TimeoutError):
                    continue
                yield msg
                if not self.caught_up.is_set() and msg.metadata.num_pending == 0:
                    self.caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def snapshot(self, *, timeout: float = 30.0) -> AsyncIterator[Msg]:  # noqa: ASYNC109
        """Only the current view (last message per subject), then stop."""
        sub = await self._subscribe()
        try:
            if not await self._empty(sub):
                while True:
                    msg = await sub.next_msg(timeout=timeout)
                    yield msg
                    if msg.metadata.num_pending == 0:
                        break
            self.caught_up.set()
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


async def last_message(
    js: JetStreamContext, stream: str, subject: str
) -> js_api.RawStreamMsg | None:
    try:
        return await js.get_last_msg(stream, subject, direct=True)
    except NotFoundError:
        return None
