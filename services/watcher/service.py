"""The watcher process: list+watch driftbus-owned objects, publish serverSHA and health.

One list+watch per GVK found in the cluster's bundles (plus configured extras), restricted by
the ownership label. A server event is published only when an object's SHA or health changed
against what the SERVER stream already holds — the cache is seeded from it at start-up, so a
restarted watcher republishes nothing. On ``410 Gone`` it relists and publishes tombstones for
cached objects that vanished; on a dropped stream it resumes from the last resourceVersion.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from typing import Any

from nats.js import JetStreamContext

from schemas.codec import WireError, decode, encode
from schemas.messages import Bundle, Health, ServerEvent
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    cluster_filter,
    key_tokens,
    object_subject,
)
from services.common import bus, telemetry
from services.common.bundles import BundleError, load_manifests
from services.common.kube import Gone, KubeClient, KubeError, NotFound, Resource
from services.common.runtime import cluster_connections
from services.common.settings import replica_id, setting
from services.core.health import health
from services.core.manifest import OWNER_LABEL
from services.core.sha import HashError, object_sha

log = logging.getLogger("driftbus.watcher")
RELISTS = telemetry.meter.create_counter(
    "driftbus_watch_relists", description="relists after a watch expired (410 Gone), by kind"
)
WATCH_RESTARTS = telemetry.meter.create_counter(
    "driftbus_watch_restarts", description="watches resumed after an error, by kind"
)
PUBLISHED = telemetry.meter.create_counter(
    "driftbus_server_events_published", description="server facts published (real changes only)"
)


@dataclasses.dataclass(frozen=True)
class WatcherSettings(telemetry.TelemetrySettings, bus.NatsSettings):
    cluster: str = setting("", "name of the cluster this watcher observes (required)")
    kubeconfig: str | None = setting(
        None, "kubeconfig path (in-cluster config when unset)", env="KUBECONFIG"
    )
    context: str | None = setting(None, "kubeconfig context (current context when unset)")
    watcher_id: str = setting(
        "", "name of this replica in server events (default: <hostname>-<pid>)"
    )
    extra_kinds: tuple[str, ...] = setting(
        (), "apiVersion/Kind list to watch besides the kinds in bundles, comma-separated"
    )
    watch_timeout: int = setting(
        300,
        "seconds a single watch request stays open (server side); "
        "resumed from the last resourceVersion after",
    )
    list_page_size: int = setting(500, "objects per list page (limit/continue)")
    retry_delay: float = setting(
        2.0, "seconds between attempts while a kind is unknown or the API server is unreachable"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    sha: bytes | None
    health: Health
    rv: int


def rv_int(rv: str) -> int:
    return int(rv) if rv.isdigit() else 0


class Watcher:
    def __init__(
        self,
        *,
        settings: WatcherSettings,
        js: JetStreamContext,
        kube: KubeClient,
        publisher: bus.Publisher,
    ) -> None:
        self.s = settings
        self.js = js
        self.kube = kube
        self.pub = publisher
        self.cache: dict[ObjectKey, Seen] = {}
        self.watches: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.ready = asyncio.Event()
        self.published = 0
        self.relists = 0

    async def run(self) -> None:
        await self._seed()
        for spec in self.s.extra_kinds:
            api_version, _, kind = spec.rpartition("/")
            self._ensure_watch(api_version, kind)
        follower = bus.Follower(self.js, bus.BUNDLES, cluster_filter("bundle", self.s.cluster))
        self.ready.set()
        async for msg in follower.messages():
            with telemetry.tracer.start_as_current_span(
                "watch bundle kinds",
                context=telemetry.traced(msg.headers),
                attributes={"cluster": self.s.cluster, "messaging.subject": msg.subject},
            ) as span:
                try:
                    bundle = decode(msg.data, Bundle)
                    manifests = await load_manifests(self.js, bundle)
                except (WireError, BundleError) as exc:
                    log.warning("ignoring bundle: %s", exc)  # the planner reports it to the user
                    continue
                span.set_attributes({"bundle": bundle.bundle, "revision": bundle.revision})
                for m in manifests:
                    if (
                        isinstance(m, dict)
                        and isinstance(m.get("apiVersion"), str)
                        and isinstance(m.get("kind"), str)
                    ):
                        self._ensure_watch(m["apiVersion"], m["kind"])

    async def _seed(self) -> None:
        """Load what the SERVER stream already says, so only real changes are published."""
        follower = bus.Follower(self.js, bus.SERVER, cluster_filter("server", self.s.cluster))
        async for msg in follower.snapshot():
            try:
                ev = decode(msg.data, ServerEvent)
                sha = bytes.fromhex(ev.server_sha) if ev.server_sha else None
                self.cache[ev.key] = Seen(sha, ev.health, rv_int(ev.resource_version))
            except (WireError, ValueError) as exc:
                log.warning("ignoring server event %s: %s", msg.subject, exc)
        log.info("seeded %d objects from the SERVER stream", len(self.cache))

    def _ensure_watch(self, api_version: str, kind: str) -> None:
        if (api_version, kind) not in self.watches:
            # a fresh context: the watch outlives the bundle (and its trace) that started it
            self.watches[(api_version, kind)] = asyncio.create_task(
                self._watch_kind(api_version, kind),
                name=f"watch {kind}.{api_version}",
                context=contextvars.Context(),
            )

    async def _resource(self, api_version: str, kind: str) -> Resource:
        while True:
            try:
                return await self.kube.discovery.resource(api_version, kind)
            except NotFound:
                # Not served (yet): a CRD may be on its way. Only this group-version is refetched.
                await asyncio.sleep(self.s.retry_delay)
            except KubeError as exc:
                log.warning("discovery of %s %s failed: %s", api_version, kind, exc)
                await asyncio.sleep(self.s.retry_delay)

    async def _watch_kind(self, api_version: str, kind: str) -> None:
        res = await self._resource(api_version, kind)
        selector = OWNER_LABEL
        while True:  # list, then watch until 410 Gone
            try:
                rv = await self._list(res, selector)
            except KubeError as exc:
                log.warning("list %s failed: %s", res, exc)
                await asyncio.sleep(self.s.retry_delay)
                continue
            while True:
                try:
                    async for ev in self.kube.watch(
                        res,
                        resource_version=rv,
                        label_selector=selector,
                        timeout_seconds=self.s.watch_timeout,
                    ):
                        rv = ev.resource_version or rv
                        if ev.type in ("ADDED", "MODIFIED"):
                            await self._observe(ev.object)
                        elif ev.type == "DELETED":
                            await self._tombstone(ObjectKey.of(ev.object), rv)
                except Gone:
                    self.relists += 1
                    RELISTS.add(1, {"kind": res.kind})
                    log.info("watch %s: resourceVersion %s expired; relisting", res, rv)
                    break
                except KubeError as exc:
                    WATCH_RESTARTS.add(1, {"kind": res.kind})
                    log.warning("watch %s interrupted: %s; resuming from %s", res, exc, rv)
                    await asyncio.sleep(self.s.retry_delay)
                except (HashError, SubjectError) as exc:
                    log.error("watch %s: cannot handle an event: %s", res, exc)

    async def _list(self, res: Resource, selector: str) -> str:
        """Observe every listed object page by page (a 50,000-object list is never held whole),
        then tombstone what the cache has and the list had not. Returns the list's
        resourceVersion to watch from."""
        present = set()
        rv = ""
        async for items, page_rv in self.kube.list_pages(
            res, label_selector=selector, limit=self.s.list_page_size
        ):
            rv = page_rv
            for obj in items:
                try:
                    present.add(await self._observe(obj))
                except (HashError, SubjectError) as exc:
                    log.error("list %s: cannot handle an object: %s", res, exc)
        for key, seen in list(self.cache.items()):
            if (
                (key.group, key.kind) == (res.group, res.kind)
                and key not in present
                and seen.sha is not None
            ):
                await self._tombstone(key, rv)
        return rv

    async def _observe(self, obj: dict[str, Any]) -> ObjectKey:
        key = ObjectKey.of(obj)
        sha = object_sha(obj)
        h, why = health(obj)
        rv = rv_int(obj.get("metadata", {}).get("resourceVersion", ""))
        seen = self.cache.get(key)
        if seen is not None and (seen.sha, seen.health) == (sha, h):
            return key
        if seen is not None and rv < seen.rv:
            return key  # older than what the stream already holds
        self.cache[key] = Seen(sha, h, rv)
        labels = obj.get("metadata", {}).get("labels") or {}
        await self._publish(
            ServerEvent(
                cluster=self.s.cluster,
                key=key,
                resource_version=str(rv),
                server_sha=sha.hex(),
                health=h,
                health_message=why,
                api_version=str(obj.get("apiVersion", "")),
                bundle=str(labels.get(OWNER_LABEL, "")),
                watcher=self.s.watcher_id,
            )
        )
        return key

    async def _tombstone(self, key: ObjectKey, rv: str) -> None:
        seen = self.cache.get(key)
        if seen is not None and seen.sha is None:
            return
        self.cache[key] = Seen(None, Health.UNKNOWN, rv_int(rv))
        await self._publish(
            ServerEvent(
                cluster=self.s.cluster,
                key=key,
                resource_version=rv,
                server_sha=None,
                deleted=True,
                watcher=self.s.watcher_id,
            )
        )

    async def _publish(self, ev: ServerEvent) -> None:
        subject = object_subject("server", self.s.cluster, ev.key)
        # Same object at the same resourceVersion is the same fact: active-active watchers
        # publish it twice and JetStream keeps one.
        msg_id = f"{key_tokens(ev.key)}@{ev.resource_version}{'-' if ev.deleted else ''}"
        await self.pub.publish(subject, encode(ev), msg_id=msg_id)
        self.published += 1
        PUBLISHED.add(1)


async def run(settings: WatcherSettings) -> None:
    settings = dataclasses.replace(settings, watcher_id=settings.watcher_id or replica_id())
    async with cluster_connections("watcher", settings, settings, settings) as c:
        watcher = Watcher(settings=settings, js=c.js, kube=c.kube, publisher=c.publisher)
        c.health.add("seeded from the server stream, following bundles", watcher.ready.is_set)
        try:
            await watcher.run()
        finally:
            for task in watcher.watches.values():
                task.cancel()
