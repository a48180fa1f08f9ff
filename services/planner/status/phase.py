"""A bundle's phase, as a pure function of what is known about its objects (DESIGN §7).

The rule the user relies on: **Ready only when every object of the revision is applied, seen
healthy, and no prune is pending** — never over a failure, a conflict, a pending or failed prune,
a drift not being corrected, or a cluster that nobody serves. The planner's shell counts its
entries into a ``Tally``; ``bundle_phase`` turns the tally into a phase and a one-line message,
in this order of precedence:

=========== ================================================================================
Failed      a revision was refused, an object failed to apply, a prune failed, or the tenant
            policy changed and no longer allows objects of the revision
Conflict    an object's fields are owned by another field manager (publish with force)
Degraded    everything applied, but an object is unhealthy (kstatus Failed)
Reconciling applies or prunes on their way, waiting for a CRD/namespace (or for discovery to
            tell a kind's scope), retrying a transient error, not yet seen by the watcher, or
            no watcher/applier serves the cluster
PruneHeld   applied, but the revision's deletions wait for approval: more than the prune budget
            lets through at once, or a Namespace or CRD (``rule.budget``); never Ready
OutOfSync   applied, but the live state differs and is not being corrected (drift left
            alone, a prune held back because others' objects are inside), or anything differs
            while the bundle is suspended
Ready       all of the revision applied, seen, healthy; nothing left to prune
Deleted     a deletion whose prunes are done (what was kept is named); the bundle is forgotten
=========== ================================================================================

A bundle whose writes are held (``holds``) and that is not Ready says why first: suspended
(OutOfSync: nothing will change until it is resumed), a sync window (OutOfSync, naming the window
and when it ends), or which dependency it waits for (Reconciling).
"""

from __future__ import annotations

import dataclasses

from schemas.messages import BundleCounts, BundlePhase

MAX_LISTED = 50


@dataclasses.dataclass
class Tally:
    """What the shell found for one bundle's revision. ``problems`` are ``Kind/ns/name: why``
    lines, already ordered; they are listed in the status (bounded)."""

    revision: str
    total: int = 0
    applied: int = 0
    ready: int = 0
    failed: int = 0
    conflicts: int = 0
    unhealthy: int = 0
    in_flight: int = 0
    """intents on their way, waiting or retrying"""
    unobserved: int = 0
    """applied, not yet seen by the watcher at or after the apply"""
    drifted: int = 0
    """applied and seen differing, with no correction on its way"""
    pruning: int = 0
    prune_failed: int = 0
    kept: int = 0
    """left the revision, deliberately not pruned (annotation: fine; in use: OutOfSync)"""
    held: int = 0
    """prunes held back because the Namespace/CRD holds what others still want"""
    not_declared: int = 0
    """live objects carrying the bundle's label that none of its revisions applied: reported,
    never pruned, not in the way of Ready"""
    declared_by: dict[str, int] = dataclasses.field(default_factory=dict)
    """of the failed objects, how many each other bundle declares (not taken without take-over)"""
    refused: str = ""
    """why the latest revision was refused (the one in force stays applied)"""
    refusal_waits: bool = False
    """the refusal lasts only until a kind's scope is known: Reconciling, not Failed"""
    outside: int = 0
    """objects of the revision in force that a changed tenant policy no longer allows"""
    unserved: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    hold: str = ""
    """why the bundle's writes wait ("" when they do not): suspended, or a dependency"""
    suspended: bool = False
    window: str = ""
    """the sync window that holds the writes ("" for none): OutOfSync until it ends"""
    deleting: bool = False
    """the revision is a deletion: Deleted once its prunes are done"""
    prune_held: str = ""
    """what the prune budget holds of the revision's deletions, and how to let it through
    ("" when it holds nothing): PruneHeld once the rest is applied"""


def bundle_phase(t: Tally) -> tuple[BundlePhase, str]:
    """The phase and its one-line explanation (see the module table)."""
    phase, message = _phase(t)
    if t.hold and phase in (BundlePhase.RECONCILING, BundlePhase.OUT_OF_SYNC):
        held = t.suspended or t.window
        phase = BundlePhase.OUT_OF_SYNC if held else BundlePhase.RECONCILING
        return phase, f"{t.hold}: {message}"
    if t.suspended and phase is BundlePhase.READY:
        return phase, f"{message} (suspended)"
    return phase, message


def _deletion_phase(t: Tally) -> tuple[BundlePhase, str]:
    if t.unserved:
        return BundlePhase.RECONCILING, "deleting: " + "; ".join(t.unserved)
    if t.prune_failed:
        return BundlePhase.FAILED, f"deleting: {t.prune_failed} prunes failed"
    if t.pruning:
        return BundlePhase.RECONCILING, f"deleting: {t.pruning} objects to prune"
    if t.kept or t.held:
        return BundlePhase.DELETED, f"deleted; {t.kept + t.held} objects kept (not pruned)"
    return BundlePhase.DELETED, "deleted; its objects are pruned"


def _declared(t: Tally) -> str:
    """``: 9 already declared by bundle team-a/web (publish with take-over to move them)``."""
    if not t.declared_by:
        return ""
    named = sorted(t.declared_by.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{n} already declared by bundle {b}" for b, n in named[:3])
    more = f" and by {len(named) - 3} other bundles" if len(named) > 3 else ""
    return f": {shown}{more} (publish with take-over to move them)"


def _phase(t: Tally) -> tuple[BundlePhase, str]:
    if t.deleting and not t.refused:
        return _deletion_phase(t)
    failed = t.failed + t.prune_failed
    if t.refused and not t.refusal_waits:
        return BundlePhase.FAILED, f"revision {t.revision} refused: {t.refused}"
    if t.outside:
        return (
            BundlePhase.FAILED,
            f"{t.outside} objects outside the tenant's limits since the policy changed "
            "(kept as they are: nothing is pruned for it)",
        )
    if failed:
        parts = [f"{t.failed} of {t.total} objects failed{_declared(t)}"] if t.failed else []
        # a failed hook stopped the revision: the one line says which, and how it ended
        hook = next((line for line in t.problems if ": hook failed" in line), "")
        if hook and parts:
            parts[0] += f": {hook}"
        if t.prune_failed:
            parts.append(f"{t.prune_failed} prunes failed")
        return BundlePhase.FAILED, ", ".join(parts)
    if t.conflicts:
        return (
            BundlePhase.CONFLICT,
            f"{t.conflicts} of {t.total} objects in conflict with another field manager",
        )
    if t.refused:  # it waits (for a kind's scope): after what the revision in force failed
        return BundlePhase.RECONCILING, f"revision {t.revision} waits: {t.refused}"
    if t.unhealthy and t.applied == t.total:
        return BundlePhase.DEGRADED, f"{t.unhealthy} objects unhealthy"
    if t.unserved:
        return BundlePhase.RECONCILING, "; ".join(t.unserved)
    progress = f"{t.applied}/{t.total} applied, {t.ready}/{t.total} ready"
    if t.in_flight or t.applied < t.total or t.unobserved:
        return BundlePhase.RECONCILING, progress
    if t.prune_held and not t.hold:
        return BundlePhase.PRUNE_HELD, t.prune_held
    if t.pruning:
        return BundlePhase.RECONCILING, f"{progress}, {t.pruning} to prune"
    if t.drifted or t.held:
        parts = [f"{t.drifted} objects drifted, not corrected"] if t.drifted else []
        if t.held:
            parts.append(f"{t.held} prunes held back (still in use)")
        return BundlePhase.OUT_OF_SYNC, ", ".join(parts)
    if t.unhealthy:
        return BundlePhase.DEGRADED, f"{t.unhealthy} objects unhealthy"
    if t.ready < t.total:
        return BundlePhase.RECONCILING, progress
    if n := t.not_declared:
        carry = (
            "other objects carry its label but are"
            if n > 1
            else "other object carries its label but is"
        )
        return BundlePhase.READY, (
            f"revision {t.revision} applied and ready; {n} {carry} not its own (never pruned)"
        )
    return BundlePhase.READY, f"revision {t.revision} applied and ready"


def counts(t: Tally) -> BundleCounts:
    return BundleCounts(
        total=t.total,
        applied=t.applied,
        failed=t.failed + t.prune_failed,
        ready=t.ready,
        conflicts=t.conflicts,
        drifted=t.drifted,
        pruning=t.pruning,
        kept=t.kept + t.held,
        not_declared=t.not_declared,
    )


def listed(t: Tally) -> list[str]:
    return t.problems[:MAX_LISTED]
