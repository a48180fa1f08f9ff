"""Which revision of a bundle the planner took an object in: the only revision whose manifest
of that object the status page explains, and the only way an object is read from the cluster.

The page reads live objects with its own kubeconfig (the admin's under ``driftbus up``), and
a bundle's latest message may be a revision the planner refused — one that names another
tenant's object. So the page believes the planner's and the appliers' own records about the
object, never the publisher's message alone:

- a decision of the bundle about it (``apply``, ``hit``, ``hold``: it was desired in that
  revision; ``delete``, ``keep``: that revision left it out);
- the applier's last applied fact and last outcome for it, when they are the bundle's (a
  deletion, or an outcome of one, says the revision left it out).

On a locked-down bus only the planner and the appliers write those streams
(docs/security.md). The newest revision on the bus that a record names is the one in force for
the object; no record, nothing is read. Pure: ``detail`` reads the records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from schemas.decision import DecisionAction, DecisionRecord
from schemas.messages import AppliedEvent, Bundle, OutcomeEvent

DESIRED = frozenset((DecisionAction.APPLY, DecisionAction.HIT, DecisionAction.HOLD))
"""Decisions about an object the revision declares (a ``delete``/``keep`` is about one it left
out)."""
NO_MANIFEST = "0" * 64
"""An outcome's manifest SHA when the intent was a delete."""


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the planner's and appliers' records say of one object in one bundle."""

    desired: frozenset[str] = frozenset()
    """Revisions of the bundle the planner took the object in."""
    named: frozenset[str] = frozenset()
    """Every revision of the bundle a record about the object names (desired or left out)."""


def evidence(
    bundle: str,
    decisions: Iterable[DecisionRecord],
    applied: AppliedEvent | None = None,
    outcome: OutcomeEvent | None = None,
) -> Evidence:
    """What the records of one object say about ``bundle`` (another bundle's say nothing)."""
    desired: set[str] = set()
    named: set[str] = set()
    for d in decisions:
        if d.bundle == bundle:
            named.add(d.revision)
            if d.action in DESIRED:
                desired.add(d.revision)
    if applied is not None and applied.bundle == bundle:
        named.add(applied.revision)
        if not applied.deleted:
            desired.add(applied.revision)
    if outcome is not None and outcome.bundle == bundle:
        named.add(outcome.revision)
        if outcome.manifest_sha != NO_MANIFEST:
            desired.add(outcome.revision)
    return Evidence(frozenset(desired), frozenset(named))


@dataclasses.dataclass(frozen=True)
class InForce:
    """The revision to explain the object from (None: none), or why there is none."""

    revision: Bundle | None
    why_not: str = ""


def in_force(revisions: Sequence[Bundle], ev: Evidence, obj: str) -> InForce:
    """The newest of the bundle's ``revisions`` on the bus (oldest first) that a record about
    ``obj`` names: explained from it when the planner took the object in it; else why not."""
    for b in reversed(revisions):
        if b.revision not in ev.named:
            continue
        if b.revision in ev.desired:
            return InForce(b)
        return InForce(None, f"{obj} is not in revision {b.revision}, the one in force")
    return InForce(
        None,
        f"the planner accepted {obj} in no revision of this bundle on the bus: "
        "it is not read from the cluster",
    )


__all__ = ["Evidence", "InForce", "evidence", "in_force"]
