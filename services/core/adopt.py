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
owns is drift (docs/drift.md), anything else is left alone. ``before-first-apply`` (Flux adopts
it) is not: the API server files under it *every* field of an object that had no managedFields,
an HPA's replicas and a controller's annotations included, and adopting those would remove them.
Fields the manifest ignores (``ignore.py``) are never adopted: they stay whoever's they are.

Pure: the patch is computed here, sent by the applier.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from services.core.ignore import check_pointer, pointers_of
from services.core.manifest import FIELD_MANAGER
from services.core.owned import union

ADOPTED_MANAGERS: Final = frozenset(
    {
        ("kubectl-client-side-apply", "Update"),  # kubectl apply (client-side)
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
        ignored = [check_pointer(p) for p in pointers_of(manifest)]
        folded = _folded(entries, ignored)
        ops.append({"op": "replace", "path": "/metadata/managedFields", "value": folded})
    if drop_annotation:
        ops.append({"op": "remove", "path": "/metadata/annotations/" + _escaped(LAST_APPLIED)})
    return ops


def _adopted(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and (entry.get("manager"), entry.get("operation")) in ADOPTED_MANAGERS
        and not entry.get("subresource")
    )


def _folded(entries: list[Any], ignored: list[list[str]]) -> list[Any]:
    """The entries with every adopted one merged into driftbus's Apply entry (made when
    missing, at the API version of the first adopted entry), less the ignored fields."""
    adopted = [e for e in entries if _adopted(e)]
    kept = [e for e in entries if not _adopted(e)]
    own = next((i for i, e in enumerate(kept) if _ours(e)), None)
    base = kept[own] if own is not None else {k: adopted[0].get(k) for k in ("apiVersion", "time")}
    fields = base.get("fieldsV1") or {}
    for e in adopted:
        fields = union(fields, _without_paths(e.get("fieldsV1") or {}, ignored))
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


def _without_paths(fields: dict[str, Any], paths: list[list[str]]) -> dict[str, Any]:
    """A ``fieldsV1`` set less the map paths given (a path through a list is left as it is)."""
    for path in paths:
        fields = _dropped(fields, [f"f:{t}" for t in path])
    return fields


def _dropped(node: dict[str, Any], path: list[str]) -> dict[str, Any]:
    head = path[0]
    if head not in node:
        return node
    out = dict(node)
    if len(path) == 1:
        del out[head]
    elif isinstance(node[head], dict):
        out[head] = _dropped(node[head], path[1:])
    return out


def _ours(entry: Any) -> bool:
    return (
        isinstance(entry, Mapping)
        and (entry.get("manager"), entry.get("operation")) == (FIELD_MANAGER, "Apply")
        and not entry.get("subresource")
    )


def _escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
