"""The Watcher: list+watch driftbus-owned objects, publish serverSHA and health.

One list+watch per GVK found in the cluster's bundles (plus configured extras), restricted by
the ownership label. A server event is published only when an object's SHA or health changed
against what the bus already holds — the cache is seeded from the cluster's checkpoint and the
SERVER facts after it at start-up (``stored.facts``), so a restarted watcher republishes
nothing. Facts go out together, one message (``ServerFacts``) per list page and per burst of
watch events (``bursts``): a cold apply of 1,000 objects is a few dozen messages, not 1,000.
On ``410 Gone`` it relists and publishes tombstones for cached objects that vanished; on a
dropped stream it resumes from the last resourceVersion.

A fact is acknowledged by JetStream before the watch moves past it (cache and resourceVersion
advance only then), so a NATS outage longer than the publisher's retries loses nothing: the
watch fails, its supervisor relists, and what did not land is published again. Every watch is
supervised; readiness and the heartbeat (``members``) say when one is not running, and the
heartbeat says when every kind has completed its initial list — prune waits for that.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
from typing import Any

from schemas.codec import WireError, decode, encode
from schemas.messages import Bundle, Health, KindScope, ServerEvent, ServerFacts
from schemas.subjects import ObjectKey, SubjectError, batch_subject, cluster_filter
from services.common import bus, telemetry
from services.core.health import ended, retiring
from services.core.manifest import OWNER_LABEL, bundle_kinds
from services.core.scope import BUILTIN
from services.core.sha import HashError
from services.kube import Gone, KubeClient, KubeError, NotFound, Resource, WatchEvent
from services.revisions.publish import BundleError, load_manifests
from services.stored import facts as stored_facts
from services.watcher.bursts import batches, bursts
from services.watcher.facts import Change, Seen, change, tombstone
from services.watcher.settings import WatcherSettings

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


class Watcher:
    def __init__(
        self,
        *,
        settings: WatcherSettings,
        js: bus.JetStream,
        kube: KubeClient,
        publisher: bus.Publisher,
    ) -> None:
        self.s = settings
        self.js = js
        self.kube = kube
        self.pub = publisher
        self.cache: dict[ObjectKey, Seen] = {}
        self.watches: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.listed: set[tuple[str, str]] = set()
        """Kinds whose current list+watch has completed its initial list."""
        self.problems: dict[tuple[str, str], str] = {}
        """Kinds whose watch is not running as it should, and why."""
        self.scopes: dict[tuple[str, str], bool] = {}
        """(group, kind) → namespaced, for the custom kinds discovery found (heartbeat)."""
        self.scopes_changed = asyncio.Event()
        """Set when a scope is learned: the heartbeat goes out now, not at its next beat (a
        tenant's revision waits for the scopes of its kinds)."""
        self.ready = asyncio.Event()
        self.published = 0
        self.relists = 0

    def synced(self) -> tuple[bool, list[str]]:
        """(every watch has listed and none is broken, the problems): the heartbeat's state,
        and prune's precondition."""
        problems = [f"{k} {v}: {why}" for (v, k), why in sorted(self.problems.items())]
        return (
            self.ready.is_set() and not problems and self.listed >= set(self.watches),
            problems,
        )

    def discovered(self) -> list[KindScope]:
        """The heartbeat's scopes, as discovery reported them: of every custom kind the server
        serves. Every heartbeat carries them all: the planner reads only the last heartbeat,
        so one that left some out would hide them (about 70 bytes per kind; NATS's 1 MiB
        payload holds some 14,000)."""
        return [KindScope(g, k, n) for (g, k), n in sorted(self.scopes.items())]

    def healthy(self) -> bool:
        """Readiness: seeded, following bundles, and every watch running."""
        return self.ready.is_set() and not self.problems

    async def run(self) -> None:
        await self._seed()
        await self._discover_scopes()
        for spec in self.s.extra_kinds:
            api_version, _, kind = spec.rpartition("/")
            self._ensure_watch(api_version, kind)
        follower = bus.Follower(
            self.js,
            bus.BUNDLES,
            cluster_filter("bundle", self.s.cluster),
            idle_heartbeat=bus.QUIET_HEARTBEAT,  # one per cluster: rare, on a quiet bus
        )
        self.ready.set()
        async for msg in follower.messages():
            with telemetry.tracer.start_as_current_span(
                "watch bundle kinds",
                context=telemetry.traced(msg.headers),
                attributes={"cluster": self.s.cluster, "messaging.subject": msg.subject},
            ) as span:
                try:
                    bundle = decode(msg.data, Bundle)
                    # the message names its kinds; an older publisher's does not, so read them
                    kinds = bundle.kinds or bundle_kinds(await load_manifests(self.js, bundle))
                except (WireError, BundleError) as exc:
                    log.warning("ignoring bundle: %s", exc)  # the planner reports it to the user
                    continue
                span.set_attributes({"bundle": bundle.bundle, "revision": bundle.revision})
                for spec in kinds:
                    api_version, _, kind = spec.rpartition("/")
                    if api_version and kind:
                        self._ensure_watch(api_version, kind)

    async def _discover_scopes(self) -> None:
        """Every custom kind's scope the server serves, in one aggregated discovery request, for
        the planner (heartbeat): it checks a tenant's objects by scope before any is watched."""
        try:
            served = await self.kube.discovery.served_scopes()
        except KubeError as exc:  # learned kind by kind then, as bundles name them
            log.warning("aggregated discovery failed: %s", exc)
            return
        self._learn_scopes({gk: n for gk, n in served.items() if gk not in BUILTIN})

    def _learn_scopes(self, scopes: dict[tuple[str, str], bool]) -> None:
        if any(self.scopes.get(gk) != n for gk, n in scopes.items()):
            self.scopes.update(scopes)
            self.scopes_changed.set()

    async def _seed(self) -> None:
        """Load what the bus already says of the cluster's objects (its checkpoint and the
        SERVER facts after it: ``stored.facts``), so only real changes are published,
        and what vanished meanwhile is tombstoned by the first list."""
        found = await stored_facts.live(self.js, [self.s.cluster])
        for ev in found.get(self.s.cluster, {}).values():
            try:
                self.cache[ev.key] = Seen.of(ev, 0)
            except ValueError as exc:
                log.warning("ignoring the server fact of %s: %s", ev.key, exc)
        log.info("seeded %d objects from the bus", len(self.cache))

    def _ensure_watch(self, api_version: str, kind: str) -> None:
        if (api_version, kind) not in self.watches:
            # a fresh context: the watch outlives the bundle (and its trace) that started it
            self.watches[(api_version, kind)] = asyncio.create_task(
                self._supervise(api_version, kind),
                name=f"watch {kind}.{api_version}",
                context=contextvars.Context(),
            )

    async def _supervise(self, api_version: str, kind: str) -> None:
        """Keep one kind's list+watch running: an unexpected error (a bug, NATS away longer
        than the publisher retries) is logged, shown in readiness and the heartbeat, and the
        watch starts over with a relist — which republishes what was not yet acknowledged and
        tombstones what vanished meanwhile."""
        ident = (api_version, kind)
        delay = self.s.retry_delay
        while True:
            try:
                await self._watch_kind(api_version, kind)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("watch %s %s stopped; relisting in %.0fs", kind, api_version, delay)
                self.problems[ident] = f"watch stopped: {type(exc).__name__}: {exc}"
                self.listed.discard(ident)
                WATCH_RESTARTS.add(1, {"kind": kind})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _resource(self, api_version: str, kind: str) -> Resource:
        while True:
            try:
                res = await self.kube.discovery.resource(api_version, kind)
            except NotFound:
                # Not served (yet): a CRD may be on its way. Only this group-version is refetched.
                # Nothing of this kind can exist either: its (empty) view is complete.
                self.listed.add((api_version, kind))
                await asyncio.sleep(self.s.retry_delay)
            except KubeError as exc:
                log.warning("discovery of %s %s failed: %s", api_version, kind, exc)
                await asyncio.sleep(self.s.retry_delay)
            else:
                if (res.group, res.kind) not in BUILTIN:
                    self._learn_scopes({(res.group, res.kind): res.namespaced})
                return res

    async def _watch_kind(self, api_version: str, kind: str) -> None:
        ident = (api_version, kind)
        res = await self._resource(api_version, kind)
        selector = OWNER_LABEL
        while True:  # list, then watch until 410 Gone
            self.listed.discard(ident)
            try:
                rv = await self._list(res, selector)
            except KubeError as exc:
                log.warning("list %s failed: %s", res, exc)
                self.problems[ident] = f"list failed: {exc}"
                await asyncio.sleep(self.s.retry_delay)
                continue
            self.listed.add(ident)
            self.problems.pop(ident, None)
            while True:
                try:
                    stream = self.kube.watch(
                        res,
                        resource_version=rv,
                        label_selector=selector,
                        timeout_seconds=self.s.watch_timeout,
                    )
                    async with contextlib.aclosing(bursts(stream, most=self.s.batch_events)) as b:
                        async for burst in b:
                            # a burst's facts are published (acknowledged) before the watch
                            # moves past it
                            await self.handle_burst(burst)
                            rv = next(
                                (e.resource_version for e in reversed(burst) if e.resource_version),
                                rv,
                            )
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
        resourceVersion to watch from, once every fact of the list is acknowledged."""
        present = set()
        rv = ""
        async for items, page_rv in self.kube.list_pages(
            res, label_selector=selector, limit=self.s.list_page_size
        ):
            rv = page_rv
            page = []
            for obj in items:
                try:
                    key, change = self._change(obj)
                except (HashError, SubjectError) as exc:
                    log.error("list %s: cannot handle an object: %s", res, exc)
                    continue
                present.add(key)
                if change is not None:
                    page.append(change)
            # a page's publishes go out together; the cache moves only once they landed
            await self._publish_all(page)
        gone = [
            key
            for key, seen in self.cache.items()
            if (key.group, key.kind) == (res.group, res.kind)
            and key not in present
            and seen.sha is not None
        ]
        await self._publish_all([c for key in gone if (c := self._tombstone(key, rv)) is not None])
        return rv

    def _change(self, obj: dict[str, Any]) -> tuple[ObjectKey, Change | None]:
        return change(
            obj,
            self.cache.get(ObjectKey.of(obj)),
            self.s.cluster,
            self.s.watcher_id,
            whole=self.s.whole_object_drift,
        )

    async def handle_burst(self, burst: list[WatchEvent]) -> None:
        """Publish what a burst of watch events says, one message per ``batches`` cut, and
        remember it once acknowledged (raises what publishing raised: the watch relists)."""
        await self._publish_all(self._burst_changes(burst))

    def _burst_changes(self, burst: list[WatchEvent]) -> list[Change]:
        """The facts a burst of watch events says, in order (bookmarks say none). Within a
        burst the cache has not moved yet: an object changed twice gets both facts, in order."""
        out: list[Change] = []
        for ev in burst:
            try:
                if ev.type in ("ADDED", "MODIFIED"):
                    _, c = self._change(ev.object)
                elif ev.type == "DELETED":
                    c = self._tombstone(
                        ObjectKey.of(ev.object),
                        ev.resource_version,
                        retired=retiring(ev.object),  # its last state says
                        ended=ended(ev.object),
                    )
                else:
                    continue
            except (HashError, SubjectError) as exc:
                log.error("watch %s: cannot handle an event: %s", ev.object.get("kind"), exc)
                continue
            if c is not None:
                out.append(c)
        return out

    def _tombstone(
        self,
        key: ObjectKey,
        rv: str,
        *,
        retired: bool = False,
        ended: tuple[Health, str] | None = None,
    ) -> Change | None:
        seen = self.cache.get(key)
        if seen is not None and seen.sha is None:
            return None
        if not retired and seen is not None and seen.retiring:
            retired, ended = True, (seen.health, seen.why)
        return tombstone(key, rv, self.s.cluster, self.s.watcher_id, retired=retired, ended=ended)

    async def _publish_all(self, changes: list[Change]) -> None:
        """Publish facts, a batch per message (``bursts.batches``), and wait for every
        acknowledgement; only then remember them as seen. A failure (NATS away longer than the
        publisher retries) raises: the supervisor relists and publishes again what did not land.

        Another watcher of the cluster may publish the same objects: the planner keeps the
        newest fact of each by resourceVersion, so nothing here reads SERVER first."""
        if not changes:
            return
        encoded = [encode(ev) for _, ev in changes]
        cuts = batches([len(e) for e in encoded], most=self.s.batch_events)
        results = await asyncio.gather(
            *(self._publish_batch([changes[i][1] for i in cut]) for cut in cuts),
            return_exceptions=True,
        )
        failed: BaseException | None = None
        for cut, result in zip(cuts, results, strict=True):
            if isinstance(result, BaseException):
                failed = failed or result
                continue
            for i in cut:
                seen, ev = changes[i]
                self.cache[ev.key] = dataclasses.replace(seen, seq=result)
            self.published += len(cut)
            PUBLISHED.add(len(cut))
        if failed is not None:
            raise failed

    async def _publish_batch(self, events: list[ServerEvent]) -> int:
        """One message of facts; its stream sequence once acknowledged. Its subject is new
        (``batch_subject``), and so its Nats-Msg-Id: a retry across a reconnect lands once."""
        subject = batch_subject("server", self.s.cluster, bus.unique_id())
        data = encode(ServerFacts(cluster=self.s.cluster, events=events, watcher=self.s.watcher_id))
        ack = await (await self.pub.publish(subject, data, msg_id=subject))
        return int(ack.seq)
