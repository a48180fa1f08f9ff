"""What a publish would do to one cluster, from the recorded state alone (pure): the planner's own
rule on the state its streams hold, no request to any API server.

Each object of the revision is taken in as the planner takes it (``revision.checked_object``:
keyed, normalised with the cluster's scopes, ignored fields out, owned) and decided by the
planner's rule (``decide.evaluate`` over the entry a planner starting now would rebuild from
APPLIED, SERVER and OUTCOMES: ``state.known``); the revision is held to its tenant's limits
(``limits.check``); objects the bundle holds that the revision no longer declares are prune
rows, kept where the planner would keep them. ``explain`` adds a server-side dry-run to the
rows that write (``--diff``); the fleet plan runs this once per cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from schemas.cli import PlanAction
from schemas.decision import DecisionAction
from schemas.messages import Bundle, KindScope
from schemas.subjects import ObjectKey
from schemas.tenants import TenantPolicy
from services.core.diff import Change
from services.core.ignore import pointers_of
from services.core.manifest import apply_order
from services.core.scope import Scopes
from services.core.sha import manifest_sha
from services.planner.rule import budget, limits, prune
from services.planner.rule.decide import Decision, Desired, Entry, evaluate, restore
from services.planner.rule.revision import BundleView, checked_object

Known = Mapping[ObjectKey, Entry]
"""Per object, the entry a planner starting now would rebuild from the facts (``state.known``)."""
PLANNED = b"\1" * 32
"""The manifest SHA a planned object is desired with (any SHA: only "desired" is read)."""


@dataclasses.dataclass
class PlanRow:
    key: ObjectKey
    action: PlanAction
    reason: str
    changes: list[Change] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)
    """Pointers of the fields neither applied nor compared (``--ignore``, the annotation)."""
    api_version: str = ""
    manifest: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    """The object as the planner would send it (an ``apply`` row's): what ``--diff`` dry-runs."""


def decide_republish(entry: Entry, bundle: str, manifest: dict[str, Any]) -> Decision | None:
    """What the planner decides when ``manifest`` is published (again) over ``entry``."""
    return decided(entry, bundle, manifest_sha(manifest))


def decided(entry: Entry, bundle: str, sha: bytes) -> Decision | None:
    """What the planner decides when the manifest of SHA ``sha`` is published over ``entry``."""
    return evaluate(restore(entry, Desired(bundle, "plan", sha)), republished=True)


@dataclasses.dataclass(frozen=True)
class Taken:
    """One object of a revision as the planner takes it in (``intake``)."""

    key: ObjectKey
    manifest: dict[str, Any]
    sha: bytes
    ignored: list[str]
    api_version: str


def intake(as_published: Bundle, manifests: Sequence[Any], scopes: Scopes) -> list[Taken]:
    """The revision's objects as the planner takes them in (``revision.checked_object``: keyed,
    normalised, ignored fields out, owned), with their manifest SHA. The same for every cluster
    with the same scopes and options: a fleet plan takes a revision in once, not per cluster.
    ManifestError naming the object the planner would refuse."""
    out: list[Taken] = []
    for i, raw in enumerate(manifests):
        key, manifest = checked_object(as_published, raw, scopes, f"manifests[{i}]")
        api_version = str(manifest.get("apiVersion", ""))
        out.append(Taken(key, manifest, manifest_sha(manifest), pointers_of(manifest), api_version))
    return out


def scopes_of(learned: Iterable[KindScope], manifests: Sequence[Any]) -> Scopes:
    """The scopes the cluster's planner keys with: built-in kinds, what its watcher's discovery
    reported (``MemberHeartbeat.scopes``), then the revision's own CRDs for kinds the cluster
    has not named (``Scopes.for_revision``: the cluster's word wins)."""
    scopes = Scopes()
    for sc in learned:
        scopes.learn(sc.group, sc.kind, sc.namespaced)
    return scopes.for_revision(manifests)


def rows(
    as_published: Bundle,
    manifests: Sequence[Any],
    known: Known,
    scopes: Scopes,
    policy: TenantPolicy,
    *,
    prune_removed: bool = True,
    taken: Sequence[Taken] | None = None,
) -> list[PlanRow]:
    """One row per object of ``manifests`` and per object the publish would prune, in apply
    order: ``apply`` rows carry the planner's reason (``new``, ``manifest``, ``drift``,
    ``deleted``, ``retry``) and the manifest; ``unchanged`` rows are hits. ``taken``: the
    revision already taken in with these scopes and options (``intake``). ManifestError (a
    ``PolicyRefused`` or ``UnknownScope`` among them) for what the planner would refuse."""
    bundle = as_published.bundle
    if taken is None:
        taken = intake(as_published, manifests, scopes)
    entries = known
    out: list[PlanRow] = []
    for t in taken:
        decision = decided(entries.get(t.key) or Entry(t.key), bundle, t.sha)
        if decision is None or decision.action is DecisionAction.HIT:
            out.append(PlanRow(t.key, "unchanged", "hit", [], t.ignored, t.api_version))
        else:
            reason = str(decision.reason)
            out.append(PlanRow(t.key, "apply", reason, [], t.ignored, t.api_version, t.manifest))
    desired = {t.key for t in taken}
    limits.check(as_published, desired, scopes, policy)
    out += pruned(bundle, desired, entries, prune_removed=prune_removed, revision=as_published)
    return sorted(out, key=lambda r: apply_order(r.key))


def pruned(
    bundle: str,
    desired: set[ObjectKey],
    entries: Mapping[ObjectKey, Entry],
    *,
    prune_removed: bool,
    revision: Bundle | None = None,
) -> list[PlanRow]:
    """The objects ``bundle`` holds on the cluster that ``desired`` leaves out: deleted, or kept
    where the planner keeps them (never applied by this bundle, the keep annotation, no prune,
    a Namespace or CRD that still holds what others want: ``prune.in_use``), and, for the
    ``revision`` being planned, deletions the prune budget would hold (``budget.verdict`` at
    its default thresholds: kept, reason ``prune-budget``, until approved). ``entries``:
    what the cluster's recorded facts say (``state.known``)."""
    wanted = [
        (("", key), _desired(entries.get(key), key, bundle) if key in desired else entry)
        for key, entry in entries.items()
    ] + [(("", key), _desired(None, key, bundle)) for key in desired - entries.keys()]
    out: list[PlanRow] = []
    deleting: list[ObjectKey] = []
    for key, entry in entries.items():
        if key in desired or entry.owner_bundle != bundle or not entry.live:
            continue
        v = entry.api_version
        if entry.applied_bundle != bundle:  # only the label says so: the planner never prunes it
            out.append(PlanRow(key, "keep", "not-declared", api_version=v))
        elif entry.keep:  # the live object opts out: the planner keeps it
            out.append(PlanRow(key, "keep", "annotation", api_version=v))
        elif not prune_removed:
            out.append(PlanRow(key, "keep", "prune-disabled", api_version=v))
        elif prune.in_use(key, wanted, pruning=bundle):
            out.append(PlanRow(key, "keep", "in-use", api_version=v))
        else:
            deleting.append(key)
            out.append(PlanRow(key, "delete", "prune", api_version=v))
    if revision is None or not deleting:
        return out
    view = BundleView.of(revision, 0)
    view.keys.update(desired)
    kept = sum(1 for e in entries.values() if budget.predates(e, view))
    held = budget.verdict(
        view, deleting, kept=kept, budget=budget.Budget(), cluster=revision.cluster
    )
    if held is None:
        return out
    return [
        PlanRow(r.key, "keep", "prune-budget", api_version=r.api_version)
        if r.action == "delete" and r.key in held.held
        else r
        for r in out
    ]


def _desired(entry: Entry | None, key: ObjectKey, bundle: str) -> Entry:
    """``key`` as the planned revision declares it: what a Namespace or CRD leaving must not
    take down with it."""
    entry = entry if entry is not None else Entry(key)
    return msgspec.structs.replace(entry, bundle=bundle, manifest_sha=PLANNED)
