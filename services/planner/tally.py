"""Counting one bundle's objects into a ``Tally`` (then ``status.bundle_phase`` names the phase).

Pure: reads the planner's entries and details (the appliers' last words, the watcher's health)
as they are, and changes nothing.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable

from schemas.messages import WORKING_PHASES, BundleStatus, Health, ObjectPhase
from schemas.subjects import ObjectKey
from services.core.manifest import apply_order
from services.planner.decide import DELETE_INFLIGHT
from services.planner.details import Details
from services.planner.emit import now
from services.planner.intake import BundleView
from services.planner.status import MAX_LISTED, Tally, bundle_phase, counts, listed
from services.planner.store import EntryStore, Slot


@dataclasses.dataclass(frozen=True, slots=True)
class Known:
    """What the planner knows of a cluster, as the tally reads it."""

    entries: EntryStore
    details: Details
    """the applier's last word that was not an applied fact; the watcher's health"""
    unserved: list[str]
    watcher_synced: bool
    in_use: Callable[[Slot, BundleView], str]
    """why a prune of the object is held back ("" when it is not)"""


def bundle_status(view: BundleView, t: Tally) -> BundleStatus:
    """The status message of ``view`` from its tally."""
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
        at=now(),
        source="" if view.refused else view.source,
        published_at=view.published_at,
        suspended=t.suspended,
        depends_on=list(view.depends_on),
        rollback_of="" if view.refused else view.rollback_of,
    )


def tally(view: BundleView, known: Known) -> Tally:
    """Count what is known about the objects of ``view`` (and of its prunes)."""
    shown = view.refused[0] if view.refused else view.revision
    t = Tally(shown, total=len(view.keys) + len(view.errors))
    t.refused = view.refused[1] if view.refused else ""
    t.refusal_waits = view.refusal_waits
    t.deleting = view.deleting
    t.outside = len(view.outside)
    t.unserved = list(known.unserved)
    t.failed = len(view.errors)
    failing: list[ObjectKey] = []
    unhealthy: list[str] = []
    waiting: list[str] = []
    not_ready: list[tuple[ObjectKey, Health, str]] = []
    for key in view.keys:
        slot = (view.cluster, key)
        p = known.entries.progress(slot)
        if p is None:
            continue
        if p.failed:
            failing.append(key)
            continue
        if p.inflight:
            t.in_flight += 1
            oc = known.details.outcome(slot)
            if oc is not None and oc.phase in WORKING_PHASES:
                waiting.append(f"{key}: {oc.phase}: {oc.message}")
            continue
        if not p.applied:
            continue
        t.applied += 1
        if not p.observed:
            t.unobserved += 1
            continue
        if p.retired:
            t.ready += 1  # finished, and removed by its controller as its manifest asks
            continue
        if p.drifted:
            t.drifted += 1
            t.problems.append(f"{key}: drifted")
            continue
        h, why = known.details.health(slot)
        if h is Health.READY:
            t.ready += 1
        elif h is Health.FAILED:
            t.unhealthy += 1
            unhealthy.append(f"{key}: unhealthy: {why}")
        else:
            not_ready.append((key, h, why))
    # sorted only now: sorting every key of a big bundle on every tick cost more than counting
    for key in sorted(failing, key=apply_order):
        oc = known.details.outcome((view.cluster, key))
        if oc is not None and oc.phase is ObjectPhase.CONFLICT:
            t.conflicts += 1
        else:
            t.failed += 1
        t.problems.append(f"{key}: {oc.phase}: {oc.message}" if oc else f"{key}: failed")
    # what a Reconciling "18/19 ready" waits for, named: the first MAX_LISTED in apply order (a
    # line per object of a big bundle on every tick would cost more than the counting)
    listed_not_ready = [
        f"{key}: not ready ({h}): {why}" if why else f"{key}: not ready ({h})"
        for key, h, why in heapq.nsmallest(MAX_LISTED, not_ready, key=lambda r: apply_order(r[0]))
    ]
    t.problems = (
        view.outside
        + view.errors
        + t.problems
        + sorted(unhealthy)
        + sorted(waiting)
        + listed_not_ready
    )
    _tally_prunes(view, known, t)
    return t


def _deletion_pending(view: BundleView, known: Known, t: Tally) -> None:
    """A deletion is done only when nothing of the bundle is on its way or unseen: an apply
    or a delete in flight, or an object applied that the watcher has not shown yet (it may be
    live, carrying the label, with no bundle left to prune it once this one is forgotten)."""
    if not known.watcher_synced:
        t.pruning += 1
        t.problems.append("deletion waits for the watcher's initial lists")
        return
    for _, e in known.entries.items(cluster=view.cluster):
        if e.bundle or e.revision != view.revision:
            continue
        if e.live and e.owner_bundle == view.name:
            continue  # a prune candidate: counted with the prunes
        if e.inflight is not None or (e.apply_sha is not None and not e.observed):
            t.pruning += 1
            t.problems.append(f"{e.key}: deletion waits for it (on its way, or not seen yet)")


def _tally_prunes(view: BundleView, known: Known, t: Tally) -> None:
    """Objects carrying this bundle's label that its revision no longer declares."""
    if view.deleting:
        _deletion_pending(view, known, t)
    if not view.prune:
        if view.deleting:  # deleted with its objects kept: they are what it leaves behind
            t.kept += sum(1 for _ in known.entries.strays(view.cluster, view.name))
        return
    for slot in known.entries.strays(view.cluster, view.name):
        e = known.entries[slot]
        if slot[1] in view.keys:
            continue
        if e.keep:
            t.kept += 1
        elif e.inflight == DELETE_INFLIGHT:
            t.pruning += 1
        elif e.failed == DELETE_INFLIGHT:
            t.prune_failed += 1
            oc = known.details.outcome(slot)
            t.problems.append(f"{slot[1]}: prune failed: {oc.message if oc else '?'}")
        elif (why := known.in_use(slot, view)) and e.manifest_sha is None:
            t.held += 1
            t.problems.append(f"{slot[1]}: {why}")
        else:
            t.pruning += 1  # not decided yet (e.g. the watcher's lists are incomplete)
            if not known.watcher_synced:
                t.problems.append(f"{slot[1]}: prune waits for the watcher's initial list")
