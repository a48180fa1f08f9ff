"""What may stop or hold a bundle's writes on one cluster, in one value (pure): suspension, sync
windows and their overrides, the dependencies' phases, and which bundles are held now.

The planner keeps them apart from its objects (``ClusterState``) because they change together
and are asked one question: may this bundle write now, and if not, what holds it
(``rule.holds.hold_of`` says in which order they are asked). A window's answer depends on the
cluster it is asked for and that cluster's registry labels, which the caller gives: they are
the cluster's, not the gates'.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Iterable

from schemas.decision import DecisionAction, DecisionReason
from schemas.messages import BundlePhase
from schemas.subjects import ObjectKey
from schemas.windows import BundleWindow
from services.planner.rule import budget, holds
from services.planner.rule.decide import Decision
from services.windows import verdict as sync_windows
from services.windows.spec import Labels, Window


@dataclasses.dataclass(eq=False)
class Gates:
    """What holds a bundle's writes back, as this planner knows it now."""

    suspended: dict[str, str] = dataclasses.field(default_factory=dict)
    """Bundles whose reconciliation is suspended (the CONTROL stream), with the reason given."""
    phases: dict[str, BundlePhase] = dataclasses.field(default_factory=dict)
    """Each bundle's phase as last published (the status board writes it; a new revision taken
    in drops it): what a bundle that depends on it waits for (and, Deleted, that a deleted
    bundle's prunes are done: ``shell.periodic`` forgets it)."""
    held: set[str] = dataclasses.field(default_factory=set)
    """Bundles with a write held back since their hold began: released when it ends."""
    windows: tuple[Window, ...] = ()
    """The sync windows in force (the windows KV bucket's, followed live; docs/windows.md)."""
    windows_unusable: str = ""
    """Why the latest windows stored on the bus cannot be used ("" when they can): the last
    good ones stay in force meanwhile — a deny window is never dropped for a typo."""
    overrides: set[str] = dataclasses.field(default_factory=set)
    """Bundles whose revision in force was published with ``--override-window``."""
    prune_held: dict[str, budget.PruneHeld] = dataclasses.field(default_factory=dict)
    """Bundles whose revision's deletions the prune budget holds (``rule.budget``), with what
    they are: weighed again whenever the bundle's prune runs."""
    prune_allowed: dict[str, tuple[int, frozenset[ObjectKey]]] = dataclasses.field(
        default_factory=dict
    )
    """Per bundle, the revision (its BUNDLES sequence) whose deletions the budget let go, and
    which: they stay let go while the revision's changed objects land (``rule.budget``)."""
    clock: Callable[[], float] = time.time
    """Seconds since the epoch: when windows are asked about."""
    _blocks: dict[tuple[int, ...], tuple[float, sync_windows.Block | None, BundleWindow]] = (
        dataclasses.field(default_factory=dict)
    )
    """The windows naming a bundle (their indexes) -> (until when the answer holds, the block
    then, how they stand then): a fold asks for every event, the cron is read once per window
    change."""

    def hold(
        self, bundle: str, *, depends_on: list[str], cluster: str, labels: Labels
    ) -> holds.Hold | None:
        """Why ``bundle``'s writes wait now (suspended, a sync window its revision does not
        override, a dependency in ``depends_on`` not Ready), or None."""
        window = None if bundle in self.overrides else self.window_block(bundle, cluster, labels)
        return holds.hold_of(
            depends_on, self.phases, suspended=self.suspended.get(bundle), window=window
        )

    def set_windows(self, windows: tuple[Window, ...]) -> None:
        """New sync windows in force (the answers cached for the old ones are dropped)."""
        self.windows, self.windows_unusable = windows, ""
        self._blocks.clear()

    def window_block(self, bundle: str, cluster: str, labels: Labels) -> sync_windows.Block | None:
        """The sync window that holds ``bundle``'s writes on ``cluster`` now, whether or not its
        revision overrides windows; None when none does."""
        answer = self._window_answer(bundle, cluster, labels)
        return answer[1] if answer is not None else None

    def window_standing(self, bundle: str, cluster: str, labels: Labels) -> BundleWindow | None:
        """The sync windows as they stand for ``bundle`` on ``cluster`` now (held or not, the
        next change), as its status publishes them; None when no window names it."""
        answer = self._window_answer(bundle, cluster, labels)
        return answer[2] if answer is not None else None

    def _window_answer(
        self, bundle: str, cluster: str, labels: Labels
    ) -> tuple[float, sync_windows.Block | None, BundleWindow] | None:
        if not self.windows:
            return None
        mine = self._naming(bundle, cluster, labels)
        if not mine:
            return None
        now = self.clock()
        cached = self._blocks.get(mine)
        if cached is not None and now < cached[0]:
            return cached
        at = dt.datetime.fromtimestamp(now, dt.UTC)
        ws = [self.windows[i] for i in mine]
        block = sync_windows.block(ws, bundle, cluster, at, labels=labels)
        change = sync_windows.next_change(ws, bundle, cluster, at, labels=labels)
        standing = sync_windows.shown(ws, bundle, cluster, block, change, labels=labels)
        valid = min(change.timestamp(), now + 3600.0) if change is not None else now + 3600.0
        self._blocks[mine] = answer = (valid, block, standing)
        return answer

    def _naming(self, bundle: str, cluster: str, labels: Labels) -> tuple[int, ...]:
        """The indexes of the windows naming ``bundle`` on ``cluster`` (its registry labels for
        a ``clusterSelector``; unknown labels: named, the restrictive reading)."""
        return tuple(i for i, w in enumerate(self.windows) if w.names(bundle, cluster, labels))

    def next_window_change(
        self, bundles: Iterable[str], cluster: str, labels: Labels
    ) -> float | None:
        """When (seconds since the epoch) a sync window next opens or closes for one of
        ``bundles`` on ``cluster``; None when no window names one."""
        if not self.windows:
            return None
        at = dt.datetime.fromtimestamp(self.clock(), dt.UTC)
        changes: dict[tuple[int, ...], dt.datetime | None] = {}
        for name in bundles:
            mine = self._naming(name, cluster, labels)
            if mine and mine not in changes:
                ws = [self.windows[i] for i in mine]
                changes[mine] = sync_windows.next_change(ws, name, cluster, at, labels=labels)
        found = [c.timestamp() for c in changes.values() if c is not None]
        return min(found) if found else None

    def window_note(self, bundle: str, d: Decision, cluster: str, labels: Labels) -> str:
        """What ``d``'s decision record says of sync windows: the window that held it, or
        ``override: NAME`` for a write ``--override-window`` let through NAME; "" else."""
        if d.action is DecisionAction.HOLD and d.reason is DecisionReason.WINDOW:
            block = self.window_block(bundle, cluster, labels)
            return block.window.name if block is not None else ""
        if d.writes and bundle in self.overrides:
            block = self.window_block(bundle, cluster, labels)
            return f"override: {block.window.name}" if block is not None else ""
        return ""
