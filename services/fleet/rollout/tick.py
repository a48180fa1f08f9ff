"""The rules of one rollout tick (pure): ``OpenTick`` holds a rollout's state while a tick
changes it, one method per rule of docs/fleet.md's state table — a placement's status is
observed, the rollout pauses or resumes, a step is gated (placed, baked, promoted,
timed out), the rollout halts or rolls back, a new member joins — and collects the placements
and transitions the tick asks for (a cluster leaving is ``leave``'s rule, a rollback's end
``rollback``'s). ``services.fleet.rollout.engine`` runs the rules in their order.

A cluster's status counts only when it is about the exact placement: the same revision **and**
the ``published_at`` the driver gave it (a Ready left over from an earlier placement of the same
revision says nothing about this one).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Literal

import msgspec

from schemas.fleet import ClusterRollout, RolloutPhase, RolloutState
from schemas.messages import BundlePhase
from services.clusters.selector import SelectorError
from services.fleet.rollout.steps import (
    FAILED_PHASES,
    Action,
    Event,
    Observed,
    Place,
    Remove,
    Tick,
    step_sets,
)


class OpenTick:
    """The state being changed in one tick, and what the tick asks for; ``done`` closes it
    into the ``Tick`` the driver carries out."""

    def __init__(
        self, state: RolloutState, now: dt.datetime, excluded: frozenset[str] = frozenset()
    ) -> None:
        self.state = state
        self.now = now
        self.excluded = excluded
        """Clusters the tenant may no longer use: what is there stays (a policy change never
        prunes), nothing new is placed."""
        self.actions: list[Action] = []
        self.events: list[Event] = []

    def note(self, event: Event) -> None:
        """Record a transition with the phase it leaves the rollout in."""
        if event.phase is None:
            event = dataclasses.replace(event, phase=self.state.phase)
        self.events.append(event)

    def done(self) -> Tick:
        s = self.state
        if self.actions or self.events:
            s = msgspec.structs.replace(s, updated_at=self.now)
        return Tick(s, tuple(self.actions), tuple(self.events))

    # --- the changes ---------------------------------------------------------------------------

    def _set(self, cluster: str, entry: ClusterRollout | None) -> None:
        clusters = dict(self.state.clusters)
        if entry is None:
            clusters.pop(cluster, None)
        else:
            clusters[cluster] = entry
        self.state = msgspec.structs.replace(self.state, clusters=clusters)

    def place(self, cluster: str, which: Literal["target", "previous"], step: int) -> None:
        placement = self.state.target if which == "target" else self.state.previous
        assert placement is not None
        seq = self.state.placements
        self.state = msgspec.structs.replace(self.state, placements=seq + 1)
        self._set(
            cluster,
            ClusterRollout(revision=placement.revision, step=step, at=self.now, seq=seq),
        )
        self.actions.append(Place(cluster, which, seq, self.now))

    def remove(self, cluster: str, *, orphan: bool) -> None:
        seq = self.state.placements
        old = self.state.clusters[cluster]
        self.state = msgspec.structs.replace(self.state, placements=seq + 1)
        self._set(
            cluster,
            ClusterRollout(
                revision=old.revision,
                state="removed",
                step=old.step,
                at=self.now,
                seq=seq,
                message="orphaned" if orphan else "pruned",
            ),
        )
        self.actions.append(Remove(cluster, orphan, seq, self.now))

    # --- the rules -----------------------------------------------------------------------------

    def observe(self, observed: Mapping[str, Observed]) -> None:
        """Each placement's status: ready, failed, or (back to) on its way."""
        for cluster, entry in sorted(self.state.clusters.items()):
            if entry.state in ("refused", "removed"):
                continue
            seen = observed.get(cluster)
            if seen is None:
                continue
            message, window = seen.message, ""
            if not _about(seen, entry):
                if not _after(seen, entry):
                    continue  # a status of an earlier placement: says nothing of this one
                # published after the placement, outside the rollout (a driftbus rollback or
                # delete of that cluster): this placement is no longer what is there
                new, message = "assigned", f"replaced outside the rollout: {seen.revision}"
            elif seen.phase in FAILED_PHASES or seen.forbidden:
                new = "failed"
            elif seen.phase is BundlePhase.READY:
                new = "ready"
            else:
                new, window = "assigned", seen.window
            if (new, message, window) != (entry.state, entry.message, entry.window):
                self._set(
                    cluster,
                    msgspec.structs.replace(entry, state=new, message=message, window=window),
                )

    def pause_or_resume(self) -> None:
        s = self.state
        if s.paused and s.phase is RolloutPhase.PROGRESSING:
            self.state = msgspec.structs.replace(s, phase=RolloutPhase.PAUSED)
            self.note(Event("paused", (), f"at step {s.step + 1}"))
        elif not s.paused and s.phase is RolloutPhase.PAUSED:
            # the step's time starts again: a pause does not eat into the step timeout
            self.state = msgspec.structs.replace(
                s, phase=RolloutPhase.PROGRESSING, step_started_at=self.now, ready_since=None
            )
            self.note(Event("resumed", (), f"at step {s.step + 1}"))

    def gate(self, members: Mapping[str, Mapping[str, str]], refusals: Mapping[str, str]) -> None:
        """Halt on a failure or a timeout; else place the target within the step, and move to
        the next step once every cluster of this one is Ready on it for the bake."""
        s = self.state
        try:
            sets = step_sets(s.spec.steps, members)
        except SelectorError as exc:
            self.halt((), f"a rollout step is not a selector: {exc}")
            return
        last = s.step >= len(sets) - 1
        if last:
            held = sets[-1]  # the whole fleet, as it is now
        elif s.held_step == s.step:
            held = set(s.held) & set(members)  # chosen when the step started
        else:
            held = sets[s.step]  # a step's clusters are chosen once: a growing fleet does
            self.state = msgspec.structs.replace(  # not shift a percentage onto others
                self.state, held=sorted(held), held_step=s.step
            )
            s = self.state
        on_target = {c: e for c, e in s.clusters.items() if c in held and _on_target(s, e)}
        # any cluster on the target that failed halts, in this step or not
        bad = sorted(
            c
            for c, e in s.clusters.items()
            if _on_target(s, e) and e.state in ("failed", "refused")
        )
        if bad:
            self.halt(tuple(bad), "; ".join(f"{c}: {s.clusters[c].message}" for c in bad))
            return
        waiting = sorted(c for c in held if c not in on_target or on_target[c].state != "ready")
        windowed = self.windows(on_target, waiting)
        s = self.state  # a window that ended started the step's time again
        timeout = (
            s.phase is RolloutPhase.PROGRESSING
            and s.step_started_at is not None
            and ((self.now - s.step_started_at).total_seconds() > s.spec.step_timeout)
        )
        late = [c for c in waiting if c not in windowed]  # a held cluster is not late
        if timeout and late:
            self.halt(
                tuple(late),
                f"step {s.step + 1} not Ready within {s.spec.step_timeout:g}s: " + ", ".join(late),
            )
            return
        if s.phase is RolloutPhase.PAUSED:
            return
        # place the target on the step's clusters not on it, at most max_unavailable on
        # their way at once
        on_way = sum(1 for e in on_target.values() if e.state == "assigned")
        budget = s.spec.max_unavailable - on_way if s.spec.max_unavailable else len(held)
        for cluster in sorted(c for c in held if c not in on_target):
            if budget <= 0:
                break
            if cluster in refusals:
                self._refuse(cluster, s.step, refusals[cluster])
                continue
            self.place(cluster, "target", s.step)
            budget -= 1
        if any(c in refusals for c in held if c not in on_target):
            return  # halted next tick, naming the refused clusters
        if waiting:
            if s.ready_since is not None:
                self.state = msgspec.structs.replace(self.state, ready_since=None)
            return
        if last:
            self.state = msgspec.structs.replace(
                self.state, phase=RolloutPhase.COMPLETE, ready_since=None, promote=False
            )
            self.note(Event("complete", tuple(sorted(held)), f"{len(held)} clusters Ready"))
            return
        if s.ready_since is None:
            self.state = msgspec.structs.replace(self.state, ready_since=self.now)
            baked = s.spec.bake <= 0
        else:
            baked = (self.now - s.ready_since).total_seconds() >= s.spec.bake
        if not (baked or s.promote):
            return
        nxt = s.step + 1
        self.state = msgspec.structs.replace(
            self.state, step=nxt, step_started_at=self.now, ready_since=None, promote=False
        )
        how = "promoted" if s.promote and not baked else f"baked {s.spec.bake:g}s"
        newly = sorted(sets[nxt] - held)
        self.note(Event("step", tuple(newly), f"step {s.step + 1} {how}; step {nxt + 1} starts"))
        self.gate(members, refusals)  # place the next step's clusters in this tick

    def windows(
        self, on_target: Mapping[str, ClusterRollout], waiting: list[str]
    ) -> frozenset[str]:
        """The clusters of the step (or of a rollback), not Ready yet, whose writes sync windows
        hold. The step's (the rollback's) time stops for them while they do — a change freeze
        is not a failed step, and halting (or rolling back, which the window would hold too) is
        not what it asks for — and starts again when the last of them ends; the step's other
        clusters still time out. Said once each way."""
        s = self.state
        held = [(c, on_target[c].window) for c in waiting if c in on_target and on_target[c].window]
        said = ", ".join(f'"{w}" in {c}' for c, w in held)
        if said == s.window_hold:
            return frozenset(c for c, _ in held)
        back = s.phase is RolloutPhase.ROLLING_BACK  # the rollback's time, not the step's
        what = f"rollback to {s.previous.revision}" if back and s.previous else f"step {s.step + 1}"
        if held:
            self.state = msgspec.structs.replace(s, window_hold=said)
            self.note(
                Event(
                    "window",
                    tuple(c for c, _ in held),
                    f"{what}: sync windows hold its writes ({said}); its time stops until they end",
                )
            )
        else:
            clock = "rollback_started_at" if back else "step_started_at"
            self.state = msgspec.structs.replace(s, window_hold="", **{clock: self.now})
            self.note(Event("window-ended", (), f"{what}: its time starts again"))
        return frozenset(c for c, _ in held)

    def _refuse(self, cluster: str, step: int, why: str) -> None:
        self._set(
            cluster,
            ClusterRollout(
                revision=self.state.target.revision,
                state="refused",
                step=step,
                at=self.now,
                message=why,
                seq=self.state.placements,  # of this rollout (no placement is made)
            ),
        )
        self.note(Event("refused", (cluster,), why))

    def halt(self, clusters: tuple[str, ...], why: str) -> None:
        s = self.state
        self.state = msgspec.structs.replace(
            s, phase=RolloutPhase.HALTED, message=why, window_hold=""
        )
        self.note(Event("halted", clusters, f"step {s.step + 1}: {why}"))
        if s.spec.on_failure != "rollback":
            return
        if s.previous is None:
            self.note(Event("rollback-impossible", (), "no earlier revision to roll back to"))
            return
        back: list[str] = []
        for cluster in sorted(c for c, e in s.clusters.items() if _on_target(s, e)):
            if s.clusters[cluster].state == "refused":
                self._set(cluster, None)  # never placed: nothing to take back
                continue
            self.place(cluster, "previous", -1)
            back.append(cluster)
        prev = s.previous.revision
        if not back:
            self.state = msgspec.structs.replace(self.state, phase=RolloutPhase.ROLLED_BACK)
            self.note(Event("rolled-back", (), f"no cluster was on the revision: {prev} stays"))
            return
        # not an end yet: RolledBack once the previous revision is Ready again on each of them
        # (services.fleet.rollout.rollback)
        self.state = msgspec.structs.replace(
            self.state,
            phase=RolloutPhase.ROLLING_BACK,
            rollback=back,
            rollback_started_at=self.now,
        )
        self.note(
            Event("rolling-back", tuple(back), f"revision {prev} placed back; waiting for Ready")
        )

    def join(self, members: Mapping[str, Mapping[str, str]], refusals: Mapping[str, str]) -> None:
        """Members with nothing placed get the revision in force: the target once the rollout
        is complete, else the previous revision (they get the target at their step)."""
        s = self.state
        new = sorted(c for c in members if c not in s.clusters or s.clusters[c].state == "removed")
        if not new:
            return
        joined: list[str] = []
        for cluster in new:
            if s.phase is RolloutPhase.COMPLETE:
                if cluster in refusals:
                    self._refuse(cluster, -1, refusals[cluster])
                    continue
                self.place(cluster, "target", -1)
            elif s.previous is not None:
                self.place(cluster, "previous", -1)
            else:
                continue
            joined.append(cluster)
        if joined:
            self.note(Event("joined", tuple(joined), "joined the fleet"))


def _on_target(state: RolloutState, entry: ClusterRollout) -> bool:
    """Whether the cluster's placement is one of this rollout's, of its target."""
    return (
        entry.revision == state.target.revision
        and entry.seq >= state.first_seq
        and entry.state != "removed"
    )


def _after(seen: Observed, entry: ClusterRollout) -> bool:
    """Whether a status is of a revision published after the placement."""
    if seen.published_at is None or entry.at is None:
        return False
    return (seen.published_at - entry.at).total_seconds() >= 0.001


def _about(seen: Observed, entry: ClusterRollout) -> bool:
    """Whether a status is about this very placement (revision and publication time)."""
    if seen.revision != entry.revision:
        return False
    if seen.published_at is None or entry.at is None:
        return False
    return abs((seen.published_at - entry.at).total_seconds()) < 0.001
