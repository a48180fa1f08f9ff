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
import re
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
    Intent,
    KindScope,
    ObjectPhase,
    ObjectStatus,
    OutcomeEvent,
    ServerEvent,
)
from schemas.subjects import (
    PREFIX,
    ObjectKey,
    SubjectError,
    bundle_status_subject,
    encode_token,
    key_tokens,
    object_status_subject,
    object_subject,
    parse_subject,
)
from services.common import bus, members, telemetry
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
    rv_int,
)
from services.core.scope import Scopes, UnknownScope, normalise
from services.core.sha import HashError, manifest_sha
from services.planner.decide import (
    DELETE_INFLIGHT,
    Applied,
    Decision,
    Declined,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Removed,
    Resend,
    Working,
    reevaluate,
    restore,
    step,
)
from services.planner.prune import crd_kind, in_use
from services.planner.shards import Coordinator, heartbeat_problem
from services.planner.status import Tally, bundle_phase, counts, listed
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
YIELD_EVERY = 200
"""Decisions between two yields to the event loop in a burst (a big publish, the go-live):
without them the heartbeat starves and the lease lapses mid-burst."""
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# the object rows the planner writes itself, from its decisions
_ROW_OF = {
    DecisionReason.NEW: ObjectPhase.PENDING,
    DecisionReason.MANIFEST: ObjectPhase.PENDING,
    DecisionReason.RETRY: ObjectPhase.PENDING,
    DecisionReason.RESEND: ObjectPhase.PENDING,
    DecisionReason.DRIFT: ObjectPhase.DRIFTED,
    DecisionReason.DELETED: ObjectPhase.DRIFTED,
    DecisionReason.ANNOTATION: ObjectPhase.KEPT,
    DecisionReason.IN_USE: ObjectPhase.KEPT,
}
_ROW_MESSAGES = {
    DecisionReason.NEW: "new object: apply on its way",
    DecisionReason.MANIFEST: "manifest changed: apply on its way",
    DecisionReason.RETRY: "republished after a failure: apply on its way",
    DecisionReason.RESEND: "no word on the earlier intent in time: sent again",
    DecisionReason.DRIFT: "changed out of band: correction on its way",
    DecisionReason.DELETED: "deleted out of band: re-creation on its way",
    DecisionReason.ANNOTATION: "left the bundle; kept: it carries driftbus.dev/prune: disabled",
    DecisionReason.IN_USE: "left the bundle; kept: still in use",
}


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
    intent_timeout: float = setting(
        60.0,
        "seconds an intent may go without any word (applied, failed, still waiting) while no "
        "longer queued before the planner sends it again: nothing stays lost",
    )
    members_interval: float = setting(
        2.0,
        "seconds between reads of the cluster's watcher/applier heartbeats (prune waits for the "
        "watcher's initial lists; a cluster nobody serves is named in the bundle status)",
    )


def _hex(sha: bytes | None) -> str | None:
    return sha.hex() if sha is not None else None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
    """Objects of this revision not taken (another bundle declares them)."""
    propagation: str = "Background"
    refused: tuple[str, str] | None = None
    """(revision, why) of the latest publish if it was refused; this view stays in force."""
    source: str = ""
    """Where the revision came from and what rendered it (``Bundle.source``)."""


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
        c = encode_token(self.cluster)
        followers = {
            "bundle": bus.Follower(self.js, bus.BUNDLES, f"{PREFIX}.bundle.{c}.>"),
            "server": bus.Follower(self.js, bus.SERVER, f"{PREFIX}.server.{c}.>"),
            "applied": bus.Follower(self.js, bus.APPLIED, f"{PREFIX}.applied.{c}.>"),
            "outcome": bus.Follower(self.js, bus.OUTCOMES, f"{PREFIX}.outcome.{c}.>"),
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
                sha = bytes.fromhex(ev.server_sha) if ev.server_sha else None
                slot = (ev.cluster, ev.key)
                if ev.deleted:
                    self.health.pop(slot, None)
                else:
                    self.health[slot] = (ev.health, ev.health_message)
                await self._fold(
                    slot,
                    Observed(
                        rv_int(ev.resource_version),
                        sha,
                        ev.deleted,
                        ev.bundle,
                        api_version=ev.api_version,
                        keep=ev.keep,
                    ),
                )
                if self.live:
                    await self._prune_stray(slot)
            elif kind == "applied":
                ap = decode(msg.data, AppliedEvent)
                slot = (ap.cluster, ap.key)
                self.outcomes.pop(slot, None)
                await self._fold(
                    slot,
                    Applied(
                        bytes.fromhex(ap.manifest_sha),
                        bytes.fromhex(ap.apply_sha) if ap.apply_sha else None,
                        rv_int(ap.resource_version),
                        ap.deleted,
                        ap.applied_at.timestamp() if ap.applied_at else 0.0,
                    ),
                )
            elif kind == "outcome":
                await self._on_outcome(decode(msg.data, OutcomeEvent))
        except (WireError, ValueError) as exc:
            # Bad input never stops the planner: report and carry on.
            log.error("ignoring message on %s: %s", msg.subject, exc)
            self.counters["bad_messages"] += 1

    async def _on_outcome(self, oc: OutcomeEvent) -> None:
        slot = (oc.cluster, oc.key)
        sha = bytes.fromhex(oc.manifest_sha)
        at = oc.at.timestamp() if oc.at else 0.0
        log.debug("%s: %s for manifest %s: %s", oc.key, oc.phase, oc.manifest_sha[:12], oc.message)
        entry = self.entries.get(slot)
        if oc.phase in (ObjectPhase.FAILED, ObjectPhase.CONFLICT):
            if entry is not None and at < max(entry.applied_at, entry.failed_at):
                return  # older than what we know (a replayed fact superseded since)
            self.outcomes[slot] = oc
            await self._fold(slot, Failed(sha, at))
        elif oc.phase in (ObjectPhase.WAITING, ObjectPhase.RETRYING):
            if entry is not None and entry.inflight == sha:
                self.outcomes[slot] = oc
                await self._fold(slot, Working(sha, at))
        elif oc.phase is ObjectPhase.KEPT:
            self.outcomes[slot] = oc
            await self._fold(slot, Declined(DecisionReason.NOT_OWNED))

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
            desired = self._checked_revision(bundle, manifests)
        except (WireError, BundleError, ManifestError) as exc:
            if isinstance(exc, UnknownScope) and cluster == self.cluster:
                self._awaiting_scope[(cluster, name)] = msg
            else:
                self._awaiting_scope.pop((cluster, name), None)
            await self._bundle_refused(cluster, name, revision, str(exc))
            return
        self._awaiting_scope.pop((cluster, name), None)
        seq = msg.metadata.sequence.stream
        options = bundle.options
        view = BundleView(
            cluster,
            name,
            bundle.revision,
            seq,
            options.prune,
            options.force,
            options.allow_replace,
            set(),
            [],
            propagation=options.propagation,
            source=bundle.source,
        )
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

    def _checked_revision(
        self, bundle: Bundle, manifests: list[Any]
    ) -> list[tuple[Slot, bytes, bytes]]:
        """Every object of the revision keyed, owned and hashed — or ManifestError naming every
        bad one: a revision with one bad object is refused whole (applying the rest would prune
        the bad one's live object), and so is an empty one unless the publisher says so."""
        name = bundle.bundle
        if not manifests and not bundle.options.allow_empty:
            raise ManifestError(
                "the revision has no objects; publishing it would prune every object of the "
                "bundle (publish with allow-empty if that is what you want)"
            )
        learned = False
        for raw in manifests:
            if isinstance(raw, dict) and raw.get("kind") == "CustomResourceDefinition":
                learned |= self.scopes.learn_crd(raw)
        if learned:
            self._recheck_awaiting()
        out: list[tuple[Slot, bytes, bytes]] = []
        errors: list[str] = []
        scope_unknown = 0
        seen: dict[ObjectKey, int] = {}
        for i, raw in enumerate(manifests):
            where_i = f"manifests[{i}]"
            try:
                key = key_of(raw, where_i)
                raw = normalise(raw, self.scopes, bundle.options.namespace)
                key = key_of(raw, where_i)
                if key.namespace and not _DNS_LABEL.match(key.namespace):
                    # no such namespace can ever exist: waiting for it would never end
                    raise ManifestError(
                        f"{where_i}: {key}: metadata.namespace {key.namespace!r} is not a valid "
                        "namespace name (a DNS label)"
                    )
                object_subject("intent", bundle.cluster, key)  # its subjects fit (a name ≤ 253)
                if key in seen:
                    raise ManifestError(f"{where_i}: {key} duplicates manifests[{seen[key]}]")
                manifest = owned(raw, name)
                encoded = check_size(_manifest_json.encode(manifest), f"{where_i}: {key}")
                sha = manifest_sha(manifest)
            except (ManifestError, HashError) as exc:
                errors.append(str(exc))
                scope_unknown += isinstance(exc, UnknownScope)
                continue
            except SubjectError as exc:
                errors.append(f"{where_i}: {exc}")
                continue
            seen[key] = i
            out.append(((bundle.cluster, key), encoded, sha))
        if errors:
            shown = "; ".join(errors[:MAX_LISTED_FAILURES])
            # waiting on a scope only when nothing else is wrong: the rest needs a new revision
            error = UnknownScope if scope_unknown == len(errors) else ManifestError
            raise error(f"{len(errors)} of {len(manifests)} objects are invalid: {shown}")
        return out

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
        view = self.bundles.get((cluster, e.bundle or e.owner_bundle))
        self.counters[f"{d.action}:{d.reason}"] += 1
        DECISIONS.add(1, {"action": str(d.action), "reason": str(d.reason), "cluster": cluster})
        if d.reason in (DecisionReason.DRIFT, DecisionReason.DELETED):
            DRIFT_DETECTED.add(1, {"cluster": cluster})
        log.debug(
            "%s: %s (%s)%s", key, d.action, d.reason, " after rebuild" if after_rebuild else ""
        )
        revision = e.revision or (view.revision if view else "")
        intent = self._intent(slot, e, d, view, revision) if d.writes else None
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
        row = _ROW_OF.get(d.reason)
        if row is not None and view is not None and (d.writes or not after_rebuild):
            # before the intent: the applier's row must not be overtaken by this one
            why = self._removed(slot, view).in_use if d.reason is DecisionReason.IN_USE else ""
            await self._object_row(slot, view, row, why or _ROW_MESSAGES[d.reason])
        if intent is not None:
            await self.pub.publish(
                object_subject("intent", cluster, key), encode(intent[0]), msg_id=intent[1]
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

    def _intent(
        self, slot: Slot, e: Entry, d: Decision, view: BundleView | None, revision: str
    ) -> tuple[ApplyIntent | DeleteIntent, str] | None:
        """The intent for a writing decision and its message id; None when it cannot be built
        (its manifest or apiVersion unknown: logged)."""
        cluster, key = slot
        # the token is part of every id: a planner that took the cluster over re-sends what
        # was in flight, and its intents must not be dropped as repeats of the deposed one's;
        # a resend gets its own id (the first one may have been dropped as a repeat)
        again = f"|resend@{e.inflight_at:.0f}" if d.reason is DecisionReason.RESEND else ""
        if d.action is DecisionAction.APPLY:
            encoded = self.manifests.get(slot)
            if encoded is None or e.manifest_sha is None or view is None:
                log.error("%s: decided %s but its manifest is unknown", key, d.reason)
                return None
            cause = f"{view.seq}.{e.applied_rv}.{e.server_rv}"
            apply = ApplyIntent(
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
            return apply, (
                f"{key_tokens(key)}|{e.manifest_sha.hex()[:16]}|{d.reason}|{cause}"
                f"|{self.fencing_token}{again}"
            )
        api_version = e.api_version
        if not api_version and (encoded := self.manifests.get(slot)):
            api_version = str(msgspec.json.decode(encoded).get("apiVersion", ""))
        if not api_version:
            log.error("%s: cannot prune it: its apiVersion is not known yet", key)
            return None
        delete = DeleteIntent(
            cluster=cluster,
            key=key,
            api_version=api_version,
            bundle=e.owner_bundle or (view.name if view else "?"),
            revision=revision,
            propagation=view.propagation if view else "Background",  # type: ignore[arg-type]
            issued_at=_now(),
            planner=self.s.planner_id,
            fencing_token=self.fencing_token,
        )
        return delete, f"{key_tokens(key)}|delete|{e.server_rv}|{self.fencing_token}{again}"

    async def _object_row(
        self, slot: Slot, view: BundleView, phase: ObjectPhase, message: str
    ) -> None:
        """The planner's own object rows: Pending, Drifted, Kept (appliers write the rest)."""
        e = self.entries[slot]
        status = ObjectStatus(
            cluster=view.cluster,
            bundle=view.name,
            revision=view.revision,
            key=slot[1],
            phase=phase,
            message=message,
            manifest_sha=_hex(e.manifest_sha),
            at=_now(),
        )
        subject = object_status_subject(view.cluster, view.name, slot[1])
        await self.pub.publish(subject, encode(status), msg_id=f"row:{subject}:{phase}:{_now()}")

    # --- bundle status --------------------------------------------------------------------

    def bundle_status(self, view: BundleView) -> BundleStatus:
        t = self.tally(view)
        phase, message = bundle_phase(t)
        revision = view.refused[0] if view.refused else view.revision
        return BundleStatus(
            cluster=view.cluster,
            bundle=view.name,
            revision=revision,
            phase=phase,
            counts=counts(t),
            message=message,
            failed_objects=listed(t),
            at=_now(),
            source="" if view.refused else view.source,
        )

    def tally(self, view: BundleView) -> Tally:
        """Count what is known about the objects of ``view`` (and of its prunes)."""
        shown = view.refused[0] if view.refused else view.revision
        t = Tally(shown, total=len(view.keys) + len(view.errors))
        t.refused = view.refused[1] if view.refused else ""
        t.unserved = list(self.unserved)
        t.failed = len(view.errors)
        failing: list[ObjectKey] = []
        unhealthy: list[str] = []
        waiting: list[str] = []
        for key in view.keys:
            slot = (view.cluster, key)
            p = self.entries.progress(slot)
            if p is None:
                continue
            if p.failed:
                failing.append(key)
                continue
            if p.inflight:
                t.in_flight += 1
                oc = self.outcomes.get(slot)
                if oc is not None and oc.phase in (ObjectPhase.WAITING, ObjectPhase.RETRYING):
                    waiting.append(f"{key}: {oc.phase}: {oc.message}")
                continue
            if not p.applied:
                continue
            t.applied += 1
            if not p.observed:
                t.unobserved += 1
                continue
            if p.drifted:
                t.drifted += 1
                t.problems.append(f"{key}: drifted")
                continue
            h, why = self.health.get(slot, (Health.UNKNOWN, ""))
            if h is Health.READY:
                t.ready += 1
            elif h is Health.FAILED:
                t.unhealthy += 1
                unhealthy.append(f"{key}: unhealthy: {why}")
        # sorted only now: sorting every key of a big bundle on every tick cost more than counting
        for key in sorted(failing, key=apply_order):
            oc = self.outcomes.get((view.cluster, key))
            if oc is not None and oc.phase is ObjectPhase.CONFLICT:
                t.conflicts += 1
            else:
                t.failed += 1
            t.problems.append(f"{key}: {oc.phase}: {oc.message}" if oc else f"{key}: failed")
        t.problems = view.errors + t.problems + sorted(unhealthy) + sorted(waiting)
        self._tally_prunes(view, t)
        return t

    def _tally_prunes(self, view: BundleView, t: Tally) -> None:
        """Objects carrying this bundle's label that its revision no longer declares."""
        if not view.prune:
            return
        for slot in self.entries.strays(view.cluster, view.name):
            e = self.entries[slot]
            if slot[1] in view.keys:
                continue
            if e.keep:
                t.kept += 1
            elif e.inflight == DELETE_INFLIGHT:
                t.pruning += 1
            elif e.failed == DELETE_INFLIGHT:
                t.prune_failed += 1
                oc = self.outcomes.get(slot)
                t.problems.append(f"{slot[1]}: prune failed: {oc.message if oc else '?'}")
            elif (why := self._removed(slot, view).in_use) and e.manifest_sha is None:
                t.held += 1
                t.problems.append(f"{slot[1]}: {why}")
            else:
                t.pruning += 1  # not decided yet (e.g. the watcher's lists are incomplete)
                if not self.watcher_synced:
                    t.problems.append(f"{slot[1]}: prune waits for the watcher's initial list")

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
                now = _now()
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
                if queued is not None and _is_inflight(queued.data, entry):
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
                        subject, encode(st), msg_id=f"{subject}:{hash(fingerprint)}:{_now()}"
                    )
                STATUS_LAG.record(time.monotonic() - since)


def _is_inflight(data: bytes | None, entry: Entry) -> bool:
    """Whether a queued intent is the one ``entry`` waits for (not an older one still waiting
    while the newer one was lost)."""
    try:
        intent: ApplyIntent | DeleteIntent = decode(data or b"", Intent)  # type: ignore[arg-type]
    except WireError:
        return False
    if entry.inflight == DELETE_INFLIGHT:
        return isinstance(intent, DeleteIntent)
    return (
        isinstance(intent, ApplyIntent)
        and entry.inflight is not None
        and intent.manifest_sha == entry.inflight.hex()
    )


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
            # bounded: the claim round that stops a cluster must go on heartbeating whatever
            # the stopped planner is stuck in (a fenced planner sends nothing anyway)
            done, _ = await asyncio.wait({task}, timeout=10.0)
            if not done:
                log.error("planning cluster %s did not stop within 10s; left behind", cluster)
            elif not task.cancelled():
                with contextlib.suppress(Exception):
                    task.result()

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
