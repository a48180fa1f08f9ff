"""The planner process: the decision rule over BUNDLES, SERVER, APPLIED and failure statuses.

Start-up rebuilds every entry from the compacted streams with ``restore`` (no decision before the
rebuild completes), then evaluates each desired object once: with nothing changed that is all
hits and zero intents. Live, each fact goes through ``step``; what it returns is published as an
intent (with the desired manifest and manifestSHA) and as a decision record. Bundle status is a
projection of the same entries, published when it changes.

Intent ids are derived from the state that caused them (bundle sequence, applied and server
resourceVersions), so a restarted planner re-emitting an intent it already sent is deduplicated
by JetStream, while a new cause always gets through.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.metrics import Observation

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    Bundle,
    BundleCounts,
    BundlePhase,
    BundleStatus,
    DecisionAction,
    DecisionReason,
    DecisionRecord,
    DeleteIntent,
    Health,
    ObjectPhase,
    ObjectStatus,
    ServerEvent,
)
from schemas.subjects import (
    PREFIX,
    ObjectKey,
    SubjectError,
    bundle_status_subject,
    encode_token,
    key_tokens,
    object_subject,
    parse_subject,
)
from services.common import bus, telemetry
from services.common.bundles import BundleError, load_manifests
from services.common.runtime import connections
from services.common.settings import replica_id, setting
from services.core.manifest import (
    ManifestError,
    apply_order,
    check_bundle_name,
    check_size,
    key_of,
    owned,
)
from services.core.sha import HashError, object_sha
from services.planner.decide import (
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Removed,
    reevaluate,
    restore,
    step,
)
from services.planner.shards import Coordinator, heartbeat_problem
from services.planner.store import EntryStore, Slot

log = logging.getLogger("driftbus.planner")
DECISIONS = telemetry.meter.create_counter(
    "driftbus_decisions",
    description="planner decisions by action and reason (action hit: a cache hit, nothing sent)",
)
DRIFT_DETECTED = telemetry.meter.create_counter(
    "driftbus_drift_detected", description="objects changed or deleted out of band, by cluster"
)
STATUS_LAG = telemetry.meter.create_histogram(
    "driftbus_status_publish_lag_seconds",
    unit="s",
    description="from the first change to a bundle to its status published",
)
MAX_LISTED_FAILURES = 50


@dataclasses.dataclass(frozen=True)
class PlannerSettings(telemetry.TelemetrySettings, bus.NatsSettings):
    planner_id: str = setting(
        "", "name of this replica in intents and decisions (default: <hostname>-<pid>)"
    )
    status_interval: float = setting(
        0.2, "seconds between bundle status recomputations; changes are coalesced within it"
    )
    stats_interval: float = setting(
        30.0, "seconds between log lines with hit/miss counts by reason (only when changed)"
    )
    stream_replicas: int = setting(1, "replicas of the JetStream streams (3 on a NATS cluster)")
    heartbeat_interval: float = setting(
        2.0, "seconds between this replica's heartbeats (and claim rounds) in the shards bucket"
    )
    heartbeat_timeout: float = setting(
        10.0,
        "seconds without a heartbeat after which a replica counts as dead and others take its "
        "clusters over (at least twice the interval)",
    )


def _hex(sha: bytes | None) -> str | None:
    return sha.hex() if sha is not None else None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _rv(text: str) -> int:
    return int(text) if text.isdigit() else 0


@dataclasses.dataclass
class BundleView:
    cluster: str
    name: str
    revision: str
    seq: int
    prune: bool
    force: bool
    allow_replace: bool
    keys: set[ObjectKey]
    errors: list[str]
    """Objects of this revision refused before planning (invalid manifests, duplicates)."""


_manifest_json = msgspec.json.Encoder()


class Planner:
    """Plans one cluster, under the fencing token of this replica's claim on it."""

    def __init__(
        self,
        *,
        settings: PlannerSettings,
        js: JetStreamContext,
        publisher: bus.Publisher,
        cluster: str,
        fencing_token: int = 0,
        owns: Callable[[], bool] = lambda: True,
    ) -> None:
        self.s = settings
        self.js = js
        self.pub = publisher
        self.cluster = cluster
        self.fencing_token = fencing_token
        self._owns = owns
        self.entries = EntryStore()  # the SHA cache, packed (≈ 220 bytes per object)
        self.manifests: dict[Slot, bytes] = {}
        """Desired manifests as compact JSON: decoded only for the rare intent (a miss)."""
        self.health: dict[Slot, tuple[Health, str]] = {}
        self.failures: dict[Slot, str] = {}
        self.bundles: dict[tuple[str, str], BundleView] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        self.live = False
        self.ready = asyncio.Event()
        self._dirty: set[tuple[str, str]] = set()
        self._dirty_since: dict[tuple[str, str], float] = {}
        self._trace: dict[tuple[str, str], Context] = {}
        """Per bundle, the span its latest traced event was handled in: status continues it."""
        self.pending: int | None = None
        """Intents of this cluster queued or being applied (None until known)."""
        self._last_status: dict[tuple[str, str], tuple[Any, ...]] = {}

    # --- the run loop ---------------------------------------------------------------------

    async def run(self) -> None:
        queue: asyncio.Queue[tuple[str, Msg]] = asyncio.Queue(maxsize=10_000)
        c = encode_token(self.cluster)
        followers = {
            "bundle": bus.Follower(self.js, bus.BUNDLES, f"{PREFIX}.bundle.{c}.>"),
            "server": bus.Follower(self.js, bus.SERVER, f"{PREFIX}.server.{c}.>"),
            "applied": bus.Follower(self.js, bus.APPLIED, f"{PREFIX}.applied.{c}.>"),
            "status": bus.Follower(self.js, bus.STATUS, f"{PREFIX}.status.{c}.*.object.>"),
        }

        async def pump(kind: str, f: bus.Follower) -> None:
            async for msg in f.messages():
                await queue.put((kind, msg))

        tasks = [asyncio.create_task(pump(k, f), name=f"follow {k}") for k, f in followers.items()]
        tasks.append(asyncio.create_task(self._status_loop(), name="bundle status"))
        tasks.append(asyncio.create_task(self._pending_loop(), name="intents pending"))
        try:
            while True:
                if (
                    not self.live
                    and queue.empty()
                    and all(f.caught_up.is_set() for f in followers.values())
                ):
                    await self._go_live()
                try:
                    # wait_for costs a timer and a task per call: only when there is nothing
                    kind, msg = queue.get_nowait()
                except asyncio.QueueEmpty:
                    try:
                        kind, msg = await asyncio.wait_for(queue.get(), timeout=0.2)
                    except TimeoutError:
                        continue
                await self._handle(kind, msg)
        finally:
            for t in tasks:
                t.cancel()
            # collected, so a follower that died with the connection is not reported at exit
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _go_live(self) -> None:
        """The rebuild is complete: evaluate every desired object once, then prune.

        A bundle whose objects now need writes continues the trace of its publish: on a
        cluster just claimed, its first bundle arrives in the rebuild, and on a take-over the
        intents re-sent belong to the publish they carry out. Hits start no span, so a restart
        with nothing changed adds nothing to old traces."""
        self.live = True
        slots = sorted(
            (s for s, e in self.entries.items() if e.manifest_sha is not None),
            key=lambda s: apply_order(s[1]),
        )
        by_bundle: dict[str, list[tuple[Slot, Decision | None]]] = {}
        for slot in slots:
            self.entries[slot], decision = reevaluate(self.entries[slot])
            by_bundle.setdefault(self.entries[slot].bundle, []).append((slot, decision))
        for bundle, decided in by_bundle.items():
            ident = (self.cluster, bundle)
            ctx = self._trace.get(ident)
            if ctx is None or not any(d is not None and d.writes for _, d in decided):
                for slot, decision in decided:
                    await self._publish_decision(slot, decision, after_rebuild=True)
                continue
            with telemetry.tracer.start_as_current_span(
                "plan bundle",
                context=ctx,
                attributes={"cluster": self.cluster, "bundle": bundle, "after_rebuild": True},
            ) as span:
                self._trace[ident] = trace.set_span_in_context(span)
                for slot, decision in decided:
                    await self._publish_decision(slot, decision, after_rebuild=True)
        for view in list(self.bundles.values()):
            await self._prune(view)
        self._dirty.update(self.bundles)
        log.info(
            "cluster %s: rebuilt %d objects in %d bundles; live",
            self.cluster,
            len(self.entries),
            len(self.bundles),
        )
        self.ready.set()

    async def _handle(self, kind: str, msg: Msg) -> None:
        ctx = telemetry.traced(msg.headers)
        if not self.live:
            await self._handle_message(kind, msg)
            if kind == "bundle" and ctx is not None:
                # no span while rebuilding; remembered in case going live sends its intents
                with contextlib.suppress(SubjectError):
                    self._trace[(self.cluster, parse_subject(msg.subject).bundle or "")] = ctx
            return
        if ctx is None:
            await self._handle_message(kind, msg)
            return
        with telemetry.tracer.start_as_current_span(
            f"plan {kind}", context=ctx, attributes={"messaging.subject": msg.subject}
        ):
            await self._handle_message(kind, msg)

    async def _handle_message(self, kind: str, msg: Msg) -> None:
        try:
            if kind == "bundle":
                await self._on_bundle(msg)
            elif kind == "server":
                ev = decode(msg.data, ServerEvent)
                sha = bytes.fromhex(ev.server_sha) if ev.server_sha else None
                slot = (ev.cluster, ev.key)
                if ev.deleted:
                    self.health.pop(slot, None)
                else:
                    self.health[slot] = (ev.health, ev.health_message)
                await self._fold(
                    slot, Observed(_rv(ev.resource_version), sha, ev.deleted, ev.bundle)
                )
            elif kind == "applied":
                ap = decode(msg.data, AppliedEvent)
                await self._fold(
                    (ap.cluster, ap.key),
                    Applied(
                        bytes.fromhex(ap.manifest_sha),
                        bytes.fromhex(ap.apply_sha) if ap.apply_sha else None,
                        _rv(ap.resource_version),
                        ap.deleted,
                        ap.applied_at.timestamp() if ap.applied_at else 0.0,
                    ),
                )
                self.failures.pop((ap.cluster, ap.key), None)
            elif kind == "status":
                st = decode(msg.data, ObjectStatus)
                log.debug(
                    "%s: status %s for manifest %s", st.key, st.phase, (st.manifest_sha or "-")[:12]
                )
                if st.phase in (ObjectPhase.FAILED, ObjectPhase.CONFLICT) and st.manifest_sha:
                    self.failures[(st.cluster, st.key)] = f"{st.phase}: {st.message}"
                    failed_at = st.at.timestamp() if st.at else 0.0
                    await self._fold(
                        (st.cluster, st.key), Failed(bytes.fromhex(st.manifest_sha), failed_at)
                    )
        except (WireError, ValueError) as exc:
            # Bad input never stops the planner: report and carry on.
            log.error("ignoring message on %s: %s", msg.subject, exc)
            self.counters["bad_messages"] += 1

    async def _fold(self, slot: Slot, event: Event) -> None:
        entry = self.entries.get(slot) or Entry(slot[1])
        if not self.live:
            self.entries[slot] = restore(entry, event)
            return
        entry, decision = step(entry, event)
        self.entries[slot] = entry
        if entry.bundle:
            self._mark_dirty((slot[0], entry.bundle))
            span = trace.get_current_span()
            if span.get_span_context().is_valid:  # the bundle's status continues this trace
                self._trace[(slot[0], entry.bundle)] = trace.set_span_in_context(span)
        if decision is not None:
            await self._publish_decision(slot, decision)

    # --- bundles --------------------------------------------------------------------------

    async def _on_bundle(self, msg: Msg) -> None:
        try:
            where = parse_subject(msg.subject)
        except SubjectError as exc:
            log.error("bundle on a malformed subject: %s", exc)
            return
        cluster, name = where.cluster, where.bundle or ""
        try:
            bundle = decode(msg.data, Bundle)
            if (bundle.cluster, bundle.bundle) != (cluster, name):
                raise ManifestError(
                    f"message names {bundle.cluster}/{bundle.bundle} but was "
                    f"published to the subject of {cluster}/{name}"
                )
            check_bundle_name(bundle.bundle)
            manifests = await load_manifests(self.js, bundle)
        except (WireError, BundleError, ManifestError) as exc:
            await self._bundle_refused(cluster, name, str(exc))
            return
        seq = msg.metadata.sequence.stream
        view = BundleView(
            cluster,
            name,
            bundle.revision,
            seq,
            bundle.options.prune,
            bundle.options.force,
            bundle.options.allow_replace,
            set(),
            [],
        )
        previous = self.bundles.get((cluster, name))
        desired: list[tuple[Slot, bytes, bytes]] = []
        seen: dict[ObjectKey, int] = {}
        for i, raw in enumerate(manifests):
            where_i = f"{name}: manifests[{i}]"
            try:
                key = key_of(raw, where_i)
                object_subject("intent", cluster, key)  # its subjects fit (a name is ≤ 253)
                if key in seen:
                    raise ManifestError(f"{where_i}: {key} duplicates manifests[{seen[key]}]")
                manifest = owned(raw, name)
                encoded = check_size(_manifest_json.encode(manifest), f"{where_i}: {key}")
                sha = object_sha(manifest)
            except (ManifestError, HashError) as exc:
                view.errors.append(str(exc))
                continue
            except SubjectError as exc:
                view.errors.append(f"{where_i}: {exc}")
                continue
            seen[key] = i
            view.keys.add(key)
            desired.append(((cluster, key), encoded, sha))
        self.bundles[(cluster, name)] = view
        self._mark_dirty((cluster, name))
        span = trace.get_current_span()
        if span.get_span_context().is_valid:
            span.set_attributes({"cluster": cluster, "bundle": name, "revision": view.revision})
            self._trace[(cluster, name)] = trace.set_span_in_context(span)
        # Every publish gets an answer, even when nothing changed (a waiting `publish --wait`).
        self._last_status.pop((cluster, name), None)
        desired.sort(key=lambda d: apply_order(d[0][1]))
        for slot, encoded, sha in desired:
            self.manifests[slot] = encoded
            await self._fold(slot, Desired(name, bundle.revision, sha, bundle.options.prune))
        if previous is not None:
            for key in previous.keys - view.keys:
                if self.live:
                    await self._fold(
                        (cluster, key), Removed(name, bundle.revision, bundle.options.prune)
                    )
        if self.live:
            await self._prune(view)
        if previous is not None:
            # after the prune decisions, which need the apiVersion of what they delete
            for key in previous.keys - view.keys:
                self.manifests.pop((cluster, key), None)
        for err in view.errors:
            log.warning("bundle %s/%s@%s: %s", cluster, name, bundle.revision, err)

    async def _prune(self, view: BundleView) -> None:
        """Level-triggered prune: live objects carrying this bundle's label, not in its revision.

        Covers revisions that changed while the planner was down: nothing relies on having seen
        the previous revision.
        """
        for slot, entry in list(self.entries.items(cluster=view.cluster)):
            if slot[1] in view.keys or entry.inflight is not None:
                continue
            if (
                entry.owner_bundle == view.name
                and entry.manifest_sha is None
                and entry.server_rv > 0
                and not entry.server_deleted
                and entry.bundle in ("", view.name)
            ):
                await self._fold(slot, Removed(view.name, view.revision, view.prune))

    async def _bundle_refused(self, cluster: str, name: str, reason: str) -> None:
        log.error("bundle %s/%s refused: %s", cluster, name, reason)
        self.counters["bundles_refused"] += 1
        if not name:
            return
        status = BundleStatus(
            cluster=cluster or "?",
            bundle=name,
            revision="?",
            phase=BundlePhase.FAILED,
            counts=BundleCounts(),
            message=f"bundle refused: {reason}",
            at=_now(),
        )
        try:
            subject = bundle_status_subject(cluster, name)
        except SubjectError:
            return
        await self.pub.publish(subject, encode(status), msg_id=f"refused:{subject}:{_now()}")

    # --- decisions and intents ------------------------------------------------------------

    async def _publish_decision(
        self, slot: Slot, d: Decision | None, *, after_rebuild: bool = False
    ) -> None:
        if d is None:
            return
        if not trace.get_current_span().get_span_context().is_valid:
            await self._emit_decision(slot, d, after_rebuild=after_rebuild)
            return
        e = self.entries[slot]
        bundle = e.bundle or e.owner_bundle or ""
        view = self.bundles.get((slot[0], bundle))
        with telemetry.tracer.start_as_current_span(
            "decide",
            attributes={
                "cluster": slot[0],
                "bundle": bundle,
                "revision": view.revision if view else "",
                "object": str(slot[1]),
                "decision": str(d.action),
                "reason": str(d.reason),
            },
        ):
            await self._emit_decision(slot, d, after_rebuild=after_rebuild)

    async def _emit_decision(self, slot: Slot, d: Decision, *, after_rebuild: bool) -> None:
        cluster, key = slot
        e = self.entries[slot]
        view = self.bundles.get((cluster, e.bundle)) if e.bundle else None
        self.counters[f"{d.action}:{d.reason}"] += 1
        DECISIONS.add(1, {"action": str(d.action), "reason": str(d.reason), "cluster": cluster})
        if d.reason in (DecisionReason.DRIFT, DecisionReason.DELETED):
            DRIFT_DETECTED.add(1, {"cluster": cluster})
        log.debug(
            "%s: %s (%s)%s", key, d.action, d.reason, " after rebuild" if after_rebuild else ""
        )
        revision = e.revision or (view.revision if view else "")
        if d.action is DecisionAction.APPLY:
            encoded = self.manifests.get(slot)
            if encoded is None or e.manifest_sha is None or view is None:
                log.error("%s: decided %s but its manifest is unknown", key, d.reason)
                return
            cause = f"{view.seq}.{e.applied_rv}.{e.server_rv}"
            intent: ApplyIntent | DeleteIntent = ApplyIntent(
                cluster=cluster,
                key=key,
                bundle=e.bundle,
                revision=revision,
                manifest_sha=e.manifest_sha.hex(),
                manifest=msgspec.json.decode(encoded),
                reason=str(d.reason),
                force=view.force,
                allow_replace=view.allow_replace,
                issued_at=_now(),
                planner=self.s.planner_id,
                fencing_token=self.fencing_token,
            )
            # the token is part of the id: a planner that took the cluster over re-sends what
            # was in flight, and its intents must not be dropped as repeats of the deposed one's
            msg_id = (
                f"{key_tokens(key)}|{e.manifest_sha.hex()[:16]}|{d.reason}|{cause}"
                f"|{self.fencing_token}"
            )
        elif d.action is DecisionAction.DELETE:
            encoded = self.manifests.get(slot)
            manifest = msgspec.json.decode(encoded) if encoded else {}
            api_version = str(manifest.get("apiVersion", ""))
            intent = DeleteIntent(
                cluster=cluster,
                key=key,
                api_version=api_version,
                bundle=e.owner_bundle,
                revision=revision,
                issued_at=_now(),
                planner=self.s.planner_id,
                fencing_token=self.fencing_token,
            )
            msg_id = f"{key_tokens(key)}|delete|{e.server_rv}|{self.fencing_token}"
        else:
            intent = None  # type: ignore[assignment]
            msg_id = ""
        if intent is not None and not self._owns():
            # fenced off ourselves (heartbeats failing or the claim moved on): the replica now
            # planning this cluster decides instead; appliers would drop the intent anyway
            log.warning("%s: not sending %s: no longer this cluster's planner", key, d.action)
            return
        if intent is not None:
            await self.pub.publish(
                object_subject("intent", cluster, key), encode(intent), msg_id=msg_id
            )
        record = DecisionRecord(
            cluster=cluster,
            key=key,
            bundle=e.bundle or e.owner_bundle,
            revision=revision,
            action=d.action,
            reason=d.reason,
            manifest_sha=_hex(e.manifest_sha),
            last_applied_manifest_sha=_hex(e.applied_manifest_sha),
            apply_sha=_hex(e.apply_sha),
            server_sha=_hex(e.server_sha),
            at=_now(),
            planner=self.s.planner_id,
        )
        await self.pub.publish(
            object_subject("decision", cluster, key),
            encode(record),
            msg_id=f"decision:{self.s.planner_id}:{id(record)}:{_now()}",
        )

    # --- bundle status --------------------------------------------------------------------

    def bundle_status(self, view: BundleView) -> BundleStatus:
        applied = ready = failed = 0
        degraded = []
        failures = list(view.errors)
        failed_keys = []
        for key in view.keys:
            slot = (view.cluster, key)
            p = self.entries.progress(slot)
            if p is None:
                continue
            if p.failed and not p.applied:
                failed += 1
                failed_keys.append(key)
                continue
            if p.applied:
                applied += 1
                h, why = self.health.get(slot, (Health.UNKNOWN, ""))
                if h is Health.READY and p.observed:
                    ready += 1
                elif h is Health.FAILED:
                    degraded.append(f"{key}: unhealthy: {why}")
        # sorted only now: sorting every key of a big bundle on every tick cost more than counting
        for key in sorted(failed_keys, key=apply_order):
            failures.append(f"{key}: {self.failures.get((view.cluster, key), 'failed')}")
        degraded.sort()
        total = len(view.keys) + len(view.errors)
        failed += len(view.errors)
        if failed:
            phase = BundlePhase.FAILED
        elif degraded:
            phase = BundlePhase.DEGRADED
        elif applied == ready == total:
            phase = BundlePhase.READY
        else:
            phase = BundlePhase.RECONCILING
        listed = (failures + degraded)[:MAX_LISTED_FAILURES]
        message = {
            BundlePhase.READY: f"revision {view.revision} applied and ready",
            BundlePhase.FAILED: f"{failed} of {total} objects failed",
            BundlePhase.DEGRADED: f"{len(degraded)} objects unhealthy",
            BundlePhase.RECONCILING: f"{applied}/{total} applied, {ready}/{total} ready",
        }[phase]
        return BundleStatus(
            cluster=view.cluster,
            bundle=view.name,
            revision=view.revision,
            phase=phase,
            counts=BundleCounts(total=total, applied=applied, failed=failed, ready=ready),
            message=message,
            failed_objects=listed,
            at=_now(),
        )

    def cache_stats(self) -> dict[str, Any]:
        """Hits and misses by reason since start: what explains the hit ratio."""
        hits = self.counters.get("hit:hit", 0)
        misses = {
            k.split(":", 1)[1]: v
            for k, v in self.counters.items()
            if k.startswith(("apply:", "delete:"))
        }
        total = hits + sum(misses.values())
        return {
            "hits": hits,
            "misses": misses,
            "hit_ratio": round(hits / total, 4) if total else None,
            "objects": len(self.entries),
            "bad_messages": self.counters["bad_messages"],
        }

    def _mark_dirty(self, ident: tuple[str, str]) -> None:
        self._dirty.add(ident)
        self._dirty_since.setdefault(ident, time.monotonic())

    async def _pending_loop(self) -> None:
        """Intents waiting (queued + being applied): the autoscaling signal."""
        while True:
            await asyncio.sleep(self.s.stats_interval / 6)
            if self.bundles and (n := await bus.intents_pending(self.js, self.cluster)) is not None:
                self.pending = n

    async def _status_loop(self) -> None:
        last_stats: dict[str, Any] = {}
        next_stats = 0.0
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.s.status_interval)
            if not self.live:
                continue
            if loop.time() >= next_stats:
                stats = self.cache_stats()
                if stats != last_stats:
                    log.info("cluster %s: cache: %s", self.cluster, stats)
                    last_stats = stats
                next_stats = loop.time() + self.s.stats_interval
            dirty, self._dirty = self._dirty, set()
            now = time.monotonic()
            for ident in dirty:
                since = self._dirty_since.pop(ident, now)
                view = self.bundles.get(ident)
                if view is None:
                    continue
                st = self.bundle_status(view)
                fingerprint = (st.revision, st.phase, st.counts, tuple(st.failed_objects))
                if self._last_status.get(ident) == fingerprint:
                    continue
                self._last_status[ident] = fingerprint
                subject = bundle_status_subject(view.cluster, view.name)
                with telemetry.tracer.start_as_current_span(
                    "publish bundle status",
                    context=self._trace.get(ident),
                    attributes={
                        "cluster": view.cluster,
                        "bundle": view.name,
                        "revision": st.revision,
                        "phase": str(st.phase),
                    },
                ):
                    await self.pub.publish(
                        subject, encode(st), msg_id=f"{subject}:{hash(fingerprint)}:{_now()}"
                    )
                STATUS_LAG.record(time.monotonic() - since)


class Replica:
    """One planner process: plans the clusters its claims give it, one ``Planner`` each."""

    def __init__(
        self, *, settings: PlannerSettings, js: JetStreamContext, publisher: bus.Publisher
    ) -> None:
        self.s = settings
        self.js = js
        self.pub = publisher
        self.planners: dict[str, Planner] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.shards = Coordinator(
            js=js,
            planner_id=settings.planner_id,
            interval=settings.heartbeat_interval,
            timeout=settings.heartbeat_timeout,
            start=self.start_cluster,
            stop=self.stop_cluster,
        )
        telemetry.meter.create_observable_gauge(
            "driftbus_intents_pending",
            [self._observe_pending],
            description="intents queued or being applied, per cluster: scale appliers on it",
        )
        telemetry.meter.create_observable_gauge(
            "driftbus_cache_hit_ratio",
            [self._observe_hit_ratio],
            description="decisions that were cache hits since start (1.0: nothing re-applied)",
        )

    def ready(self) -> bool:
        return self.shards.ready.is_set() and all(p.ready.is_set() for p in self.planners.values())

    async def start_cluster(self, cluster: str, token: int) -> None:
        planner = Planner(
            settings=self.s,
            js=self.js,
            publisher=self.pub,
            cluster=cluster,
            fencing_token=token,
            owns=lambda: self.shards.owns(cluster, token),
        )
        task = asyncio.create_task(planner.run(), name=f"plan {cluster}")
        task.add_done_callback(lambda t: self._ended(cluster, t))
        self.planners[cluster] = planner
        self._tasks[cluster] = task

    def _ended(self, cluster: str, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._tasks.get(cluster) is not task:
            return
        log.error("planning cluster %s stopped: %r; claiming it afresh", cluster, task.exception())
        self._tasks.pop(cluster, None)
        self.planners.pop(cluster, None)
        self.shards.forget(cluster)

    async def stop_cluster(self, cluster: str) -> None:
        task = self._tasks.pop(cluster, None)
        self.planners.pop(cluster, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def run(self) -> None:
        try:
            await self.shards.run()
        finally:
            for cluster in list(self._tasks):
                await self.stop_cluster(cluster)

    def _observe_pending(self, _: Any) -> list[Observation]:
        return [
            Observation(p.pending, {"cluster": c})
            for c, p in self.planners.items()
            if p.pending is not None
        ]

    def _observe_hit_ratio(self, _: Any) -> list[Observation]:
        hits = total = 0
        for p in self.planners.values():
            stats = p.cache_stats()
            hits += stats["hits"]
            total += stats["hits"] + sum(stats["misses"].values())
        return [Observation(hits / total)] if total else []


async def run(settings: PlannerSettings) -> None:
    settings = dataclasses.replace(settings, planner_id=settings.planner_id or replica_id())
    if problem := heartbeat_problem(settings.heartbeat_interval, settings.heartbeat_timeout):
        raise SystemExit(f"driftbus planner: {problem}")
    async with connections(
        name="driftbus-planner",
        nats=settings,
        inbox=bus.inbox_prefix("planner"),
        stream_replicas=settings.stream_replicas,
        manage_streams=True,
        telemetry_settings=settings,
    ) as c:
        replica = Replica(settings=settings, js=c.js, publisher=c.publisher)
        c.health.add("claimed its clusters, each rebuilt from the streams and live", replica.ready)
        await replica.run()
