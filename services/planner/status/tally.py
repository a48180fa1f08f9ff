"""Counting one bundle's objects into a ``Tally`` (then ``phase.bundle_phase`` names the phase).

Each object of the revision gets a ``mark`` (what it counts as, and the line naming it), held in
the bundle's ``Book``; ``tally_of`` turns a book, the revision's own problems and its strays into
the tally. ``tally`` counts from scratch; the planner keeps its books current from the objects
that changed (``ledger``), and ``tally`` is what that must equal.

Pure: reads the planner's entries and details (the appliers' last words, the watcher's health)
as they are, and changes nothing of them.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable, Collection
from typing import Any

from schemas.messages import WORKING_PHASES, Health, ObjectPhase
from schemas.subjects import ObjectKey
from services.core.hooks import DEFAULT_STAGE, Phase
from services.core.manifest import apply_order
from services.planner.memory.object_details import Details
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import DELETE_INFLIGHT, Entry
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.planner.status.phase import MAX_LISTED, Tally


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


# What an object of a bundle counts as (``mark``): READY is no mark at all, so a bundle that is
# Ready holds nothing per object in its ``Book``.
SKIP, FAILED, CONFLICT, IN_FLIGHT, WAITING, UNOBSERVED, DRIFTED, UNHEALTHY, NOT_READY = range(9)
Mark = tuple[int, str]
"""(what the object counts as, the line that names it in the status, or "")"""


def mark(slot: Slot, known: Known, view: BundleView | None = None) -> Mark | None:
    """What one desired object counts as in its bundle's tally; None when it is Ready.

    Of a revision with hooks (``view``): a hook that failed fails the revision, naming it and
    how it ended; a sync-fail hook that did not run (nothing failed) is not waited for."""
    key = slot[1]
    hook = view is not None and key in view.hooks
    p = known.entries.progress(slot)
    fail_hook = view is not None and view.stages.get(key, DEFAULT_STAGE)[0] == Phase.FAIL
    if fail_hook and (p is None or not p.applied):
        return None
    if p is None:
        return SKIP, ""
    if p.failed:
        oc = known.details.outcome(slot)
        line = f"{key}: {oc.phase}: {oc.message}" if oc else f"{key}: failed"
        return (CONFLICT if oc is not None and oc.phase is ObjectPhase.CONFLICT else FAILED), line
    if p.inflight:
        oc = known.details.outcome(slot)
        if oc is not None and oc.phase in WORKING_PHASES:
            return WAITING, f"{key}: {oc.phase}: {oc.message}"
        return IN_FLIGHT, ""
    if not p.applied:
        return SKIP, ""
    if not p.observed:
        return UNOBSERVED, ""
    if p.retired:
        h, why = known.details.health(slot)
        if hook and h is Health.FAILED:
            return FAILED, f"{key}: hook failed: {why}" if why else f"{key}: hook failed"
        return None  # finished, and removed by its controller (or its hook policy) as it asks
    if p.drifted:
        return DRIFTED, f"{key}: drifted"
    h, why = known.details.health(slot)
    if h is Health.READY:
        return None
    if h is Health.FAILED:
        if hook:
            return FAILED, f"{key}: hook failed: {why}" if why else f"{key}: hook failed"
        return UNHEALTHY, f"{key}: unhealthy: {why}"
    return NOT_READY, f"{key}: not ready ({h}): {why}" if why else f"{key}: not ready ({h})"


def _in_apply_order(item: tuple[ObjectKey, str]) -> tuple[int, str, str, str, str]:
    return apply_order(item[0])


def _by_line(item: tuple[ObjectKey, str]) -> str:
    return item[1]


# the lines of the status, in this order: each group ordered as given, and only the first
# MAX_LISTED of each kept (the status lists no more; ordering every line of a big bundle on
# every tick cost more than the counting)
_GROUPS: list[tuple[tuple[int, ...], Callable[[tuple[ObjectKey, str]], Any]]] = [
    ((DRIFTED,), _in_apply_order),
    ((FAILED, CONFLICT), _in_apply_order),
    ((UNHEALTHY,), _by_line),
    ((WAITING,), _by_line),
    ((NOT_READY,), _in_apply_order),
]
_GROUP_OF = {m: i for i, (marks, _) in enumerate(_GROUPS) for m in marks}


class Book:
    """The marks of one bundle revision's objects: per mark, the objects with it and their lines.

    Ready objects hold nothing. ``put`` changes one object's mark; the counts are the sizes of the
    per-mark maps, and each group's listed lines are ordered again only when it changed."""

    def __init__(self, view: BundleView) -> None:
        self.view = view
        self.size = len(view.keys)
        """how many keys the view had when this book was filled: a key taken away since (by
        another bundle's take-over) needs a new book"""
        self._of: list[dict[ObjectKey, str]] = [{} for _ in range(NOT_READY + 1)]
        self._listed: dict[int, list[str]] = {}

    @classmethod
    def filled(cls, view: BundleView, known: Known) -> Book:
        book = cls(view)
        for key in view.keys:
            book.put(key, mark((view.cluster, key), known, view))
        return book

    def fits(self, view: BundleView) -> bool:
        return self.view is view and self.size == len(view.keys)

    def put(self, key: ObjectKey, m: Mark | None) -> None:
        for i, of in enumerate(self._of):
            if key in of:
                if m is not None and m[0] == i and of[key] == m[1]:
                    return
                del of[key]
                if not of:  # an emptied dict keeps its table: ~3 MiB per 100,000 keys it once held
                    self._of[i] = {}
                self._changed(i)
                break
        if m is not None:
            self._of[m[0]][key] = m[1]
            self._changed(m[0])

    def _changed(self, m: int) -> None:
        if (group := _GROUP_OF.get(m)) is not None:
            self._listed.pop(group, None)

    def count(self, *marks: int) -> int:
        return sum(len(self._of[m]) for m in marks)

    def ready(self) -> int:
        return self.size - sum(len(of) for of in self._of)

    def lines(self) -> list[str]:
        """The lines naming the objects that are not Ready, in the status's order."""
        out: list[str] = []
        for i, (marks, order) in enumerate(_GROUPS):
            listed = self._listed.get(i)
            if listed is None:
                items = itertools.chain.from_iterable(self._of[m].items() for m in marks)
                listed = self._listed[i] = [
                    line for _, line in heapq.nsmallest(MAX_LISTED, items, key=order)
                ]
            out += listed
        return out


def tally(view: BundleView, known: Known) -> Tally:
    """Count what is known about the objects of ``view`` (and of its prunes), from scratch."""
    ident = (view.cluster, view.name)
    strays = [slot for slot, owner in known.entries.all_strays() if (slot[0], owner) == ident]
    return tally_of(view, known, Book.filled(view, known), strays)


def tally_of(view: BundleView, known: Known, book: Book, strays: Collection[Slot]) -> Tally:
    """The tally of ``view`` from its filled ``book`` and the live objects carrying its label
    that no bundle declares (``strays``)."""
    shown = view.refused[0] if view.refused else view.revision
    t = Tally(shown, total=len(view.keys) + len(view.errors))
    t.refused = view.refused[1] if view.refused else ""
    t.refusal_waits = view.refusal_waits
    t.deleting = view.deleting
    t.outside = len(view.outside)
    t.unserved = list(known.unserved)
    t.failed = len(view.errors) + book.count(FAILED)
    t.declared_by = dict(view.declared_by)
    t.conflicts = book.count(CONFLICT)
    t.in_flight = book.count(IN_FLIGHT, WAITING)
    t.unobserved = book.count(UNOBSERVED)
    t.drifted = book.count(DRIFTED)
    t.unhealthy = book.count(UNHEALTHY)
    t.ready = book.ready()
    t.applied = t.ready + book.count(UNOBSERVED, DRIFTED, UNHEALTHY, NOT_READY)
    t.problems = view.outside + view.errors + book.lines()
    _tally_prunes(view, known, t, strays)
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


def _tally_prunes(view: BundleView, known: Known, t: Tally, strays: Collection[Slot]) -> None:
    """Objects carrying this bundle's label that its revision no longer declares."""
    if view.deleting:
        _deletion_pending(view, known, t)
    own: list[tuple[Slot, Entry]] = []
    for slot in sorted(strays, key=lambda s: apply_order(s[1])):
        e = known.entries[slot]
        if slot[1] in view.keys:
            continue
        if e.applied_bundle == view.name:
            own.append((slot, e))
            continue
        # only the label says it is the bundle's (a copy, another's label): reported, never
        # pruned, and not in the way of Ready — or anyone could keep a bundle from it
        t.not_declared += 1
        t.problems.append(
            f"{slot[1]}: carries bundle {view.name}'s label, not declared by it (never pruned)"
        )
    if not view.prune:
        if view.deleting:  # deleted with its objects kept: they are what it leaves behind
            t.kept += len(own)
        return
    for slot, e in own:
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
