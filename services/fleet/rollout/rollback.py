"""The rollback rule (pure): a rollout that halted with ``on_failure: rollback`` has put the
previous revision back on the clusters that were on its target (``OpenTick.halt``); it is
``RollingBack`` — no end — until this rule has seen that revision Ready again on each of them.

* every cluster it went back to is Ready on *that* placement (the revision and the
  ``published_at`` the rollback gave it, as the gate reads a step): ``RolledBack``;
* one of them reports the placement Failed, Degraded or Conflict, or objects of it refused
  (403): ``RollbackFailed`` at once, naming them and why;
* the step timeout passes, counted from the rollback's placements, with some of them not Ready:
  ``RollbackFailed``, naming those. A cluster whose writes a sync window holds is not late:
  the rollback's time stops for it, as a step's does, and starts again when the window ends.

Both ends keep the halt's reason in the state's message; ``RollbackFailed`` adds the clusters
that did not come back. Nothing is placed or removed here: what went back stays where it is.
"""

from __future__ import annotations

import msgspec

from schemas.fleet import ClusterRollout, RolloutPhase
from services.fleet.rollout.steps import Event
from services.fleet.rollout.tick import OpenTick


def settle(t: OpenTick) -> None:
    """End a rollback once its clusters are Ready again on the previous revision, or failed."""
    s = t.state
    if s.phase is not RolloutPhase.ROLLING_BACK or s.previous is None:
        return
    prev = s.previous.revision
    back = {c: e for c in s.rollback if (e := _back(s.clusters.get(c), prev)) is not None}
    failed = sorted(c for c, e in back.items() if e.state == "failed")
    if failed:
        why = "; ".join(f"{c}: {back[c].message or 'failed'}" for c in failed)
        _fail(t, tuple(failed), f"{prev} failed in {', '.join(failed)} ({why})")
        return
    waiting = sorted(c for c in s.rollback if c not in back or back[c].state != "ready")
    if not waiting:
        t.state = msgspec.structs.replace(s, phase=RolloutPhase.ROLLED_BACK, window_hold="")
        n = len(s.rollback)
        t.note(
            Event(
                "rolled-back",
                tuple(s.rollback),
                f"back on revision {prev}: Ready again on {n} cluster{'s' if n > 1 else ''}",
            )
        )
        return
    windowed = t.windows(back, waiting)
    s = t.state  # a window that ended started the rollback's time again
    started = s.rollback_started_at
    late = [c for c in waiting if c not in windowed]
    if started is None or not late:
        return
    timeout = s.spec.step_timeout
    if (t.now - started).total_seconds() > timeout:
        _fail(t, tuple(late), f"{prev} not Ready again within {timeout:g}s in {', '.join(late)}")


def _back(entry: ClusterRollout | None, prev: str) -> ClusterRollout | None:
    """The cluster's entry while it holds the rollback's placement of ``prev``."""
    if entry is None or entry.revision != prev or entry.state in ("removed", "refused"):
        return None
    return entry


def _fail(t: OpenTick, clusters: tuple[str, ...], what: str) -> None:
    s = t.state
    why = f"rollback failed: {what}"
    message = f"{s.message}; {why}" if s.message else why
    t.state = msgspec.structs.replace(
        s, phase=RolloutPhase.ROLLBACK_FAILED, message=message, window_hold=""
    )
    t.note(Event("rollback-failed", clusters, why))
