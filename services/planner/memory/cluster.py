"""Everything one cluster's planner knows, in one place its parts share explicitly (pure).

The planner's shell — its run loop (``shell.loop``), bundle intake (``shell.intake``), decision
publisher (``shell.sending``) and status board (``shell.status_board``) — each take this state as
an argument and say which parts of it they change; the questions several of them ask of it are
answered here. Whether a bundle is Ready is ``status.report``'s answer, read from this state.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from schemas.decision import DecisionAction, DecisionReason
from schemas.messages import BundlePhase, Impersonation
from schemas.tenants import TenantPolicy
from schemas.windows import BundleWindow
from services.core.scope import Scopes
from services.planner.memory.object_details import Details
from services.planner.memory.store import EntryStore
from services.planner.rule import holds, limits, prune
from services.planner.rule.decide import Decision, Entry, Removed
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.windows import verdict as sync_windows
from services.windows.spec import Window


@dataclasses.dataclass(eq=False)
class ClusterState:
    """One cluster's objects, bundles and who serves it, as this planner knows them."""

    cluster: str
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
    policy: TenantPolicy = dataclasses.field(default_factory=TenantPolicy)
    """The tenant policy in force (the tenants KV bucket's, followed live)."""
    suspended: dict[str, str] = dataclasses.field(default_factory=dict)
    """Bundles whose reconciliation is suspended (the CONTROL stream), with the reason given."""
    phases: dict[str, BundlePhase] = dataclasses.field(default_factory=dict)
    """Each bundle's phase as last published (the status board writes it; a new revision taken
    in drops it): what a bundle that depends on it waits for."""
    held: set[str] = dataclasses.field(default_factory=set)
    """Bundles with a write held back since their hold began: released when it ends."""
    cluster_labels: dict[str, str] | None = None
    """The cluster's labels in the fleet registry, which a tenant's ``clusterSelector`` must
    match: read before the first revision, then followed live. None: unknown (not registered,
    removed, unreadable), which no selector matches — not ``{}``, which ``env!=prod`` does."""
    fleet_fences: dict[str, int] = dataclasses.field(default_factory=dict)
    """Bundle -> the highest rollout-driver fencing token of a placement taken for it (or, met
    with none remembered, found in the bundle's history: ``shell.fencing``): a lower one comes
    from a driver deposed while it stalled (``revision.fenced``)."""
    policy_unusable: str = ""
    """Why the latest policy stored on the bus cannot be used, at start or since ("" when it
    can): then no new revision is taken, of any bundle, until a valid policy is applied — a
    tenant's limits are never guessed, nor a lockdown forgotten."""
    windows: tuple[Window, ...] = ()
    """The sync windows in force (the windows KV bucket's, followed live; docs/windows.md)."""
    windows_unusable: str = ""
    """Why the latest windows stored on the bus cannot be used ("" when they can): the last
    good ones stay in force meanwhile — a deny window is never dropped for a typo."""
    overrides: set[str] = dataclasses.field(default_factory=set)
    """Bundles whose revision in force was published with ``--override-window``."""
    clock: Callable[[], float] = time.time
    """Seconds since the epoch: when windows are asked about."""
    _blocks: dict[tuple[int, ...], tuple[float, sync_windows.Block | None, BundleWindow]] = (
        dataclasses.field(default_factory=dict)
    )
    """The windows naming a bundle (their indexes) -> (until when the answer holds, the block
    then, how they stand then): a fold asks for every event, the cron is read once per window
    change."""

    def identity(self, bundle: str) -> Impersonation | None:
        """Whom the writes of ``bundle`` are made as (its tenant's ServiceAccount), now."""
        return limits.identity(self.policy, bundle)

    def hold(self, bundle: str) -> holds.Hold | None:
        """Why ``bundle``'s writes wait now (suspended, a sync window, a dependency not Ready),
        or None."""
        view = self.bundles.get((self.cluster, bundle))
        deps = view.depends_on if view is not None else []
        window = None if bundle in self.overrides else self.window_block(bundle)
        return holds.hold_of(deps, self.phases, suspended=self.suspended.get(bundle), window=window)

    def set_windows(self, windows: tuple[Window, ...]) -> None:
        """New sync windows in force (the answers cached for the old ones are dropped)."""
        self.windows, self.windows_unusable = windows, ""
        self._blocks.clear()

    def window_block(self, bundle: str) -> sync_windows.Block | None:
        """The sync window that holds ``bundle``'s writes now, whether or not its revision
        overrides windows; None when none does."""
        answer = self._window_answer(bundle)
        return answer[1] if answer is not None else None

    def window_standing(self, bundle: str) -> BundleWindow | None:
        """The sync windows as they stand for ``bundle`` now (held or not, the next change),
        as its status publishes them; None when no window names it."""
        answer = self._window_answer(bundle)
        return answer[2] if answer is not None else None

    def _window_answer(
        self, bundle: str
    ) -> tuple[float, sync_windows.Block | None, BundleWindow] | None:
        if not self.windows:
            return None
        mine = self._naming(bundle)
        if not mine:
            return None
        now = self.clock()
        cached = self._blocks.get(mine)
        if cached is not None and now < cached[0]:
            return cached
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        ws = [self.windows[i] for i in mine]
        labels = self.cluster_labels
        block = sync_windows.block(ws, bundle, self.cluster, at, labels=labels)
        change = sync_windows.next_change(ws, bundle, self.cluster, at, labels=labels)
        standing = sync_windows.shown(ws, bundle, self.cluster, block, change, labels=labels)
        valid = min(change.timestamp(), now + 3600.0) if change is not None else now + 3600.0
        self._blocks[mine] = answer = (valid, block, standing)
        return answer

    def _naming(self, bundle: str) -> tuple[int, ...]:
        """The indexes of the windows naming ``bundle`` on this cluster (its registry labels
        for a ``clusterSelector``; unknown labels: named, the restrictive reading)."""
        labels = self.cluster_labels
        return tuple(i for i, w in enumerate(self.windows) if w.names(bundle, self.cluster, labels))

    def next_window_change(self) -> float | None:
        """When (seconds since the epoch) a sync window next opens or closes for a bundle of
        this cluster; None when no window names one."""
        if not self.windows:
            return None
        at = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
        changes: dict[tuple[int, ...], dt.datetime | None] = {}
        for _, name in self.bundles:
            mine = self._naming(name)
            if mine and mine not in changes:
                ws = [self.windows[i] for i in mine]
                changes[mine] = sync_windows.next_change(
                    ws, name, self.cluster, at, labels=self.cluster_labels
                )
        found = [c.timestamp() for c in changes.values() if c is not None]
        return min(found) if found else None

    def window_note(self, bundle: str, d: Decision) -> str:
        """What ``d``'s decision record says of sync windows: the window that held it, or
        ``override: NAME`` for a write ``--override-window`` let through NAME; "" else."""
        if d.action is DecisionAction.HOLD and d.reason is DecisionReason.WINDOW:
            block = self.window_block(bundle)
            return block.window.name if block is not None else ""
        if d.writes and bundle in self.overrides:
            block = self.window_block(bundle)
            return f"override: {block.window.name}" if block is not None else ""
        return ""

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
