"""The plan of a fleet publish (pure): for every cluster the targeting names, what the rollout
driver would do with it and what that cluster's planner would then decide, from recorded state.

Each question has the answer the services give, by their own functions: the members
(``registry.members``: the selector and ``--cluster`` over the registry's labels), the clusters
the tenant may not use (``tenancy.clusters.cluster_refusal``, as the driver excludes them), the
rollout step each cluster falls in (``step_sets`` over the clusters the driver may reach), the
per-cluster values (``substitute``), the objects' verdicts (``verdict.rows``: the planner's
rule and the tenant's limits), and the sync window that holds a cluster's writes now
(``windows.verdict.block``). Clusters the bundle is placed in that the targeting no longer names
leave the fleet: with ``--on-leave prune`` their objects are prune rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

from schemas.fleet import ClusterRecord, OnLeave
from schemas.messages import Bundle, BundleOptions, KindScope
from schemas.tenants import TenantPolicy
from services.cli.plan.verdict import (
    Known,
    PlanRow,
    Taken,
    intake,
    pruned,
    rows,
    scopes_of,
)
from services.clusters.registry import members
from services.core.manifest import ManifestError
from services.fleet.rollout import substitute as subst
from services.fleet.rollout.steps import DEFAULT_LEAVE_BUDGET, step_sets
from services.planner.rule import limits
from services.tenancy.clusters import cluster_refusal
from services.tenancy.policy import tenant_of
from services.windows.spec import Window
from services.windows.verdict import block


@dataclasses.dataclass(frozen=True)
class Targeting:
    """What a fleet publish names and how it rolls out (the flags ``publish`` takes)."""

    bundle: str
    manifests: Sequence[Any]
    options: BundleOptions = dataclasses.field(default_factory=BundleOptions)
    selector: str = ""
    named: Sequence[str] = ()
    steps: Sequence[str] = ()
    substitute: bool = False
    on_leave: OnLeave = "prune"


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What the bus records, read once for the whole fleet (``state``, the registry, the
    tenant policy, the sync windows, the rollout in force)."""

    records: Mapping[str, ClusterRecord]
    known: Mapping[str, Known]
    scopes: Mapping[str, Sequence[KindScope]] = dataclasses.field(default_factory=dict)
    policy: TenantPolicy = dataclasses.field(default_factory=TenantPolicy)
    windows: Sequence[Window] = ()
    placed: Collection[str] = ()
    """Clusters the bundle's rollout holds now (those no longer named leave the fleet)."""


@dataclasses.dataclass
class ClusterPlan:
    cluster: str
    labels: dict[str, str]
    step: int | None
    """The rollout step it falls in (1-based; the implicit last step is ``len(steps) + 1``);
    None: not placed (refused by the tenant's clusters) or leaving the fleet."""
    rows: list[PlanRow] = dataclasses.field(default_factory=list)
    refused: str = ""
    """Why nothing would be placed or applied there ("" when it would)."""
    held: str = ""
    """What holds its writes now: a sync window, or, for a cluster leaving, the fleet's prune
    budget ("" when nothing does)."""
    values: dict[str, str] = dataclasses.field(default_factory=dict)
    """Each ``${cluster.…}`` variable of the manifests with its value there (``--substitute``)."""
    leaving: bool = False


def targets(t: Targeting, records: Mapping[str, ClusterRecord]) -> dict[str, dict[str, str]]:
    """The registered clusters the targeting names, with their labels (``registry.members``)."""
    return members(records, t.selector, t.named)


def leaving(t: Targeting, rec: Recorded) -> list[str]:
    """Clusters the bundle is placed in whose registry labels no longer put them in the fleet
    (a cluster the registry cannot say anything about keeps what it has: not one of them)."""
    fleet = targets(t, rec.records)
    return sorted(c for c in rec.placed if c in rec.records and c not in fleet)


def plan_fleet(t: Targeting, rec: Recorded, now: dt.datetime) -> list[ClusterPlan]:
    """One plan per cluster the targeting names and per cluster leaving the fleet, by name."""
    fleet = targets(t, rec.records)
    tenant = tenant_of(t.bundle)
    out: list[ClusterPlan] = []
    eligible: dict[str, dict[str, str]] = {}
    for cluster, labels in fleet.items():
        if why := cluster_refusal(rec.policy, tenant, cluster, labels):
            out.append(ClusterPlan(cluster, labels, None, refused=why))
        else:
            eligible[cluster] = labels
    sets = step_sets(t.steps, eligible)
    taken: dict[tuple[Any, ...], list[Taken]] = {}
    for cluster, labels in eligible.items():
        step = next(i for i, held in enumerate(sets, 1) if cluster in held)
        out.append(_member(t, rec, cluster, labels, step, now, taken))
    prune = t.options.prune and t.on_leave == "prune"
    going = leaving(t, rec)
    # the fleet's prune budget (its default thresholds; the planners' settings may differ)
    waits = prune and DEFAULT_LEAVE_BUDGET.exceeded(len(going), len(set(rec.placed)))
    for cluster in going:
        gone = pruned(t.bundle, set(), rec.known.get(cluster, {}), prune_removed=prune)
        labels = dict(rec.records[cluster].labels)
        plan = ClusterPlan(cluster, labels, None, gone, leaving=True)
        if waits:
            plan.rows = [
                PlanRow(r.key, "keep", "prune-budget", api_version=r.api_version)
                if r.action == "delete"
                else r
                for r in gone
            ]
            plan.held = (
                f"{len(going)} of the bundle's {len(set(rec.placed))} clusters leave at once: "
                f"its prune waits for driftbus approve {t.bundle}"
            )
        out.append(plan)
    return sorted(out, key=lambda p: p.cluster)


def _member(
    t: Targeting,
    rec: Recorded,
    cluster: str,
    labels: dict[str, str],
    step: int,
    now: dt.datetime,
    taken: dict[tuple[Any, ...], list[Taken]],
) -> ClusterPlan:
    """The plan of one member: its values, its objects' verdicts, the window holding it.
    ``taken``: the revision as taken in, per scopes and options, shared between the members
    (substituted manifests are each cluster's own: taken in for it alone)."""
    plan = ClusterPlan(cluster, labels, step)
    held = block(rec.windows, t.bundle, cluster, now, labels=labels)
    plan.held = held.message if held is not None else ""
    manifests = list(t.manifests)
    if t.substitute:
        plan.values = values(manifests, cluster, labels)
        if why := subst.refusal(manifests, cluster, labels):
            plan.refused = why
            return plan
        manifests = subst.substitute(manifests, cluster, labels)
    published = Bundle(cluster=cluster, bundle=t.bundle, revision="plan", options=t.options)
    try:
        as_published = limits.with_tenant_defaults(published, rec.policy, labels)
        learned = tuple(rec.scopes.get(cluster, ()))
        scopes = scopes_of(learned, manifests)
        same = (as_published.options.namespace, learned)
        mine = None if t.substitute else taken.get(same)
        if mine is None:
            mine = intake(as_published, manifests, scopes)
            if not t.substitute:
                taken[same] = mine
        plan.rows = rows(
            as_published,
            manifests,
            rec.known.get(cluster, {}),
            scopes,
            rec.policy,
            prune_removed=t.options.prune,
            taken=mine,
        )
    except ManifestError as exc:
        plan.refused = str(exc)
    return plan


def values(manifests: Sequence[Any], cluster: str, labels: Mapping[str, str]) -> dict[str, str]:
    """Each variable the manifests name with its value in ``cluster`` (a label it lacks: "")."""
    text = msgspec.json.encode(list(manifests)).decode()
    out: dict[str, str] = {}
    for m in re.finditer(subst.VARIABLE, text):
        key = m.group(2)
        out[m.group(0)] = cluster if key is None else labels.get(key, "")
    return dict(sorted(out.items()))
