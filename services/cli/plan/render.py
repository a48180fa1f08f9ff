"""A plan for machines and for pull requests (pure): the typed document of ``plan -o json``
(``schemas/json/cli-plan.schema.json``), its Markdown rendering for a PR comment, and the
exit code of ``plan --exit-code`` (0 nothing to do, 2 changes, 1 errors) for CI to gate on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from schemas.cli import PlanChange, PlanDocument, PlanObject, PlanSummary
from services.cli.plan.verdict import PlanRow
from services.core.diff import Change

NO_CHANGES, ERRORS, CHANGES = 0, 1, 2
WRITES = ("apply", "delete")
MAX_MARKDOWN_CHANGES = 50
"""Changed fields shown per object in Markdown (a PR comment has a size limit)."""


def _change(c: Change) -> PlanChange:
    if c.added:
        return PlanChange(op="add", path=c.path, new=c.new)
    if c.removed:
        return PlanChange(op="remove", path=c.path, old=c.old)
    return PlanChange(op="change", path=c.path, old=c.old, new=c.new)


def document(rows: list[PlanRow], *, cluster: str, bundle: str, force: bool) -> PlanDocument:
    counts: Counter[str] = Counter(r.action for r in rows)
    return PlanDocument(
        cluster=cluster,
        bundle=bundle,
        changes=any(counts[a] for a in WRITES),
        errors=bool(counts["error"]),
        force=force,
        summary=PlanSummary(
            apply=counts["apply"],
            delete=counts["delete"],
            keep=counts["keep"],
            unchanged=counts["unchanged"],
            error=counts["error"],
        ),
        objects=[plan_object(r) for r in rows],
    )


def plan_object(r: PlanRow) -> PlanObject:
    return PlanObject(
        api_version=r.api_version,
        group=r.key.group,
        kind=r.key.kind,
        namespace=r.key.namespace,
        name=r.key.name,
        action=r.action,
        reason=r.reason,
        changes=[_change(c) for c in r.changes],
        ignored=list(r.ignored),
    )


def exit_code(doc: PlanDocument) -> int:
    """``--exit-code``: 1 when the server refuses an object, else 2 when anything would be
    written, else 0 (``terraform plan -detailed-exitcode``'s convention)."""
    if doc.errors:
        return ERRORS
    return CHANGES if doc.changes else NO_CHANGES


def summary_line(doc: PlanDocument) -> str:
    s = doc.summary
    parts = [f"{s.apply} to apply", f"{s.delete} to delete", f"{s.keep} kept"]
    parts += [f"{s.unchanged} unchanged", f"{s.error} errors"]
    return ", ".join(parts)


def object_name(o: PlanObject) -> str:
    where = f"{o.namespace}/{o.name}" if o.namespace else o.name
    return f"{o.kind} {where}"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(v: Any) -> str:
    """One line, never closing the diff fence: newlines shown as ``\\n``, backtick runs broken."""
    text = v if isinstance(v, str) else repr(v)
    text = text.replace("\n", "\\n").replace("```", "`\u200b``")
    return text if len(text) <= 120 else text[:119] + "…"


def diff_line(c: PlanChange) -> str:
    if c.op == "add":
        return f"+ {c.path}: {_value(c.new)}"
    if c.op == "remove":
        return f"- {c.path}: {_value(c.old)}"
    return f"! {c.path}: {_value(c.old)} → {_value(c.new)}"


NO_DIFF_NOTE = (
    "From the recorded state alone: no field-level diff (`--diff` dry-runs what would change; "
    "docs/plan.md says what only the server knows)."
)


def markdown(doc: PlanDocument, *, diffed: bool = True) -> str:
    """The plan as a pull-request comment: a summary, a table of what changes, and each
    object's changed fields folded under ``<details>``. Unchanged objects are counted only.
    ``diffed``: the fields come from a dry-run; else the comment says it has none."""
    head = f"### driftbus plan: `{doc.bundle}` on cluster `{doc.cluster}`"
    if doc.force:
        head += " (with `--force`)"
    lines = [head, "", f"**{summary_line(doc)}**", ""]
    if not diffed:
        lines += [f"_{NO_DIFF_NOTE}_", ""]
    shown = [o for o in doc.objects if o.action != "unchanged"]
    if not shown:
        lines.append("No changes: the cluster already matches these manifests.")
        return "\n".join(lines) + "\n"
    lines += ["| action | object | reason | fields |", "|---|---|---|---|"]
    for o in shown:
        fields = str(len(o.changes)) if o.changes else ""
        lines.append(f"| {o.action} | {cell(object_name(o))} | {cell(o.reason)} | {fields} |")
    lines += diff_details(shown)
    return "\n".join(lines) + "\n"


def diff_details(shown: list[PlanObject], prefix: str = "") -> list[str]:
    """Each object's changed fields folded under ``<details>`` (a ``diff`` block)."""
    lines: list[str] = []
    for o in shown:
        if not o.changes:
            continue
        lines += ["", f"<details><summary>{prefix}{object_name(o)}</summary>", "", "```diff"]
        lines += [diff_line(c) for c in o.changes[:MAX_MARKDOWN_CHANGES]]
        if len(o.changes) > MAX_MARKDOWN_CHANGES:
            lines.append(f"# … {len(o.changes) - MAX_MARKDOWN_CHANGES} more")
        lines += ["```", "", "</details>"]
    return lines
