"""The owned projection (issue 15): real managedFields captured from kube-apiserver, and the
corners of structured-merge-diff's field sets written out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from services.core.owned import field_set, owned_projection
from services.core.sha import object_sha, prune

CAPTURED = Path(__file__).parent / "data" / "managed_fields"
CASES = sorted(CAPTURED.glob("*.json"))


def test_the_captured_cases_are_there() -> None:
    # captured by tests/integration/test_owned_fields.py with DRIFTBUS_CAPTURE_OWNED set
    assert len(CASES) >= 9


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_captured_writes_by_other_managers(path: Path) -> None:
    case = orjson.loads(path.read_bytes())
    applied, after = case["applied"], case["after"]
    assert applied["metadata"]["resourceVersion"] != after["metadata"]["resourceVersion"]
    assert (object_sha(after) != object_sha(applied)) is case["changed"]


def test_whole_object_hashing_sees_every_other_managers_write() -> None:
    """The peer rule (``whole_object_drift``) counts the writes the owned projection leaves out:
    what the churn benchmark measures against."""
    asserted = []
    for path in CASES:
        case = orjson.loads(path.read_bytes())
        applied, after = case["applied"], case["after"]
        if case["changed"] or prune(applied) == prune(after):
            continue  # owned drift, or nothing a whole-object hash keeps changed either
        assert object_sha(after, whole=True) != object_sha(applied, whole=True), path.stem
        asserted.append(path.stem)
    # an HPA's scale, a controller's annotation, someone else's label and env var at least
    assert len(asserted) >= 4, asserted


def test_the_projection_of_a_captured_apply_is_the_manifest() -> None:
    applied = orjson.loads((CAPTURED / "scaled-by-hpa.json").read_bytes())["applied"]
    p = owned_projection(applied)
    assert "status" not in p
    assert "replicas" not in p["spec"]  # defaulted by the server, not driftbus's
    assert "strategy" not in p["spec"]
    container = p["spec"]["template"]["spec"]["containers"][0]
    assert container == {
        "name": "web",
        "image": "nginx:1.27",
        "env": [{"name": "MODE", "value": "fast"}],
    }
    assert p["metadata"]["labels"] == {"driftbus.dev/bundle": "owned"}
    assert set(p["metadata"]) == {"name", "namespace", "labels"}


def _obj(fields: dict[str, Any] | None, **body: Any) -> dict[str, Any]:
    managed = []
    if fields is not None:
        managed.append({"manager": "driftbus", "operation": "Apply", "fieldsV1": fields})
    return {
        "apiVersion": "v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": "n", "uid": "u", "managedFields": managed},
        **body,
    }


def _spec(fields: dict[str, Any], spec: Any) -> Any:
    return owned_projection(_obj({"f:spec": fields}, spec=spec)).get("spec")


@pytest.mark.parametrize(
    ("fields", "spec", "projected"),
    [
        ({"f:a": {}}, {"a": 1, "b": 2}, {"a": 1}),
        ({"f:a": {}}, {"b": 2}, {}),  # owned but gone: the projection shows it gone
        ({"f:m": {}}, {"m": {"x": 1, "y": 2}}, {"m": {"x": 1, "y": 2}}),  # atomic map
        ({"f:m": {"f:x": {}}}, {"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}),  # granular map
        ({"f:l": {}}, {"l": [3, 1, 2]}, {"l": [3, 1, 2]}),  # atomic list
        ({"f:l": {"v:1": {}, 'v:"b"': {}}}, {"l": ["a", "b", 1, 2]}, {"l": ["b", 1]}),  # a set
        ({"f:l": {"i:1": {}}}, {"l": ["a", "b"]}, {"l": ["b"]}),
        (
            {"f:c": {'k:{"name":"x"}': {".": {}, "f:name": {}, "f:v": {}}}},
            {"c": [{"name": "y", "v": 0}, {"name": "x", "v": 1, "other": 2}]},
            {"c": [{"name": "x", "v": 1}]},
        ),
        (  # a compound key, in the live list's order
            {
                "f:p": {
                    'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}},
                    'k:{"port":53,"protocol":"UDP"}': {".": {}, "f:port": {}},
                }
            },
            {
                "p": [
                    {"port": 53, "protocol": "UDP"},
                    {"port": 53, "protocol": "TCP"},
                    {"port": 80, "protocol": "TCP"},
                ]
            },
            {"p": [{"port": 53}, {"port": 80}]},
        ),
        (
            {"f:c": {'k:{"name":"x"}': {}}},
            {"c": [{"name": "x", "v": 1}]},
            {"c": [{"name": "x", "v": 1}]},
        ),
        ({"f:c": {"k:not json": {}}}, {"c": [{"name": "x"}]}, {"c": []}),
        ({"f:a": {"f:b": {}}}, {"a": "scalar"}, {"a": "scalar"}),  # shape changed: kept, seen
    ],
    ids=[
        "leaf",
        "owned-gone",
        "atomic-map",
        "granular-map",
        "atomic-list",
        "set",
        "index",
        "keyed",
        "compound-key-order",
        "element-whole",
        "bad-key",
        "shape-changed",
    ],
)
def test_projection(fields: dict[str, Any], spec: Any, projected: Any) -> None:
    assert _spec(fields, spec) == projected


def test_identity_is_always_kept_and_server_metadata_never() -> None:
    obj = _obj({"f:spec": {"f:a": {}}}, spec={"a": 1}, status={"ready": True})
    obj["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z"
    p = owned_projection(obj)
    assert p == {
        "apiVersion": "v1",
        "kind": "Thing",
        "metadata": {"name": "t", "namespace": "n", "deletionTimestamp": "2026-11-24T00:00:00Z"},
        "spec": {"a": 1},
    }


def test_without_an_apply_entry_of_driftbus_the_whole_object_counts() -> None:
    obj = _obj(None, spec={"a": 1})
    obj["metadata"]["managedFields"] = [
        {"manager": "driftbus", "operation": "Update", "fieldsV1": {"f:spec": {}}},
        {"manager": "driftbus", "operation": "Apply", "subresource": "status", "fieldsV1": {}},
        {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {"f:a": {}}}},
    ]
    assert field_set(obj) is None
    assert owned_projection(obj) is obj
    assert owned_projection({"kind": "NoMetadata"}) == {"kind": "NoMetadata"}


def test_apply_entries_at_two_versions_are_merged() -> None:
    obj = _obj({"f:spec": {"f:a": {}}}, spec={"a": 1, "b": 2, "c": 3})
    obj["metadata"]["managedFields"].append(
        {
            "manager": "driftbus",
            "operation": "Apply",
            "apiVersion": "v2",
            "fieldsV1": {"f:spec": {"f:b": {}}},
        }
    )
    assert owned_projection(obj)["spec"] == {"a": 1, "b": 2}
