"""Is bundle X Ready, and why: one bundle's status message from what its cluster's planner
knows (pure).

``bundle_status`` is the whole answer, in three steps a reader can follow here:

1. its objects counted into a ``Tally`` (``tally.mark`` per object, kept current per bundle by
   the ``ledger`` from the objects that changed since the last look);
2. the hold on its writes (suspended, a dependency not Ready: ``rule.holds``) added, and what
   the prune budget holds of its deletions (``rule.budget``);
3. the phase and its one-line message named by ``phase.bundle_phase`` — Ready only when every
   object of the revision is applied, seen healthy, and no prune is pending.

The status board (``shell.status_board``) calls it for each bundle that changed and publishes
the result when what a user reads of it changed. A bundle whose very first revision is refused
has no view to count: its status is ``refused_status``, Failed (or Reconciling while it waits
for a kind's scope), never Ready.
"""

from __future__ import annotations

from schemas.messages import BundleCounts, BundlePhase, BundleStatus
from schemas.windows import BundleWindow
from services.planner.memory.cluster import ClusterState
from services.planner.rule.messages import now
from services.planner.rule.revision import BundleView
from services.planner.status.ledger import Ledger
from services.planner.status.phase import Tally, bundle_phase, counts, listed
from services.planner.status.tally import Known


def known_of(state: ClusterState) -> Known:
    """What the tally reads of ``state``."""
    return Known(state.entries, state.details, state.unserved, state.watcher_synced, state.in_use)


def bundle_status(state: ClusterState, view: BundleView, ledger: Ledger) -> BundleStatus:
    """``view``'s status now: counted from ``state`` through ``ledger`` (which must be the one
    that follows ``state``, kept across calls), with its hold and suspension."""
    known = known_of(state)
    hold = state.hold(view.name)
    t = ledger.tally(view, known, state.bundles)
    t.hold = hold.message if hold is not None else ""
    t.window = hold.window if hold is not None else ""
    t.suspended = view.name in state.gates.suspended
    budget = state.gates.prune_held.get(view.name)
    if budget is not None and budget.revision == view.revision and not view.refused:
        t.prune_held = budget.message
        # each held object named once, for the budget (it may wait for the watcher's lists too)
        named = {str(k) for k in budget.keys}
        t.problems = [p for p in t.problems if p.partition(": ")[0] not in named] + [
            f"{k}: prune held (prune budget)" for k in budget.keys
        ]
    return status_message(view, t, state.window_standing(view.name))


def status_message(view: BundleView, t: Tally, windows: BundleWindow | None = None) -> BundleStatus:
    """The status message of ``view`` from its tally, and how the sync windows stand for it."""
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
        window=t.window if phase is BundlePhase.OUT_OF_SYNC else "",
        windows=windows,
    )


def refused_status(
    cluster: str, bundle: str, revision: str, reason: str, *, waits: bool
) -> BundleStatus:
    """The status of a bundle with no revision in force whose first revision was refused:
    Failed, or Reconciling while it ``waits`` for a kind's scope to be known."""
    return BundleStatus(
        cluster=cluster or "?",
        bundle=bundle,
        revision=revision,
        phase=BundlePhase.RECONCILING if waits else BundlePhase.FAILED,
        counts=BundleCounts(),
        message=f"revision {revision} {'waits' if waits else 'refused'}: {reason}",
        at=now(),
    )
