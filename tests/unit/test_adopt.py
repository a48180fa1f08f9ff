"""Adopting what kubectl made (issue 15): the JSON patch that folds kubectl's managers into
driftbus's Apply entry and drops the last-applied annotation."""

from __future__ import annotations

from typing import Any

from services.core.adopt import LAST_APPLIED, adoption_patch


def _entry(manager: str, operation: str, fields: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": "2026-11-24T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


def _live(*entries: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "x",
            "resourceVersion": "42",
            "annotations": annotations,
            "managedFields": list(entries),
        }
    }


OURS = _entry("driftbus", "Apply", {"f:data": {"f:a": {}}})
CSA = _entry("kubectl-client-side-apply", "Update", {"f:data": {"f:a": {}, "f:b": {}}})
EDIT = _entry("kubectl-edit", "Update", {"f:data": {"f:c": {}}})
STATUS = _entry("kubectl", "Update", {"f:status": {}}, subresource="status")


def test_nothing_to_adopt() -> None:
    assert adoption_patch(_live(OURS, EDIT, STATUS), {}) == []


def test_kubectl_fields_fold_into_ours_and_others_stay() -> None:
    patch = adoption_patch(_live(OURS, CSA, EDIT, STATUS), {})
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}
    assert patch[1]["op"] == "replace"
    entries = patch[1]["value"]
    assert [(e["manager"], e["operation"]) for e in entries] == [
        ("driftbus", "Apply"),
        ("kubectl-edit", "Update"),  # a later edit is not adopted: it is drift or not ours
        ("kubectl", "Update"),  # a subresource entry is not adopted
    ]
    assert entries[0]["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}}}
    assert len(patch) == 2


def test_without_an_entry_of_ours_one_is_made() -> None:
    ssa = _entry("kubectl", "Apply", {"f:data": {"f:z": {}}})
    entries = adoption_patch(_live(ssa, CSA), {})[1]["value"]
    assert entries == [
        {
            "apiVersion": "v1",
            "time": "2026-11-24T00:00:00Z",
            "manager": "driftbus",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:z": {}, "f:a": {}, "f:b": {}}},
        }
    ]


def test_the_last_applied_annotation_goes_unless_the_manifest_sets_it() -> None:
    live = _live(OURS, **{LAST_APPLIED: "{}"})
    assert adoption_patch(live, {})[1:] == [
        {
            "op": "remove",
            "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration",
        }
    ]
    assert adoption_patch(live, {"metadata": {"annotations": {LAST_APPLIED: "{}"}}}) == []


def test_before_first_apply_is_not_adopted() -> None:
    """The API server files every field of an object without managedFields under it, other
    controllers' included: adopting them would remove them."""
    bfa = _entry("before-first-apply", "Update", {"f:spec": {"f:replicas": {}}})
    assert adoption_patch(_live(OURS, bfa), {}) == []


def test_ignored_fields_are_not_adopted() -> None:
    csa = _entry("kubectl-client-side-apply", "Update", {"f:spec": {"f:replicas": {}, "f:x": {}}})
    manifest = {"metadata": {"annotations": {"driftbus.dev/ignore": "/spec/replicas"}}}
    entries = adoption_patch(_live(OURS, csa), manifest)[1]["value"]
    assert entries[0]["fieldsV1"] == {"f:data": {"f:a": {}}, "f:spec": {"f:x": {}}}
