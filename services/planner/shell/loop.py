"""One cluster's planner: the run loop that folds BUNDLES, SERVER, APPLIED and OUTCOMES into the
decision rule, one message at a time, and prunes what a bundle no longer declares.

The replica's hub (``shell.hub``) follows the streams for all its clusters and hands each planner
its messages and the settings it reads. Start-up replays the cluster's compacted streams with
short-lived consumers of its own (``inbox``: the hub's live messages wait meanwhile, and what
the replay covered is dropped by stream sequence), deciding nothing before it completes; then
each desired object is evaluated once: with nothing changed that is all hits and zero intents.
Live, each fact goes through ``step``; what it returns is published by ``sending`` (intent, row,
record), every change to an entry made by ``folding``. Bundles are taken in by ``intake``; the
periodic duties are ``periodic``, rung by ``alarms``; bundle status is a projection of the same
``memory.cluster`` state (``status.report``), published by ``status_board``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from schemas.codec import WireError, applied_events, decode, server_events
from schemas.messages import (
    OutcomeEvent,
)
from schemas.subjects import SubjectError, parse_subject
from services.clusters import registry
from services.common import bus, heap, telemetry
from services.planner.memory.cluster import ClusterState
from services.planner.rule import checkpoint, facts
from services.planner.rule.budget import Budget
from services.planner.settings import PlannerSettings
from services.planner.shell import going_live
from services.planner.shell.checkpointing import Checkpointer
from services.planner.shell.folding import Folder
from services.planner.shell.followed import Followed
from services.planner.shell.hub import Hub
from services.planner.shell.inbox import CAUGHT_UP, CHECKPOINT, Inbox
from services.planner.shell.intake import BundleIntake
from services.planner.shell.intent_batches import IntentBatches, queued_alone
from services.planner.shell.periodic import STATUS_REFRESH, Duties
from services.planner.shell.rollback import RollbackDesk
from services.planner.shell.sending import Decisions
from services.planner.shell.status_board import StatusBoard
from services.planner.shell.yielding import pace

log = logging.getLogger("driftbus.planner")


FACT_STREAMS = {"applied": bus.APPLIED, "outcome": bus.OUTCOMES}
"""The answers to intents, by the kind of message the run loop reads them as."""


DUTIES = frozenset(
    ("status", "resend", "pending", "refresh", "windows clock", "prune", "checkpoint")
)
"""The periodic duties, by the name their alarm puts on the queue (``shell.periodic``)."""


class PlannerStopped(RuntimeError):
    """A part of the planner ended that must run as long as it does."""


class Planner:
    """Plans one cluster, under the fencing token of this replica's claim on it."""

    def __init__(
        self,
        *,
        settings: PlannerSettings,
        js: bus.JetStream,
        publisher: bus.Publisher,
        hub: Hub,
        cluster: str,
        fencing_token: int = 0,
        owns: Callable[[], bool] = lambda: True,
        nc: bus.Connection | None = None,
    ) -> None:
        self.js = js
        self.nc = nc
        self.hub = hub
        self.settings = settings
        self.cluster = cluster
        self.state = ClusterState(
            cluster, prune_budget=Budget(settings.prune_budget_share, settings.prune_budget_min)
        )
        self.ready = asyncio.Event()
        use = settings.checkpoint_interval > 0
        self.inbox = Inbox(js, cluster, hub.replays, hub.backlog, use_checkpoint=use)
        """Every input, handled one at a time: the streams' messages, the settings (the last
        good sync windows, ``windows``, a ``Good``), bundle re-checks, bundles whose hold ended
        (``release``, a bundle name), and the duties whose alarm rang (``DUTIES``)."""
        self._queue = self.inbox.queue
        self.alarms = self.inbox.alarms
        self._stopped: list[asyncio.Task[None]] = []
        self.board = StatusBoard(state=self.state, publisher=publisher)
        self.board.on_mark = lambda: self.alarms.set("status", settings.status_interval)
        self.decisions = Decisions(
            state=self.state,
            publisher=publisher,
            planner_id=settings.planner_id,
            fencing_token=fencing_token,
            owns=owns,
            sent=self._intent_sent,
            batches=IntentBatches.configured(publisher, cluster, settings),
        )
        self.board.before_publish = self.decisions.records.send_waiting  # records, then status
        self.folder = Folder(state=self.state, board=self.board, decisions=self.decisions)
        self.intake = BundleIntake(
            state=self.state,
            js=js,
            publisher=publisher,
            board=self.board,
            queue=self._queue,
            fold=self.folder.fold,
            prune=self.folder.prune,
            manifests=hub.manifests,
        )
        self.duties = Duties(
            settings=settings,
            js=js,
            state=self.state,
            board=self.board,
            intake=self.intake,
            alarms=self.alarms,
            fold=self.folder.fold,
            send_again=self.folder.send_again,
            prune=self.folder.prune,
            release=self.intake.request_release,
            batches=self.decisions.batches,
        )
        self.followed = Followed(state=self.state, intake=self.intake, duties=self.duties)
        self.checkpoints = Checkpointer(
            state=self.state,
            publisher=publisher,
            alarms=self.alarms,
            read_up_to=self.inbox.read_up_to,
            interval=settings.checkpoint_interval,
            js=js,
            purge_after=settings.checkpoint_purge_after,
        )
        self.rollbacks = RollbackDesk(js=js, state=self.state)

    @property
    def pending(self) -> int | None:
        """Intents of this cluster queued or being applied (None until known)."""
        return self.duties.pending

    def cache_stats(self) -> dict[str, Any]:
        """Hits and misses by reason since start: what explains the hit ratio."""
        return self.state.cache_stats()

    # --- the run loop ---------------------------------------------------------------------

    # --- what the hub hands us -------------------------------------------------------------

    def deliver(self, kind: str, msg: bus.Message) -> None:
        self.inbox.deliver(kind, msg)

    def setting(self, kind: str, value: Any) -> None:
        self._queue.put_nowait((kind, value))

    def _intent_sent(self) -> None:
        """Something is in flight: look for lost intents and read the queue's depth while it is."""
        self.alarms.set("resend", max(0.5, self.settings.intent_timeout / 4))
        self.alarms.set("pending", self.settings.stats_interval / 6)

    def members_seen(self) -> None:
        if self.duties.members(self.hub.heartbeats(self.cluster)):
            self.inbox.ring("prune")

    # --- the run loop -----------------------------------------------------------------------

    async def run(self) -> None:
        hub, st = self.hub, self.state
        # the settings first: the bundles of the replay are held to them
        st.cluster_labels = hub.labels(self.cluster)
        if hub.policy is not None:
            self.followed.policy(hub.policy)
        if hub.windows is not None:
            self.followed.windows(hub.windows)
        hub.attach(self)
        self.members_seen()
        tasks = [asyncio.create_task(self.inbox.replay(), name="replay")]
        if self.nc is not None:
            tasks.append(
                asyncio.create_task(self.rollbacks.serve(self.nc), name="rollback requests")
            )
        for t in tasks:
            t.add_done_callback(self._task_ended)
        try:
            while True:
                if self._stopped:
                    ended = self._stopped[0]
                    # A replay or request handler that failed would leave this planner deaf;
                    # raising ends the cluster's planning, and the replica claims it afresh.
                    raise PlannerStopped(
                        f"cluster {self.cluster}: {ended.get_name()} ended: {ended.exception()!r}"
                    )
                kind, msg = await self.inbox.get()
                if kind == CAUGHT_UP:
                    await self._go_live()
                elif kind == CHECKPOINT:
                    await self.checkpoints.restore(msg)
                elif kind in DUTIES:
                    await self._duty(kind)
                else:
                    await self._handle(kind, msg)
                # ``get`` does not suspend while the queue has messages: without this a burst
                # holds the loop (500 such clusters: heartbeats and hub unread for a minute).
                await asyncio.sleep(0)
        finally:
            hub.detach(self)
            for t in tasks:
                t.cancel()
            self.inbox.close()
            # collected, so a replay that died with the connection is not reported at exit
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.decisions.records.drain()  # what it decided is on the record

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or (task.get_name() == "replay" and task.exception() is None):
            return
        self._stopped.append(task)
        self._queue.put_nowait(("wake", None))

    async def _duty(self, duty: str) -> None:
        duties = self.duties
        if duty == "status":
            await duties.status()
        elif duty == "prune":
            await duties.prune_all()
        elif duty == "resend":
            await duties.resend(self._queue.qsize())
        elif duty == "pending":
            await duties.intents_pending()
        elif duty == "windows clock":
            await duties.windows()
        elif duty == "checkpoint":
            await self.checkpoints.write()
        elif duty == "refresh":
            duties.refresh()

    async def _go_live(self) -> None:
        """The rebuild is complete: evaluate every desired object once, then prune.

        A bundle whose objects now need writes continues the trace of its publish: on a
        cluster just claimed, its first bundle arrives in the rebuild, and on a take-over the
        intents re-sent belong to the publish they carry out. Hits start no span, so a restart
        with nothing changed adds nothing to old traces."""
        st = self.state
        st.live = True
        by_bundle = await going_live.deciding(
            st,
            self.folder,
            self.decisions,
            traced=lambda bundle: self.board.trace((self.cluster, bundle)) is not None,
        )
        lone = await queued_alone(self.js, st.cluster)  # batched, none may overtake one
        for bundle, decided in by_bundle.items():
            ident = (self.cluster, bundle)
            ctx = self.board.trace(ident)
            if ctx is None or not any(d is not None and d.writes for _, d, _ in decided):
                await going_live.publishing(self.decisions, decided, lone)
                continue
            with telemetry.tracer.start_as_current_span(
                "plan bundle",
                context=ctx,
                attributes={"cluster": self.cluster, "bundle": bundle, "after_rebuild": True},
            ) as span:
                self.board.continue_trace(ident, trace.set_span_in_context(span))
                await going_live.publishing(self.decisions, decided, lone)
        for view in list(st.bundles.values()):
            await self.folder.prune(view)
            await self.folder.resume(view)  # hooks that ended while no planner watched
        self.board.mark_all(st.bundles)
        self.inbox.replayed()  # decided and sent: the next cluster may replay
        self.alarms.set("refresh", STATUS_REFRESH)
        if st.gates.windows:  # the clock starts: when does a window next open or close?
            self.duties.windows_changed(new=True)
        heap.keep_long_lived(n := len(st.entries))  # the rebuilt cluster, when it is big
        log.info("cluster %s: rebuilt %d objects, %d bundles; live", st.cluster, n, len(st.bundles))
        self.ready.set()

    async def _handle(self, kind: str, msg: Any) -> None:
        if kind == "wake":
            return
        if not self.inbox.first_time(kind, msg):
            return  # the replay had it, or a reset tap sent it again
        if kind == "release":
            await self.intake.release(msg)
            return
        if kind == "windows":  # the last good windows (``Good``), not a message
            self.followed.windows(msg)
            return
        ctx = telemetry.traced(msg.headers)
        if not self.state.live:
            await self._handle_message(kind, msg)
            if kind == "bundle" and ctx is not None:
                # no span while rebuilding; remembered in case going live sends its intents
                with contextlib.suppress(SubjectError):
                    ident = (self.cluster, parse_subject(msg.subject).bundle or "")
                    self.board.continue_trace(ident, ctx)
            return
        if ctx is None:
            await self._handle_message(kind, msg)
            return
        with telemetry.tracer.start_as_current_span(
            f"plan {kind}", context=ctx, attributes={"messaging.subject": msg.subject}
        ):
            await self._handle_message(kind, msg)

    async def _handle_message(self, kind: str, msg: bus.Message) -> None:
        details = self.state.details
        try:
            if kind == "bundle":
                await self.intake.take_in(msg)
                if self.state.gates.windows:  # a new bundle's window may change sooner
                    self.duties.windows_changed(new=False)
            elif kind == "recheck":
                await self.intake.recheck(msg)
            elif kind == "server":
                # a batch (a list page, a burst of watch events) or one object's fact
                for i, ev in enumerate(server_events(msg.subject, msg.data)):
                    slot = (ev.cluster, ev.key)
                    if ev.deleted and not ev.retired:  # a retired one keeps how it ended
                        details.drop_health(slot)
                    else:
                        details.set_health(slot, ev.health, ev.health_message)
                    await self.folder.fold(slot, facts.observed(ev))
                    if self.state.live:
                        await self.folder.prune_stray(slot)
                    await pace(i)
            elif kind == "applied":
                # an applier's report (or one object's fact, from an applier before issue 44)
                for i, ap in enumerate(applied_events(msg.subject, msg.data)):
                    slot = (ap.cluster, ap.key)
                    details.drop_outcome(slot)
                    await self.folder.fold(slot, facts.applied(ap))
                    await pace(i)
            elif kind == "outcome":
                await self._on_outcome(decode(msg.data, OutcomeEvent))
            elif kind == "policy":
                self.followed.policy(msg)
            elif kind == "registry":
                labels = registry.labels_in(msg)
                if labels != self.state.cluster_labels:
                    log.info("cluster %s: registry labels changed", self.cluster)
                    self.intake.labels_changed(labels)
                    if self.state.gates.windows:  # a clusterSelector may name it now, or no more
                        self.duties.windows_changed(new=True)
            elif kind == "control":
                await self.intake.control(msg)
        except (WireError, ValueError) as exc:
            # Bad input never stops the planner: report and carry on.
            log.error("ignoring message on %s: %s", msg.subject, exc)
            self.state.counters["bad_messages"] += 1
        if (stream := FACT_STREAMS.get(kind)) is not None:
            # read, good or bad: the lost-intent check asks whether a fact was (``periodic``)
            self.state.read_up_to[stream] = bus.stream_sequence(msg)
        if kind in checkpoint.FACT_KINDS and self.state.live:
            self.checkpoints.folded()

    async def _on_outcome(self, oc: OutcomeEvent) -> None:
        slot = (oc.cluster, oc.key)
        log.debug("%s: %s for manifest %s: %s", oc.key, oc.phase, oc.manifest_sha[:12], oc.message)
        event = facts.outcome(oc, self.state.entries.get(slot))
        if event is not None:
            self.state.details.set_outcome(slot, oc)
            await self.folder.fold(slot, event)
