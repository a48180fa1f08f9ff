"""A fleet plan for people and machines (pure): the typed document of ``plan -o json`` for a
fleet (``schemas/json/cli-plan-fleet.schema.json``), the table (a row per cluster, then a row
per object that would change), the Markdown of a pull-request comment (a row per cluster, each
cluster's changes folded), and the exit code of ``--exit-code``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from schemas.cli import FleetPlanCluster, FleetPlanCounts, FleetPlanDocument, PlanObject
from services.cli.plan.fleet import ClusterPlan, Targeting
from services.cli.plan.render import CHANGES, ERRORS, NO_CHANGES, cell, diff_details
from services.cli.plan.render import diff_line as diff_line
from services.cli.plan.render import object_name as object_name
from services.cli.plan.render import plan_object as plan_object
from services.cli.plan.verdict import PlanRow

KIND_OF_REASON = {
    "new": "new",
    "manifest": "changed",
    "retry": "changed",
    "drift": "drift",
    "deleted": "drift",
}
"""How the planner's reasons to apply are counted (``new``, ``changed``, ``drift``)."""
SUMMARY_COLUMNS = ["cluster", "step", "new", "changed", "drift", "prune", "unchanged", "note"]
OBJECT_COLUMNS = ["cluster", "action", "reason", "kind", "namespace", "name", "changes"]
MAX_MARKDOWN_CLUSTERS = 200
"""Clusters listed in a PR comment (a comment has a size limit; the counts cover them all)."""


def bucket(row: PlanRow) -> str:
    """Which count a row adds to: new, changed, drift, prune, unchanged, keep or error."""
    if row.action == "apply":
        return KIND_OF_REASON.get(row.reason.split(" ", 1)[0].rstrip(";"), "changed")
    return {"delete": "prune"}.get(row.action, row.action)


def counts(rows: Sequence[PlanRow]) -> FleetPlanCounts:
    c = Counter(bucket(r) for r in rows)
    return FleetPlanCounts(
        new=c["new"],
        changed=c["changed"],
        drift=c["drift"],
        prune=c["prune"],
        unchanged=c["unchanged"],
        keep=c["keep"],
        error=c["error"],
    )


def total(parts: Sequence[FleetPlanCounts]) -> FleetPlanCounts:
    fields = FleetPlanCounts.__struct_fields__
    return FleetPlanCounts(**{f: sum(getattr(p, f) for p in parts) for f in fields})


def writes(c: FleetPlanCounts) -> int:
    return c.new + c.changed + c.drift + c.prune


def cluster_entry(p: ClusterPlan) -> FleetPlanCluster:
    return FleetPlanCluster(
        cluster=p.cluster,
        labels=dict(p.labels),
        step=p.step,
        leaving=p.leaving,
        refused=p.refused,
        held=p.held,
        values=dict(p.values),
        summary=counts(p.rows),
        objects=[plan_object(r) for r in p.rows if r.action != "unchanged"],
    )


def document(
    plans: Sequence[ClusterPlan], t: Targeting, *, unregistered: Sequence[str], diff: bool
) -> FleetPlanDocument:
    entries = [cluster_entry(p) for p in plans]
    summary = total([e.summary for e in entries])
    return FleetPlanDocument(
        bundle=t.bundle,
        selector=t.selector,
        clusters_named=list(t.named),
        unregistered=list(unregistered),
        steps=list(t.steps),
        diff=diff,
        changes=writes(summary) > 0,
        errors=summary.error > 0 or any(e.refused for e in entries),
        summary=summary,
        clusters=entries,
    )


def exit_code(doc: FleetPlanDocument) -> int:
    """``--exit-code``: 1 when a cluster is refused, a cluster named with ``--cluster`` is not
    registered (a typo must not pass as "nothing to change") or the server refuses an object,
    else 2 when anything would be written on any cluster, else 0."""
    if doc.errors or doc.unregistered:
        return ERRORS
    return CHANGES if doc.changes else NO_CHANGES


def step_name(doc: FleetPlanDocument, e: FleetPlanCluster) -> str:
    if e.leaving:
        return "leaves"
    if e.step is None:
        return "-"
    return str(e.step) if doc.steps else ""


def note(e: FleetPlanCluster) -> str:
    """What holds a cluster back: refused, held by a window, leaving the fleet, kept objects."""
    parts = [f"refused: {e.refused}"] if e.refused else []
    if e.held:
        parts.append(f"held: {e.held}")
    if e.leaving:
        parts.append("leaves the fleet")
    if e.summary.keep:
        parts.append(f"{e.summary.keep} kept")
    if e.summary.error:
        parts.append(f"{e.summary.error} errors")
    return "; ".join(parts)


def summary_rows(doc: FleetPlanDocument) -> list[dict[str, Any]]:
    return [
        {
            "cluster": e.cluster,
            "step": step_name(doc, e),
            "new": e.summary.new,
            "changed": e.summary.changed,
            "drift": e.summary.drift,
            "prune": e.summary.prune,
            "unchanged": e.summary.unchanged,
            "note": note(e),
        }
        for e in doc.clusters
    ]


def object_rows(doc: FleetPlanDocument) -> list[dict[str, Any]]:
    """One row per object that would be written (or kept, or refused) on each cluster."""
    return [
        {
            "cluster": e.cluster,
            "action": o.action,
            "reason": o.reason,
            "kind": o.kind,
            "namespace": o.namespace,
            "name": o.name,
            "changes": len(o.changes) or "",
        }
        for e in doc.clusters
        for o in e.objects
    ]


def summary_line(doc: FleetPlanDocument) -> str:
    s = doc.summary
    touched = sum(1 for e in doc.clusters if writes(e.summary))
    parts = [
        f"{len(doc.clusters)} clusters, {touched} changing",
        f"{s.new} new",
        f"{s.changed} changed",
        f"{s.drift} drift restored",
        f"{s.prune} to prune",
        f"{s.unchanged} unchanged",
    ]
    refused = sum(1 for e in doc.clusters if e.refused)
    held = sum(1 for e in doc.clusters if e.held and writes(e.summary))
    if refused:
        parts.append(f"{refused} refused")
    if held:
        parts.append(f"{held} held by a sync window")
    if s.error:
        parts.append(f"{s.error} errors")
    return ", ".join(parts)


def _heading(doc: FleetPlanDocument) -> str:
    whom = []
    if doc.selector:
        whom.append(f"selector `{doc.selector}`")
    if doc.clusters_named:
        whom.append("clusters " + ", ".join(f"`{c}`" for c in doc.clusters_named))
    head = f"### driftbus plan: `{doc.bundle}` on a fleet of {len(doc.clusters)} clusters"
    return f"{head} ({'; '.join(whom)})" if whom else head


def markdown(doc: FleetPlanDocument) -> str:
    """The fleet plan as a pull-request comment: the totals, a row per cluster (its step and
    counts, what holds it), then each changing cluster's objects folded under ``<details>``."""
    lines = [_heading(doc), "", f"**{summary_line(doc)}**", ""]
    if doc.steps:
        steps = ", ".join(f"{i}. `{s}`" for i, s in enumerate(doc.steps, 1))
        lines += [f"Rollout steps: {steps}, {len(doc.steps) + 1}. the rest of the fleet.", ""]
    if not doc.diff:
        lines += [
            "_From the recorded state alone: no field-level diff (`--diff` dry-runs what would "
            "change; docs/plan.md says what only the server knows)._",
            "",
        ]
    for c in doc.unregistered:
        lines += [f"- cluster `{c}` is not registered: nothing is placed there until it is", ""]
    if not doc.clusters:
        lines.append("No registered cluster is in this fleet: nothing would be placed.")
        return "\n".join(lines) + "\n"
    lines += [
        "| cluster | step | new | changed | drift | prune | unchanged | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in summary_rows(doc)[:MAX_MARKDOWN_CLUSTERS]:
        cells = [cell(str(r[k])) for k in SUMMARY_COLUMNS]
        cells[0] = f"`{cells[0]}`"
        lines.append("| " + " | ".join(cells) + " |")
    if len(doc.clusters) > MAX_MARKDOWN_CLUSTERS:
        lines.append(f"\n… {len(doc.clusters) - MAX_MARKDOWN_CLUSTERS} more clusters")
    for e in doc.clusters[:MAX_MARKDOWN_CLUSTERS]:
        shown = [o for o in e.objects if o.action != "unchanged"]
        if shown:
            lines += ["", f"<details><summary>{e.cluster}: {len(shown)} objects</summary>", ""]
            if e.values:
                values = ", ".join(f"`{k}` = `{v}`" for k, v in e.values.items())
                lines += [f"values: {cell(values)}", ""]
            lines += [_object_line(o) for o in shown]
            lines += diff_details(shown, prefix=f"{e.cluster}: ")
            lines += ["", "</details>"]
    if not doc.changes:
        lines += ["", "No changes: every cluster already matches these manifests."]
    return "\n".join(lines) + "\n"


def _object_line(o: PlanObject) -> str:
    return f"- {o.action} {cell(object_name(o))} ({cell(o.reason)})"
