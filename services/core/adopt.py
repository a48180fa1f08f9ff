"""Adopting objects made by kubectl: their fields become driftbus's, so that a field the manifest
leaves out is really removed (issue 15).

An object created by ``kubectl apply`` (client-side), ``kubectl create`` or server-side
``kubectl apply`` keeps those managers in ``managedFields`` after driftbus first applies it.
Every field they set stays theirs: one that the manifest does not declare is never removed by
server-side apply, and one the manifest changes conflicts. As Flux does
(fluxcd/pkg ``ssa.PatchReplaceFieldsManagers``), their entries are folded into driftbus's own
Apply entry by a JSON patch, and the ``kubectl.kubernetes.io/last-applied-configuration``
annotation is dropped; the applier then applies again and the server removes what the manifest
does not have.

Only the managers of the tools that *create* objects are adopted. Later edits by
``kubectl edit``/``label``/``patch`` or by controllers stay theirs: an edit of a field driftbus
owns is drift (docs/drift.md), anything else is left alone.

Pure: the patch is computed here, sent by the applier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from services.core.manifest import FIELD_MANAGER
from services.core.owned import union

ADOPTED_MANAGERS: Final = frozenset(
    {
        ("kubectl-client-side-apply", "Update"),  # kubectl apply (client-side)
        ("before-first-apply", "Update"),  # the server's name for what predates the first apply
        ("kubectl-create", "Update"),  # kubectl create
        ("kubectl", "Update"),  # kubectl create/apply before 1.22 named itself so
        ("kubectl", "Apply"),  # kubectl apply --server-side
    }
)
LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"


def adoption_patch(live: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch that gives driftbus the fields of the adopted managers and drops the
    last-applied annotation (unless the manifest itself sets it), guarded by the live
    resourceVersion; empty when there is nothing to adopt."""
    meta = live.get("metadata") or {}
    entries = meta.get("managedFields") or []
    adopted = [e for e in entries if _adopted(e)]
    annotations = meta.get("annotations") or {}
    wanted = ((manifest.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED)
    drop_annotation = LAST_APPLIED in annotations and wanted is None
    if not adopted and not drop_annotation:
        return []
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")}
    ]
    if adopted:
        ops.append({"op": "replace", "path": "/metadata/managedFields", "value": _folded(entries)})
    if drop_annotation:
        ops.append({"op": "remove", "path": "/metadata/annotations/" + _escaped(LAST_APPLIED)})
    return ops


def _adopted(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and (entry.get("manager"), entry.get("operation")) in ADOPTED_MANAGERS
        and not entry.get("subresource")
    )


def _folded(entries: list[Any]) -> list[Any]:
    """The entries with every adopted one merged into driftbus's Apply entry (made when
    missing, at the API version of the first adopted entry)."""
    adopted = [e for e in entries if _adopted(e)]
    kept = [e for e in entries if not _adopted(e)]
    own = next((i for i, e in enumerate(kept) if _ours(e)), None)
    base = kept[own] if own is not None else {k: adopted[0].get(k) for k in ("apiVersion", "time")}
    fields = base.get("fieldsV1") or {}
    for e in adopted:
        fields = union(fields, e.get("fieldsV1") or {})
    merged = {
        **base,
        "manager": FIELD_MANAGER,
        "operation": "Apply",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if own is None:
        return [*kept, merged]
    kept[own] = merged
    return kept


def _ours(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and (entry.get("manager"), entry.get("operation")) == (FIELD_MANAGER, "Apply")
        and not entry.get("subresource")
    )


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
