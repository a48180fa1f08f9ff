"""One cluster's planner: the decision rule over BUNDLES, SERVER, APPLIED and OUTCOMES.

Start-up rebuilds every entry from the compacted streams with ``restore`` (no decision before the
rebuild completes), then evaluates each desired object once: with nothing changed that is all
hits and zero intents. Live, each fact goes through ``step``; what it returns is published as an
intent (with the desired manifest and manifestSHA, ``emit``) and as a decision record. Bundle
status is a projection of the same entries (``tally``), published when it changes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.context import Context

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    AppliedEvent,
    Bundle,
    BundleCounts,
    BundlePhase,
    BundleStatus,
    DecisionReason,
    Health,
    KindScope,
    ObjectPhase,
    OutcomeEvent,
    ServerEvent,
)
from schemas.subjects import (
    SubjectError,
    bundle_status_subject,
    cluster_filter,
    object_status_subject,
    object_subject,
    parse_subject,
)
from services.common import bus, members, telemetry
from services.common.bundles import BundleError, load_manifests
from services.core.manifest import (
    ManifestError,
    apply_order,
    check_bundle_name,
)
from services.core.scope import Scopes, UnknownScope
from services.planner import emit, facts
from services.planner.decide import (
    DELETE_INFLIGHT,
    Decision,
    Desired,
    Entry,
    Event,
    Removed,
    Resend,
    Working,
    reevaluate,
    restore,
    step,
)
from services.planner.intake import BundleView, checked_revision, learn_crds
from services.planner.prune import crd_kind, in_use
from services.planner.settings import PlannerSettings
from services.planner.store import EntryStore, Slot
from services.planner.tally import Known, bundle_status, tally

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
YIELD_EVERY = 200
"""Decisions between two yields to the event loop in a burst (a big publish, the go-live):
without them the heartbeat starves and the lease lapses mid-burst."""


class PlannerStopped(RuntimeError):
    """A part of the planner ended that must run as long as it does."""


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
        self.entries = EntryStore()  # the SHA cache, packed (≈ 230 bytes per object)
        self.scopes = Scopes()
        """Which kinds are namespaced: a cluster-scoped object's stray namespace is dropped."""
        self.manifests: dict[Slot, bytes] = {}
        """Desired manifests as compact JSON: decoded only for the rare intent (a miss)."""
        self.health: dict[Slot, tuple[Health, str]] = {}
        self.outcomes: dict[Slot, OutcomeEvent] = {}
        """The last word of an applier that was not an applied fact (failed, conflict, waiting,
        retrying), until an applied fact replaces it: what the status says about the object."""
        self.unserved: list[str] = []
        """No live watcher/applier for this cluster (from their heartbeats)."""
        self.watcher_synced = False
        """The cluster's watcher has completed its initial lists: prune may trust the view."""
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
        self._queue: asyncio.Queue[tuple[str, Msg]] = asyncio.Queue(maxsize=10_000)
        """Every input, handled one at a time (the followers', and bundle re-checks)."""
        self._awaiting_scope: dict[tuple[str, str], Msg] = {}
        """The latest revision of a bundle, refused only because a kind's scope was unknown:
        handled again when a scope is learned (a CRD in another bundle, the watcher's
        discovery). Dropped when a later revision of the bundle is handled."""
        self._rechecks: set[asyncio.Task[None]] = set()

    # --- the run loop ---------------------------------------------------------------------

    async def run(self) -> None:
        queue = self._queue
        followers = {
            "bundle": bus.Follower(self.js, bus.BUNDLES, cluster_filter("bundle", self.cluster)),
            "server": bus.Follower(self.js, bus.SERVER, cluster_filter("server", self.cluster)),
            "applied": bus.Follower(self.js, bus.APPLIED, cluster_filter("applied", self.cluster)),
            "outcome": bus.Follower(self.js, bus.OUTCOMES, cluster_filter("outcome", self.cluster)),
        }

        async def pump(kind: str, f: bus.Follower) -> None:
            async for msg in f.messages():
                await queue.put((kind, msg))

        tasks = [asyncio.create_task(pump(k, f), name=f"follow {k}") for k, f in followers.items()]
        tasks.append(asyncio.create_task(self._status_loop(), name="bundle status"))
        tasks.append(asyncio.create_task(self._pending_loop(), name="intents pending"))
        tasks.append(asyncio.create_task(self._members_loop(), name="members"))
        tasks.append(
            asyncio.create_task(self._resend_loop(lambda: queue.qsize()), name="resend lost")
        )
        stopped: list[asyncio.Task[None]] = []
        for t in tasks:
            # A follower or loop that ended would leave this planner deaf to a stream or blind
            # to a duty; raising ends the cluster's planning, and the replica claims it afresh.
            t.add_done_callback(lambda t: None if t.cancelled() else stopped.append(t))
        try:
            while True:
                if stopped:
                    raise PlannerStopped(
                        f"cluster {self.cluster}: {stopped[0].get_name()} ended: "
                        f"{stopped[0].exception()!r}"
                    )
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
        now = time.time()
        for i, slot in enumerate(slots):
            self.entries[slot], decision = reevaluate(self.entries[slot], now=now)
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            by_bundle.setdefault(self.entries[slot].bundle, []).append((slot, decision))
        for bundle, decided in by_bundle.items():
            ident = (self.cluster, bundle)
            ctx = self._trace.get(ident)
            if ctx is None or not any(d is not None and d.writes for _, d in decided):
                for i, (slot, decision) in enumerate(decided):
                    await self._publish_decision(slot, decision, after_rebuild=True)
                    if i % YIELD_EVERY == YIELD_EVERY - 1:
                        await asyncio.sleep(0)
                continue
            with telemetry.tracer.start_as_current_span(
                "plan bundle",
                context=ctx,
                attributes={"cluster": self.cluster, "bundle": bundle, "after_rebuild": True},
            ) as span:
                self._trace[ident] = trace.set_span_in_context(span)
                for i, (slot, decision) in enumerate(decided):
                    await self._publish_decision(slot, decision, after_rebuild=True)
                    if i % YIELD_EVERY == YIELD_EVERY - 1:
                        await asyncio.sleep(0)
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
            elif kind == "recheck":
                ident = (self.cluster, parse_subject(msg.subject).bundle or "")
                if self._awaiting_scope.get(ident) is msg:  # not replaced since
                    log.info("bundle %s/%s: a kind's scope is known now: re-checked", *ident)
                    await self._on_bundle(msg)
            elif kind == "server":
                ev = decode(msg.data, ServerEvent)
                slot = (ev.cluster, ev.key)
                if ev.deleted:
                    self.health.pop(slot, None)
                else:
                    self.health[slot] = (ev.health, ev.health_message)
                await self._fold(slot, facts.observed(ev))
                if self.live:
                    await self._prune_stray(slot)
            elif kind == "applied":
                ap = decode(msg.data, AppliedEvent)
                slot = (ap.cluster, ap.key)
                self.outcomes.pop(slot, None)
                await self._fold(slot, facts.applied(ap))
            elif kind == "outcome":
                await self._on_outcome(decode(msg.data, OutcomeEvent))
        except (WireError, ValueError) as exc:
            # Bad input never stops the planner: report and carry on.
            log.error("ignoring message on %s: %s", msg.subject, exc)
            self.counters["bad_messages"] += 1

    async def _on_outcome(self, oc: OutcomeEvent) -> None:
        slot = (oc.cluster, oc.key)
        log.debug("%s: %s for manifest %s: %s", oc.key, oc.phase, oc.manifest_sha[:12], oc.message)
        event = facts.outcome(oc, self.entries.get(slot))
        if event is not None:
            self.outcomes[slot] = oc
            await self._fold(slot, event)

    async def _fold(self, slot: Slot, event: Event) -> None:
        entry = self.entries.get(slot) or Entry(slot[1])
        if not self.live:
            self.entries[slot] = restore(entry, event)
            return
        entry, decision = step(entry, event, now=time.time())
        self.entries[slot] = entry
        bundle = entry.bundle or entry.owner_bundle
        if bundle:
            self._mark_dirty((slot[0], bundle))
            span = trace.get_current_span()
            if span.get_span_context().is_valid:  # the bundle's status continues this trace
                self._trace[(slot[0], bundle)] = trace.set_span_in_context(span)
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
        revision = "?"
        try:
            bundle = decode(msg.data, Bundle)
            revision = bundle.revision
            if (bundle.cluster, bundle.bundle) != (cluster, name):
                raise ManifestError(
                    f"message names {bundle.cluster}/{bundle.bundle} but was "
                    f"published to the subject of {cluster}/{name}"
                )
            check_bundle_name(bundle.bundle)
            manifests = await load_manifests(self.js, bundle)
            if learn_crds(self.scopes, manifests):
                self._recheck_awaiting()
            desired = checked_revision(bundle, manifests, self.scopes)
        except (WireError, BundleError, ManifestError) as exc:
            if isinstance(exc, UnknownScope) and cluster == self.cluster:
                self._awaiting_scope[(cluster, name)] = msg
            else:
                self._awaiting_scope.pop((cluster, name), None)
            await self._bundle_refused(cluster, name, revision, str(exc))
            return
        self._awaiting_scope.pop((cluster, name), None)
        options = bundle.options
        view = BundleView.of(bundle, msg.metadata.sequence.stream)
        previous = self.bundles.get((cluster, name))
        taken: list[tuple[Slot, bytes, bytes]] = []
        for slot, encoded, sha in desired:
            other = self._declared_by_other(slot, name)
            if other is not None and not options.take_over:
                view.errors.append(
                    f"{slot[1]}: already declared by bundle {other} (publish with take-over "
                    "to move it to this bundle)"
                )
                continue
            if other is not None:
                log.warning("%s: taken over by bundle %s from bundle %s", slot[1], name, other)
                self.bundles[(cluster, other)].keys.discard(slot[1])
                self._mark_dirty((cluster, other))
            view.keys.add(slot[1])
            taken.append((slot, encoded, sha))
        self.bundles[(cluster, name)] = view
        self._mark_dirty((cluster, name))
        span = trace.get_current_span()
        if span.get_span_context().is_valid:
            span.set_attributes({"cluster": cluster, "bundle": name, "revision": view.revision})
            self._trace[(cluster, name)] = trace.set_span_in_context(span)
        # Every publish gets an answer, even when nothing changed (a waiting `publish --wait`).
        self._last_status.pop((cluster, name), None)
        taken.sort(key=lambda d: apply_order(d[0][1]))
        for i, (slot, encoded, sha) in enumerate(taken):
            self.manifests[slot] = encoded
            await self._fold(slot, Desired(name, bundle.revision, sha, options.prune))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # heartbeats and publishes run between decisions
        if previous is not None:
            for key in previous.keys - view.keys:
                entry = self.entries.get((cluster, key))
                if entry is None or entry.bundle != name:
                    continue
                if self.live and entry.inflight not in (None, DELETE_INFLIGHT):
                    # an apply on its way is called back (a delete replaces it in the queue)
                    await self._fold((cluster, key), self._removed((cluster, key), view))
                else:
                    # no longer desired, whether it is pruned now or later
                    self.entries[(cluster, key)] = dataclasses.replace(
                        entry, bundle="", manifest_sha=None, revision=bundle.revision
                    )
        if self.live:
            await self._prune(view)
        if previous is not None:
            for key in previous.keys - view.keys:
                # after the prune decisions, which may read a CRD's kind from its manifest
                self.manifests.pop((cluster, key), None)
        for err in view.errors:
            log.warning("bundle %s/%s@%s: %s", cluster, name, bundle.revision, err)

    def learn_scopes(self, scopes: list[KindScope]) -> None:
        """Scopes of custom kinds from the watcher's discovery (its heartbeat)."""
        learned = False
        for sc in scopes:
            learned |= self.scopes.learn(sc.group, sc.kind, sc.namespaced)
        if learned:
            self._recheck_awaiting()

    def _recheck_awaiting(self) -> None:
        """Queue every bundle waiting on a scope to be handled again, after what is queued."""
        for msg in self._awaiting_scope.values():
            try:
                self._queue.put_nowait(("recheck", msg))
            except asyncio.QueueFull:
                task = asyncio.create_task(self._queue.put(("recheck", msg)))
                self._rechecks.add(task)
                task.add_done_callback(self._rechecks.discard)

    def _declared_by_other(self, slot: Slot, bundle: str) -> str | None:
        """The other bundle whose current revision declares this object, if any."""
        entry = self.entries.get(slot)
        if entry is None or entry.bundle in ("", bundle) or entry.manifest_sha is None:
            return None
        view = self.bundles.get((slot[0], entry.bundle))
        return entry.bundle if view is not None and slot[1] in view.keys else None

    def _may_prune(self) -> bool:
        """Prune only from a complete view: the cluster's watcher has listed every kind."""
        return self.live and self.watcher_synced

    async def _prune(self, view: BundleView) -> None:
        """Level-triggered prune: live objects carrying this bundle's label, not in its revision.

        Covers revisions that changed while the planner was down, take-overs and prune switched
        back on: nothing relies on having seen the previous revision.
        """
        if not self._may_prune():
            return
        for i, (slot, entry) in enumerate(list(self.entries.items(cluster=view.cluster))):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
            if slot[1] in view.keys or entry.inflight is not None:
                continue
            if self._strays_from(entry, view):
                await self._fold(slot, self._removed(slot, view))

    async def _prune_stray(self, slot: Slot) -> None:
        """A live object seen carrying the label of a bundle that does not declare it."""
        entry = self.entries.get(slot)
        if entry is None or entry.inflight is not None or not self._may_prune():
            return
        view = self.bundles.get((slot[0], entry.owner_bundle))
        if view is not None and view.refused is None and self._strays_from(entry, view):
            await self._fold(slot, self._removed(slot, view))

    @staticmethod
    def _strays_from(entry: Entry, view: BundleView) -> bool:
        return (
            entry.owner_bundle == view.name
            and entry.manifest_sha is None
            and entry.live
            and entry.key not in view.keys
            and entry.bundle in ("", view.name)
        )

    def _removed(self, slot: Slot, view: BundleView) -> Removed:
        why = ""
        if view.prune:
            crd = self.manifests.get(slot)
            why = in_use(
                slot[1],
                self.entries.items(cluster=slot[0]),
                pruning=view.name,
                crd_kind=crd_kind(msgspec.json.decode(crd)) if crd else None,
            )
        return Removed(view.name, view.revision, view.prune, in_use=why)

    async def _bundle_refused(self, cluster: str, name: str, revision: str, reason: str) -> None:
        log.error("bundle %s/%s@%s refused: %s", cluster, name, revision, reason)
        self.counters["bundles_refused"] += 1
        if not name:
            return
        view = self.bundles.get((cluster, name))
        if view is not None:
            # the revision in force stays applied; its status says the latest one was refused
            view.refused = (revision, reason)
            self._last_status.pop((cluster, name), None)
            self._mark_dirty((cluster, name))
            return
        status = BundleStatus(
            cluster=cluster or "?",
            bundle=name,
            revision=revision,
            phase=BundlePhase.FAILED,
            counts=BundleCounts(),
            message=f"revision {revision} refused: {reason}",
            at=emit.now(),
        )
        try:
            subject = bundle_status_subject(cluster, name)
        except SubjectError:
            return
        await self.pub.publish(subject, encode(status), msg_id=f"refused:{subject}:{emit.now()}")

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
        view = self.bundles.get((cluster, e.bundle or e.owner_bundle))
        self.counters[f"{d.action}:{d.reason}"] += 1
        DECISIONS.add(1, {"action": str(d.action), "reason": str(d.reason), "cluster": cluster})
        if d.reason in (DecisionReason.DRIFT, DecisionReason.DELETED):
            DRIFT_DETECTED.add(1, {"cluster": cluster})
        log.debug(
            "%s: %s (%s)%s", key, d.action, d.reason, " after rebuild" if after_rebuild else ""
        )
        revision = e.revision or (view.revision if view else "")
        intent = (
            emit.intent(
                slot,
                e,
                d,
                view,
                revision,
                manifest=self.manifests.get(slot),
                planner_id=self.s.planner_id,
                fencing_token=self.fencing_token,
            )
            if d.writes
            else None
        )
        if d.writes and intent is None:
            # nothing went out, so nothing is in flight: a later fact decides afresh
            self.entries[slot] = dataclasses.replace(e, inflight=None)
            return
        if intent is not None and not self._owns():
            # Our lease lapsed (a burst of decisions starved the heartbeat, NATS was away):
            # wait for it instead of dropping the decision — for an object not yet created no
            # later fact would ever decide again. If the claim moved on, the coordinator
            # cancels this task and the new holder decides from scratch.
            log.warning("%s: lease lapsed; holding %s until it is renewed", key, d.action)
            while not self._owns():  # noqa: ASYNC110 - a clock-based predicate, no event
                await asyncio.sleep(0.05)
        row = emit.ROW_OF.get(d.reason)
        if row is not None and view is not None and (d.writes or not after_rebuild):
            # before the intent: the applier's row must not be overtaken by this one
            why = self._removed(slot, view).in_use if d.reason is DecisionReason.IN_USE else ""
            await self._object_row(slot, view, row, why or emit.ROW_MESSAGES[d.reason])
        if intent is not None:
            await self.pub.publish(
                object_subject("intent", cluster, key), encode(intent[0]), msg_id=intent[1]
            )
        record = emit.record(slot, e, d, revision, self.s.planner_id)
        await self.pub.publish(
            object_subject("decision", cluster, key),
            encode(record),
            msg_id=f"decision:{self.s.planner_id}:{id(record)}:{emit.now()}",
        )

    async def _object_row(
        self, slot: Slot, view: BundleView, phase: ObjectPhase, message: str
    ) -> None:
        status = emit.object_row(slot, self.entries[slot], view, phase, message)
        subject = object_status_subject(view.cluster, view.name, slot[1])
        await self.pub.publish(
            subject, encode(status), msg_id=f"row:{subject}:{phase}:{emit.now()}"
        )

    # --- bundle status --------------------------------------------------------------------

    def bundle_status(self, view: BundleView) -> BundleStatus:
        known = Known(
            self.entries,
            self.outcomes,
            self.health,
            self.unserved,
            self.watcher_synced,
            lambda slot, v: self._removed(slot, v).in_use,
        )
        return bundle_status(view, tally(view, known))

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

    async def _members_loop(self) -> None:
        """Who serves the cluster (watcher, applier heartbeats); prune waits for the watcher's
        initial lists, and starts the moment they are complete."""
        while True:
            try:
                beats = await members.heartbeats(self.js, self.cluster)
            except Exception as exc:  # noqa: BLE001 - NATS away: keep the last view
                log.debug("cluster %s: heartbeats not read: %s", self.cluster, exc)
            else:
                now = emit.now()
                if (watcher_beat := beats.get("watcher")) is not None:
                    self.learn_scopes(watcher_beat.scopes)
                unserved = members.serving(self.cluster, beats, now)
                synced = members.watcher_synced(beats.get("watcher"), now)
                became_synced = synced and not self.watcher_synced
                if unserved != self.unserved or synced != self.watcher_synced:
                    self._dirty.update(self.bundles)
                self.unserved, self.watcher_synced = unserved, synced
                if became_synced and self.live:
                    log.info("cluster %s: the watcher's lists are complete: prune", self.cluster)
                    for view in list(self.bundles.values()):
                        await self._prune(view)
            await asyncio.sleep(self.s.members_interval)

    async def _resend_loop(self, backlog: Callable[[], int]) -> None:
        """Send again what got no word for ``intent_timeout`` and is no longer queued: a lost
        intent (its publish never landed, a dedup-window collision, a crash between ack and
        fact) must not silence the object's healing for good. Checked only when the planner has
        caught up with its input: a backlog of applied facts is not a lost intent."""
        timeout = self.s.intent_timeout
        while True:
            await asyncio.sleep(max(0.5, timeout / 4))
            if not self.live or backlog() > 100:
                continue
            now = time.time()
            for slot in list(self.entries.overdue(now - timeout)):
                entry = self.entries.get(slot)
                if entry is None or entry.inflight is None:
                    continue
                try:
                    queued = await bus.last_message(
                        self.js, bus.INTENTS, object_subject("intent", slot[0], slot[1])
                    )
                except Exception as exc:  # noqa: BLE001 - NATS away: ask again next round
                    log.debug("%s: intent queue not read: %s", slot[1], exc)
                    continue
                if queued is not None and emit.is_inflight(queued.data, entry):
                    await self._fold(slot, Working(entry.inflight, now))  # queued: not lost
                    continue
                log.warning(
                    "%s: no outcome of its intent for %.0fs and it is not queued: sending again",
                    slot[1],
                    now - entry.inflight_at,
                )
                self.counters["resent"] += 1
                await self._fold(slot, Resend())

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
                        subject, encode(st), msg_id=f"{subject}:{hash(fingerprint)}:{emit.now()}"
                    )
                STATUS_LAG.record(time.monotonic() - since)
