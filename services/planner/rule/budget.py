"""The prune budget: how much one revision may delete of a bundle on a cluster at once (pure).

A revision that drops most of a bundle is far more often a wrong path, a bad render or a
half-finished refactoring than a wish, and a Namespace or CRD deletion takes everything inside
down with it. So a revision whose deletions on a cluster are

* more than ``share`` (half) of the bundle's objects there, when they are more than
  ``at_least`` (5) objects, or
* any Namespace or CustomResourceDefinition,

is held: everything else in it is applied, its deletions wait, the bundle is ``PruneHeld``
naming them. The revision's own ``allow_prune`` (``publish --allow-prune``, or ``driftbus
approve``, which republishes the held revision with it) lets them through; so does a later
revision that declares the objects again (nothing is then deleted). Deleting the whole bundle
(``driftbus delete``, or an empty revision published with ``--allow-empty``) is an explicit
request: never held.

The bundle's objects on the cluster are those it would delete plus those it keeps that predate
the revision: live and last applied for the bundle under another revision
(``Entry.applied_revision``, from the APPLIED facts, so a restart counts the same). The
revision's new objects never count: a revision that renames every object (a bad render) drops
12 of 12, not 12 of 24, and stays held while its new objects are applied. An object re-applied
for the revision leaves the count, which only ever makes the verdict stricter; the shell keeps a
verdict that let deletions go for the deletions it weighed (``gates.prune_allowed``), so a
revision whose changed objects land before its deletions does not turn held half-way.
``verdict`` is the rule; the planner's shell gathers the deletions and holds those it names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from schemas.subjects import ObjectKey
from services.planner.rule.decide import Entry
from services.planner.rule.revision import BundleView

CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")
NAMESPACE = ("", "Namespace")
KINDS = (NAMESPACE, CRD)
"""Kinds whose deletion is always held: everything inside goes down with them."""
NAMED = 3
"""Objects named in the message (the rest are counted)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """The thresholds (planner settings ``prune_budget_share``, ``prune_budget_min``)."""

    share: float = 0.5
    """A revision may delete at most this share of the bundle's objects on a cluster at once."""
    at_least: int = 5
    """…unless it deletes no more than this many objects."""


@dataclasses.dataclass(frozen=True, slots=True)
class PruneHeld:
    """A revision's deletions on one cluster, held by the budget."""

    cluster: str
    bundle: str
    revision: str
    keys: tuple[ObjectKey, ...]
    """What would be deleted (a Namespace or CRD that holds it first, then by key)."""
    total: int
    """The bundle's objects on the cluster (the revision's plus these)."""
    why: str
    """``10 of 12 objects`` or ``a Namespace``: what the budget refused."""
    held: frozenset[ObjectKey] = frozenset()
    """``keys`` as a set: asked once per object folded."""

    @property
    def message(self) -> str:
        """One line for the bundle's status: what waits, and how to let it through."""
        named = ", ".join(str(k) for k in self.keys[:NAMED])
        more = f" and {len(self.keys) - NAMED} more" if len(self.keys) > NAMED else ""
        return (
            f"prune held: revision {self.revision} would delete {self.why} ({named}{more}); "
            f"to let it through: driftbus approve {self.bundle} --cluster {self.cluster}, "
            "or publish with --allow-prune"
        )


def leaving(entry: Entry, view: BundleView) -> bool:
    """Whether ``entry`` is one of ``view``'s deletions-to-be on its cluster: in the bundle's
    inventory (driftbus applied it for it), live, still carrying its label, declared by no
    bundle's revision but (perhaps, not yet released) the previous one of this bundle, and not
    opting out of prune. An apply on its way does not take it out: the count must not change
    while intents come and go."""
    return (
        entry.owner_bundle == view.name
        and entry.applied_bundle == view.name
        and entry.live
        and not entry.keep
        and entry.key not in view.keys
        and entry.bundle in ("", view.name)
    )


def predates(entry: Entry, view: BundleView) -> bool:
    """Whether ``entry`` is one of the bundle's objects ``view`` keeps from before it: declared
    by it, live, and last applied for the bundle under another revision."""
    return (
        entry.key in view.keys
        and entry.live
        and entry.applied_bundle == view.name
        and entry.applied_revision != view.revision
    )


def verdict(
    view: BundleView,
    deleting: Sequence[ObjectKey],
    *,
    kept: int,
    budget: Budget,
    cluster: str,
) -> PruneHeld | None:
    """Whether ``view``'s deletions on ``cluster`` (``deleting``: what ``leaving`` names, less
    what is kept because others' objects are inside) are held, or None when they go.
    ``kept``: how many of the bundle's objects there the revision keeps (``predates``)."""
    if not deleting or not view.prune or view.deleting or view.allow_prune:
        return None
    keys = tuple(sorted(deleting))
    total = kept + len(keys)
    kinds = [k for k in keys if (k.group, k.kind) in KINDS]
    why = ""
    if len(keys) > budget.at_least and len(keys) > budget.share * total:
        why = f"{len(keys)} of its {total} objects"
    elif kinds:
        what = "a Namespace" if (kinds[0].group, kinds[0].kind) == NAMESPACE else "a CRD"
        why = f"{what} ({kinds[0]}, with everything in it)"
        keys = tuple(kinds) + tuple(k for k in keys if k not in kinds)
    if not why:
        return None
    return PruneHeld(cluster, view.name, view.revision, keys, total, why, frozenset(keys))
