"""Everything one cluster's planner knows, in one place its parts share explicitly (pure).

The planner's shell — its run loop (``shell.loop``), bundle intake (``shell.intake``), decision
publisher (``shell.sending``) and status board (``shell.status_board``) — each take this state as
an argument and say which parts of it they change; the questions several of them ask of it are
answered here. Whether a bundle is Ready is ``status.report``'s answer, read from this state.

What holds a bundle's writes back is one value of its own (``gates``), and so is the tenant
policy in force (``tenancy``); this state asks them with what only it knows — the cluster, its
registry labels, the bundles in force and what each depends on.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Generator
from typing import Any

from schemas.subjects import ObjectKey
from schemas.windows import BundleWindow
from services.core.scope import Scopes
from services.core.steps import finished
from services.planner.memory.gates import Gates
from services.planner.memory.object_details import Details
from services.planner.memory.store import EntryStore
from services.planner.memory.tenancy import Tenancy
from services.planner.rule import budget, holds, prune
from services.planner.rule.decide import Decision, Entry, Removed
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.windows.verdict import Block

WEIGH_STEP = 1024
"""Objects weighed between two yields of ``weighing_prunes``."""


@dataclasses.dataclass(eq=False)
class ClusterState:
    """One cluster's objects, bundles and who serves it, as this planner knows them."""

    cluster: str
    cluster_labels: dict[str, str] | None = None
    """The cluster's labels in the fleet registry, which a tenant's ``clusterSelector`` and a
    sync window's must match: read before the first revision, then followed live. None:
    unknown (not registered, removed, unreadable), which no tenant's selector matches and every
    window's does — not ``{}``, which ``env!=prod`` does."""
    entries: EntryStore = dataclasses.field(default_factory=EntryStore)
    """The SHA cache, packed (≈ 230 bytes per object): what ``decide`` folds."""
    details: Details = dataclasses.field(default_factory=Details)
    """Per object, what the cache does not hold: manifest, health, the applier's last word."""
    bundles: dict[tuple[str, str], BundleView] = dataclasses.field(default_factory=dict)
    """(cluster, bundle) -> the view of the bundle's revision in force."""
    scopes: Scopes = dataclasses.field(default_factory=Scopes)
    """Which kinds are namespaced: a cluster-scoped object's stray namespace is dropped."""
    unserved: list[str] = dataclasses.field(default_factory=list)
    """No live watcher/applier for this cluster (from their heartbeats)."""
    watcher_synced: bool = False
    """The cluster's watcher has completed its initial lists: prune may trust the view."""
    live: bool = False
    """The rebuild from the streams is complete: facts are decided, not only folded."""
    read_up_to: dict[str, int] = dataclasses.field(default_factory=dict)
    """Stream name -> sequence of the last message of it this planner has folded (each stream
    is followed in order): whether a fact on the bus was read yet."""
    counters: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Decisions by ``action:reason``, and ``bad_messages``, ``bundles_refused``, ``resent``."""
    tenancy: Tenancy = dataclasses.field(default_factory=Tenancy)
    """The tenant policy in force, or why none can be used."""
    gates: Gates = dataclasses.field(default_factory=Gates)
    """What holds a bundle's writes back: suspension, sync windows and overrides, the
    dependencies' phases, and the bundles held now."""
    prune_budget: budget.Budget = dataclasses.field(default_factory=budget.Budget)
    """How much one revision may delete of a bundle at once (the planner's settings)."""
    fleet_fences: dict[str, int] = dataclasses.field(default_factory=dict)
    """Bundle -> the highest rollout-driver fencing token of a placement taken for it (or, met
    with none remembered, found in the bundle's history: ``shell.fencing``): a lower one comes
    from a driver deposed while it stalled (``revision.fenced``)."""

    def hold(self, bundle: str) -> holds.Hold | None:
        """Why ``bundle``'s writes wait now (suspended, a sync window, a dependency not Ready),
        or None."""
        view = self.bundles.get((self.cluster, bundle))
        deps = view.depends_on if view is not None else []
        return self.gates.hold(
            bundle, depends_on=deps, cluster=self.cluster, labels=self.cluster_labels
        )

    def window_block(self, bundle: str) -> Block | None:
        """The sync window that holds ``bundle``'s writes now, whether or not its revision
        overrides windows; None when none does."""
        return self.gates.window_block(bundle, self.cluster, self.cluster_labels)

    def window_standing(self, bundle: str) -> BundleWindow | None:
        """How the sync windows stand for ``bundle`` now, as its status publishes them
        (``Gates.window_standing``); None when no window names it."""
        return self.gates.window_standing(bundle, self.cluster, self.cluster_labels)

    def next_window_change(self) -> float | None:
        """When (seconds since the epoch) a sync window next opens or closes for a bundle of
        this cluster; None when no window names one."""
        names = (name for _, name in self.bundles)
        return self.gates.next_window_change(names, self.cluster, self.cluster_labels)

    def window_note(self, bundle: str, d: Decision) -> str:
        """What ``d``'s decision record says of sync windows (``Gates.window_note``)."""
        return self.gates.window_note(bundle, d, self.cluster, self.cluster_labels)

    def may_prune(self) -> bool:
        """Prune only from a complete view: the cluster's watcher has listed every kind."""
        return self.live and self.watcher_synced

    def view_of(self, slot: Slot, entry: Entry, removed_from: str = "") -> BundleView | None:
        """The bundle the object is desired by, or else the one whose label it carries, or else
        the one it was just ``removed_from`` (an apply still on its way, cancelled by a prune:
        the delete is that bundle's, made with its identity)."""
        return self.bundles.get((slot[0], entry.bundle or entry.owner_bundle or removed_from))

    def removed(self, slot: Slot, view: BundleView) -> Removed:
        """The event of the object leaving ``view``'s bundle (``prune.removed``)."""
        return prune.removed(
            slot[1], view, self.entries.items(cluster=slot[0]), self.details.manifest(slot)
        )

    def weigh_prunes(self, view: BundleView) -> budget.PruneHeld | None:
        """Weigh ``view``'s deletions on this cluster against the prune budget now, and keep the
        verdict (``gates.prune_held``): what is held, or None when they may go."""
        return finished(self.weighing_prunes(view))

    def weighing_prunes(self, view: BundleView) -> Generator[None, None, budget.PruneHeld | None]:
        """``weigh_prunes`` in steps of ``WEIGH_STEP`` objects (the shell runs it with
        ``stepped``): only the objects the bundle applied that are live can be kept or deleted
        by its revision (``EntryStore.applied_live``, header only), and 100,000 of them
        unpacked in one piece held the event loop for more than a second.

        An object the revision declares is never one of its deletions (``budget.leaving``), so
        only the others are unpacked first; what the revision keeps (``budget.predates``) is
        counted only when there is a deletion to weigh against it, which a restart's go-live
        and most revisions have not (it cost 0.5 s of a 100,000-object restart)."""
        candidates = self.entries.applied_live(view.cluster, view.name)
        deleting: list[ObjectKey] = []
        for i, slot in enumerate(s for s in candidates if s[1] not in view.keys):
            if i % WEIGH_STEP == WEIGH_STEP - 1:
                yield
            if (e := self.entries.get(slot)) is None:
                continue  # gone between two steps
            if budget.leaving(e, view) and not (
                (e.key.group, e.key.kind) in budget.KINDS and self.in_use(slot, view)
            ):
                deleting.append(e.key)
        kept = 0
        declared = (s for s in candidates if s[1] in view.keys) if deleting else ()
        for i, slot in enumerate(declared):
            if i % WEIGH_STEP == WEIGH_STEP - 1:
                yield
            if (e := self.entries.get(slot)) is not None and budget.predates(e, view):
                kept += 1
        held = budget.verdict(
            view, deleting, kept=kept, budget=self.prune_budget, cluster=view.cluster
        )
        allowed = self.gates.prune_allowed.get(view.name)
        if allowed is not None and allowed[0] != view.seq:
            del self.gates.prune_allowed[view.name]  # another revision's: not kept in memory
            allowed = None
        if held is not None and allowed is not None and held.held <= allowed[1]:
            held = None  # let go before for this revision: its changed objects landed since
        if held is None:
            self.gates.prune_held.pop(view.name, None)
            if deleting:
                was = allowed[1] if allowed is not None else frozenset()
                self.gates.prune_allowed[view.name] = (view.seq, was | frozenset(deleting))
        else:
            self.gates.prune_held[view.name] = held
        return held

    def weighed(self, view: BundleView, key: ObjectKey) -> bool:
        """Whether ``key``'s deletion for ``view`` was weighed with the bundle's others already:
        held now, or let go for this revision (``weigh_prunes``)."""
        held = self.gates.prune_held.get(view.name)
        if held is not None:
            return key in held.held
        allowed = self.gates.prune_allowed.get(view.name)
        return allowed is not None and allowed[0] == view.seq and key in allowed[1]

    def in_use(self, slot: Slot, view: BundleView) -> str:
        """Why pruning the object for ``view`` is held back ("" when it is not)."""
        return self.removed(slot, view).in_use

    def cache_stats(self) -> dict[str, Any]:
        """Hits and misses by reason since start: what explains the hit ratio."""
        return cache_stats(self.counters, len(self.entries))


def cache_stats(counters: collections.Counter[str], objects: int) -> dict[str, Any]:
    """Hits and misses by reason from the decision counters (``action:reason``)."""
    hits = counters.get("hit:hit", 0)
    misses = {
        k.split(":", 1)[1]: v for k, v in counters.items() if k.startswith(("apply:", "delete:"))
    }
    total = hits + sum(misses.values())
    return {
        "hits": hits,
        "misses": misses,
        "hit_ratio": round(hits / total, 4) if total else None,
        "objects": objects,
        "bad_messages": counters["bad_messages"],
    }
