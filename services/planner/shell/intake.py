"""Taking a bundle message in: checked (``rule.revision``), its objects taken (``rule.takeover``)
and folded in apply order, those it left released; or refused, and kept if it waits only on a
kind's scope. And the bundle's control: suspended or resumed (``control``), and released when a
hold ends (``release``: every object decided again, then the prune).

A refused revision never replaces the one in force: that stays applied, and its status says the
latest publish was refused. A fleet placement of a rollout driver that had lost its lease (its
fencing token below one already taken, or, met on a rebuild, below a newer one in the bundle's
history) is dropped, said in the log, and the message in force is published again as it was
(``fencing``), so that a planner rebuilding from the bundle's last message never takes the
dropped one either. A revision refused only because a
custom kind's scope is unknown waits for it (a CRD in another bundle, the watcher's discovery)
instead of failing for good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from opentelemetry import trace

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    Bundle,
    BundleControl,
    KindScope,
)
from schemas.subjects import SubjectError, bundle_status_subject, parse_subject
from schemas.tenants import TenantPolicy
from services.common import bus, heap
from services.core.manifest import ManifestError, apply_order_text, check_bundle_name
from services.core.scope import UnknownScope
from services.planner.memory.cluster import ClusterState
from services.planner.memory.codebook import Codebook
from services.planner.rule import holds, limits, messages, takeover
from services.planner.rule.decide import DELETE_INFLIGHT, Desired, Event, Release
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView, Plan, fenced
from services.planner.shell.fencing import PlacementFence
from services.planner.shell.manifests import ManifestCache
from services.planner.shell.status_board import StatusBoard
from services.planner.shell.yielding import in_order, pace, stepped
from services.planner.status.report import refused_status
from services.revisions.publish import BundleError
from services.tenancy.rights import override_refusal

log = logging.getLogger("driftbus.planner")

Fold = Callable[[Slot, Event], Awaitable[None]]
Prune = Callable[[BundleView], Awaitable[None]]


RELEASE_AFTER = 5_000
"""Objects in a revision after whose intake the heap's freed memory is handed back."""


class BundleIntake:
    """One cluster's bundle messages, one at a time. Changes the state's bundles, scopes and
    manifests; every change to an entry goes through ``fold`` (the planner's), except releasing
    an object no longer desired with nothing of it in flight."""

    def __init__(
        self,
        *,
        state: ClusterState,
        js: bus.JetStream,
        publisher: bus.Publisher,
        board: StatusBoard,
        queue: asyncio.Queue[tuple[str, Any]],
        fold: Fold,
        prune: Prune,
        manifests: ManifestCache | None = None,
    ) -> None:
        self.state = state
        self.js = js
        self.pub = publisher
        self.board = board
        self._queue = queue
        """Where a bundle waiting on a scope is queued (``recheck``) when one is learned."""
        self.fold = fold
        self.prune = prune
        self.manifests = manifests if manifests is not None else ManifestCache(0)
        """Stored manifests read once for every cluster of the replica given the same cache
        (a fleet revision placed on many); given none, its own, which keeps nothing."""
        self._awaiting_scope: dict[tuple[str, str], bus.Message] = {}
        """The latest revision of a bundle, refused only because a kind's scope was unknown:
        handled again when a scope is learned (a CRD in another bundle, the watcher's
        discovery). Dropped when a later revision of the bundle is handled."""
        self._awaiting_policy: dict[tuple[str, str], bus.Message] = {}
        """The latest revision of a bundle, refused by the tenant policy: handled again when
        the policy changes (so granting a tenant a right needs no republish)."""
        self._rechecks: set[asyncio.Task[None]] = set()
        self.fence = PlacementFence(state=state, js=js, publisher=publisher)

    async def take_in(self, msg: bus.Message) -> None:
        """A revision published to driftbus.bundle.<cluster>.<bundle>."""
        try:
            where = parse_subject(msg.subject)
        except SubjectError as exc:
            log.error("bundle on a malformed subject: %s", exc)
            return
        ident = (where.cluster, where.bundle or "")
        checked = await self._checked(msg, ident)
        if checked is None:
            return
        await self._take(ident, *checked, seq=bus.stream_sequence(msg))
        if (n := len(checked[1])) >= RELEASE_AFTER:
            del checked  # every object's decoded and encoded copies are garbage now
            heap.release_freed()
            heap.keep_long_lived(n)  # what it left: its keys, details, manifests

    async def recheck(self, msg: bus.Message) -> None:
        """A bundle queued again when a scope was learned or the policy changed, unless a later
        revision came since."""
        ident = (self.state.cluster, parse_subject(msg.subject).bundle or "")
        if self._awaiting_scope.get(ident) is msg or self._awaiting_policy.get(ident) is msg:
            log.info("bundle %s/%s: re-checked (a scope was learned or the policy changed)", *ident)
            await self.take_in(msg)

    def policy_changed(self, policy: TenantPolicy) -> None:
        """A new tenant policy: revisions it refused are checked again, and what the revisions
        in force now have outside it is reported on their status (never pruned for it)."""
        self.state.tenancy.use(policy)
        self._recheck()

    def labels_changed(self, labels: dict[str, str] | None) -> None:
        """The cluster's registry labels changed (a tenant's ``clusterSelector`` matches them;
        None: now unknown, which none does): checked again as for a new policy."""
        self.state.cluster_labels = labels
        self._recheck()

    def _recheck(self) -> None:
        st = self.state
        policy = st.tenancy.policy
        for ident, view in st.bundles.items():
            now_outside = limits.outside(
                view.name, view.cluster, view.keys, st.scopes, policy, st.cluster_labels
            )
            if now_outside != view.outside:
                if now_outside:
                    log.warning(
                        "bundle %s/%s: outside its tenant's limits now: %s",
                        *ident,
                        "; ".join(now_outside[:3]),
                    )
                view.outside = now_outside
                self.board.mark(ident)
            if view.name in st.gates.overrides and (why := override_refusal(policy, view.name)):
                # a right taken back: the revision in force is held by the windows from now on
                log.warning("bundle %s/%s: override ended: %s", *ident, why)
                st.gates.overrides.discard(view.name)
                self.board.mark(ident)
        self._requeue(list(self._awaiting_policy.values()))

    def learn_scopes(self, scopes: list[KindScope]) -> None:
        """Scopes of custom kinds from the watcher's discovery (its heartbeat)."""
        learned = False
        for sc in scopes:
            learned |= self.state.scopes.learn(sc.group, sc.kind, sc.namespaced)
        if learned:
            self._recheck_awaiting()

    def _recheck_awaiting(self) -> None:
        """Queue every bundle waiting on a scope to be handled again, after what is queued."""
        self._requeue(list(self._awaiting_scope.values()))

    def _requeue(self, msgs: list[bus.Message]) -> None:
        for msg in msgs:
            try:
                self._queue.put_nowait(("recheck", msg))
            except asyncio.QueueFull:
                task = asyncio.create_task(self._queue.put(("recheck", msg)))
                self._rechecks.add(task)
                task.add_done_callback(self._rechecks.discard)

    async def _checked(
        self, msg: bus.Message, ident: tuple[str, str]
    ) -> tuple[Bundle, list[tuple[Slot, bytes, bytes]], Plan] | None:
        """The bundle, its objects checked and how they are written (their hooks and sync
        waves), or None when the revision was refused."""
        cluster, name = ident
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
            if await self.fence.after_newer(ident, msg, bundle):
                return None
            stale = fenced(bundle, self.state.fleet_fences)
            if stale:
                await self.fence.dropped(ident, msg, revision, stale)
                return None
            if self.state.tenancy.unusable:
                raise limits.PolicyRefused(self.state.tenancy.unusable)
            bundle = limits.with_tenant_defaults(
                bundle, self.state.tenancy.policy, self.state.cluster_labels
            )
            desired, plan, scopes = await self.manifests.checked_objects(
                self.js, bundle, self.state.scopes
            )
            keys = (slot[1] for slot, *_ in desired)
            limits.check(bundle, keys, scopes, self.state.tenancy.policy)
            self._check_dependencies(bundle)
        except (WireError, BundleError, ManifestError) as exc:
            self._awaiting_scope.pop(ident, None)
            self._awaiting_policy.pop(ident, None)
            if isinstance(exc, UnknownScope) and cluster == self.state.cluster:
                self._awaiting_scope[ident] = msg
            elif isinstance(exc, limits.PolicyRefused):
                self._awaiting_policy[ident] = msg
            await self._refused(ident, revision, str(exc), waits=ident in self._awaiting_scope)
            return None
        self._awaiting_scope.pop(ident, None)
        self._awaiting_policy.pop(ident, None)
        return bundle, desired, plan

    def _check_dependencies(self, bundle: Bundle) -> None:
        """ManifestError when the revision may not depend on what it names, or would close a
        cycle with the dependencies of the bundles in force."""
        deps = holds.dependencies(bundle.bundle, bundle.options.depends_on)
        graph = {v.name: v.depends_on for v in self.state.bundles.values() if not v.deleting}
        if loop := holds.cycle(bundle.bundle, deps, graph):
            raise ManifestError(f"dependsOn closes a cycle: {' → '.join(loop)}")

    async def _take(
        self,
        ident: tuple[str, str],
        bundle: Bundle,
        desired: list[tuple[Slot, bytes, bytes]],
        plan: Plan,
        *,
        seq: int,
    ) -> None:
        st = self.state
        cluster, name = ident
        options = bundle.options
        view = BundleView.of(bundle, seq)
        view.stages, view.hooks = plan.stages, plan.hooks
        view.skipped_hooks = plan.skipped
        previous = st.bundles.get(ident)
        taken = await stepped(
            takeover.taking(view, desired, st.entries, st.bundles, take_over=options.take_over)
        )
        for slot, other in taken.moved:
            log.warning("%s: taken over by bundle %s from bundle %s", slot[1], name, other)
            st.bundles[(cluster, other)].keys.discard(slot[1])
            self.board.mark((cluster, other))
        st.bundles[ident] = view
        st.gates.phases.pop(name, None)  # not Ready for its dependents until this revision is
        if options.override_window:  # before its objects are decided: they write through
            st.gates.overrides.add(name)
        else:
            st.gates.overrides.discard(name)
        self.board.mark(ident)
        span = trace.get_current_span()
        if span.get_span_context().is_valid:
            span.set_attributes({"cluster": cluster, "bundle": name, "revision": view.revision})
            self.board.continue_trace(ident, trace.set_span_in_context(span))
        self.board.answer(ident)
        objects = (
            await in_order(taken.objects, lambda d: apply_order_text(d[0][1]))
            if st.live  # decided as they are folded: in apply order
            else taken.objects  # rebuilding: folded without a decision, in any order
        )
        book = Codebook.of([encoded for _, encoded, _ in objects])
        for i, (slot, encoded, sha) in enumerate(objects):
            if st.details.manifest(slot) != encoded:  # a republish: no packing again
                st.details.set_manifest(slot, encoded, book)
            await self.fold(
                slot, Desired(name, bundle.revision, sha, options.prune, options.drift == "correct")
            )
            await pace(i)  # heartbeats and publishes run between decisions
        if book is not None:
            book.seal()
        left = previous.keys - view.keys if previous is not None else set()
        if st.live and left:
            # the prune budget weighs the deletions before an apply on its way is called back
            before = st.gates.prune_held.get(view.name)
            held = await stepped(st.weighing_prunes(view))
            if held is not None and held != before:
                log.warning("bundle %s/%s: %s", cluster, name, held.message)
        for key in left:
            await self._release((cluster, key), view)
        if st.live:
            await self.prune(view)
        for key in left:
            # after the prune decisions, which may read a CRD's kind from its manifest
            st.details.drop_manifest((cluster, key))
        for err in view.errors:
            log.warning("bundle %s/%s@%s: %s", cluster, name, bundle.revision, err)

    async def _release(self, slot: Slot, view: BundleView) -> None:
        """An object of the bundle's previous revision that ``view``'s revision leaves out."""
        entry = self.state.entries.get(slot)
        if entry is None or entry.bundle != view.name:
            return
        if self.state.live and entry.inflight not in (None, DELETE_INFLIGHT):
            # an apply on its way is called back (a delete replaces it in the queue)
            await self.fold(slot, self.state.removed(slot, view))
        else:
            # no longer desired, whether it is pruned now or later
            self.state.entries[slot] = msgspec.structs.replace(
                entry, bundle="", manifest_sha=None, revision=view.revision
            )

    async def _refused(
        self, ident: tuple[str, str], revision: str, reason: str, *, waits: bool = False
    ) -> None:
        """Say ``revision`` was not taken: Failed, or (``waits``: it is taken once a kind's scope
        is known) Reconciling, never Failed for what discovery answers in a moment."""
        cluster, name = ident
        if waits:
            log.warning("bundle %s/%s@%s waits: %s", cluster, name, revision, reason)
        else:
            log.error("bundle %s/%s@%s refused: %s", cluster, name, revision, reason)
            self.state.counters["bundles_refused"] += 1
        if not name:
            return
        view = self.state.bundles.get(ident)
        if view is not None:
            # the revision in force stays applied; its status says the latest one was refused
            view.refused = (revision, reason)
            view.refusal_waits = waits
            self.board.answer(ident)
            self.board.mark(ident)
            return
        status = refused_status(cluster, name, revision, reason, waits=waits)
        try:
            subject = bundle_status_subject(cluster, name)
        except SubjectError:
            return
        await self.pub.publish(
            subject, encode(status), msg_id=f"refused:{subject}:{messages.now()}"
        )

    async def control(self, msg: bus.Message) -> None:
        """A bundle suspended or resumed: resumed, everything of it that differs is written."""
        ctl = decode(msg.data, BundleControl)
        where = parse_subject(msg.subject)
        if (ctl.cluster, ctl.bundle) != (where.cluster, where.bundle):
            raise ValueError(
                f"control message names {ctl.cluster}/{ctl.bundle} but was published to the "
                f"subject of {where.cluster}/{where.bundle}"
            )
        st = self.state
        was = ctl.bundle in st.gates.suspended
        if ctl.suspended:
            st.gates.suspended[ctl.bundle] = ctl.reason
        else:
            st.gates.suspended.pop(ctl.bundle, None)
        ident = (self.state.cluster, ctl.bundle)
        self.board.mark(ident)
        self.board.answer(ident)
        log.info(
            "bundle %s/%s: %s%s",
            *ident,
            "suspended" if ctl.suspended else "resumed",
            f" ({ctl.reason})" if ctl.reason else "",
        )
        if was and not ctl.suspended and st.live:
            await self.release(ctl.bundle)

    async def request_release(self, bundle: str) -> None:
        """The hold on ``bundle`` ended (seen by the status tick): release it in the run loop,
        between two messages, like every other change to the entries."""
        self.state.gates.held.discard(bundle)
        await self._queue.put(("release", bundle))

    async def release(self, bundle: str) -> None:
        """The hold on ``bundle`` ended: decide again on each of its objects, then prune (a
        write still held, by another hold, holds the bundle again)."""
        st = self.state
        st.gates.held.discard(bundle)
        log.info("bundle %s/%s: hold ended: deciding again", self.state.cluster, bundle)
        mine = [
            slot for slot, e in st.entries.items(cluster=self.state.cluster) if e.bundle == bundle
        ]
        for i, slot in enumerate(await in_order(mine, lambda s: apply_order_text(s[1]))):
            await self.fold(slot, Release())
            await pace(i)
        view = st.bundles.get((self.state.cluster, bundle))
        if view is not None:
            await self.prune(view)
