"""The SHA core (DESIGN §2): what changes the digest and what does not."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from services.core.sha import HashError, canonical_bytes, manifest_sha, object_sha, prune

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "sha.json").read_text())


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
def test_known_vectors(vector: dict[str, Any]) -> None:
    canonical = vector["canonical"].encode()
    assert canonical_bytes(vector["object"]) == canonical
    assert object_sha(vector["object"]) == hashlib.sha256(canonical).digest()


def base() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "labels": {"app": "web", "driftbus.dev/bundle": "shop"},
            "annotations": {"team": "payments"},
            "resourceVersion": "100",
            "uid": "u-1",
            "generation": 3,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "driftbus", "operation": "Apply"}],
        },
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"name": "w", "image": "a"}]}},
        },
        "status": {"readyReplicas": 2, "observedGeneration": 3},
    }


def _set(path: str, value: Any) -> Any:
    def edit(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        for p in parents:
            obj = obj.setdefault(p, {})
        if value is _DELETE:
            obj.pop(leaf, None)
        else:
            obj[leaf] = value

    return edit


_DELETE = object()

SAME = [
    ("status-ignored", _set("status", {"readyReplicas": 0})),
    ("status-removed", _set("status", _DELETE)),
    ("resourceVersion-ignored", _set("metadata.resourceVersion", "999")),
    ("uid-ignored", _set("metadata.uid", "u-2")),
    ("generation-ignored", _set("metadata.generation", 7)),
    ("managedFields-ignored", _set("metadata.managedFields", [])),
    ("creationTimestamp-ignored", _set("metadata.creationTimestamp", "2030-01-01T00:00:00Z")),
    ("finalizers-ignored", _set("metadata.finalizers", ["kubernetes"])),
    ("ownerReferences-ignored", _set("metadata.ownerReferences", [{"uid": "x"}])),
]

DIFFERENT = [
    ("label-changed", _set("metadata.labels", {"app": "web2", "driftbus.dev/bundle": "shop"})),
    ("label-removed", _set("metadata.labels", {"app": "web"})),
    ("annotation-changed", _set("metadata.annotations", {"team": "search"})),
    ("spec-changed", _set("spec.replicas", 3)),
    ("nested-spec-changed", _set("spec.template", {"spec": {"containers": []}})),
    ("deletionTimestamp-set", _set("metadata.deletionTimestamp", "2026-05-05T00:00:00Z")),
    ("name-changed", _set("metadata.name", "web2")),
    ("namespace-changed", _set("metadata.namespace", "other")),
    ("apiVersion-changed", _set("apiVersion", "apps/v1beta2")),
    ("new-top-level-field", _set("extra", {"a": 1})),
    ("int-vs-string", _set("spec.replicas", "2")),
]


@pytest.mark.parametrize(("case", "edit"), SAME, ids=[c for c, _ in SAME])
def test_server_maintained_fields_do_not_change_the_sha(case: str, edit: Any) -> None:
    edited = base()
    edit(edited)
    assert object_sha(edited) == object_sha(base())


@pytest.mark.parametrize(("case", "edit"), DIFFERENT, ids=[c for c, _ in DIFFERENT])
def test_intended_fields_change_the_sha(case: str, edit: Any) -> None:
    edited = base()
    edit(edited)
    assert object_sha(edited) != object_sha(base())


def _reversed_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed_keys(v) for v in value]
    return value


def test_key_order_is_irrelevant_at_every_depth() -> None:
    assert object_sha(_reversed_keys(base())) == object_sha(base())


def test_list_order_is_significant() -> None:
    a = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "spec": {"l": [1, 2]}}
    b = {"apiVersion": "v1", "kind": "X", "metadata": {"name": "n"}, "spec": {"l": [2, 1]}}
    assert object_sha(a) != object_sha(b)


@pytest.mark.parametrize("field", ["labels", "annotations"])
@pytest.mark.parametrize("empty", [None, _DELETE], ids=["null", "missing"])
def test_empty_null_and_missing_maps_are_equal(field: str, empty: Any) -> None:
    a, b = base(), base()
    a["metadata"][field] = {}
    _set(f"metadata.{field}", empty)(b)
    assert object_sha(a) == object_sha(b)


def test_cluster_scoped_empty_namespace_equals_missing() -> None:
    a = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "namespace": ""}}
    b = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}
    assert object_sha(a) == object_sha(b)


def test_unicode_is_hashed_as_utf8() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "u"},
        "data": {"greeting": "こんにちは 🌍"},
    }
    assert "こんにちは 🌍".encode() in canonical_bytes(obj)


def test_large_object_one_byte_change_is_detected() -> None:
    big = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "big"},
        "data": {f"k{i}": "x" * 1000 for i in range(1000)},
    }
    changed = copy.deepcopy(big)
    changed["data"]["k500"] = "x" * 999 + "y"
    assert len(canonical_bytes(big)) > 1_000_000
    assert object_sha(big) != object_sha(changed)


def test_hashing_does_not_mutate_the_input() -> None:
    obj = base()
    before = copy.deepcopy(obj)
    object_sha(obj)
    prune(obj)
    assert obj == before


def test_digest_is_32_raw_bytes() -> None:
    assert len(object_sha(base())) == 32


def test_metadata_that_is_not_an_object_names_the_object() -> None:
    with pytest.raises(HashError, match=r"^Deployment/\?: metadata is list"):
        object_sha({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": []})


def test_unserializable_value_names_the_object() -> None:
    obj = base()
    obj["spec"]["replicas"] = 2**70  # beyond 64 bits: JSON numbers we cannot hash canonically
    with pytest.raises(HashError, match=r"^Deployment/shop/web: cannot be serialized"):
        object_sha(obj)


# --- manifestSHA: the whole manifest ---------------------------------------------------------

_CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}}


@pytest.mark.parametrize(
    ("change", "metadata"),
    [
        ("a finalizer", {"finalizers": ["example.com/keep"]}),
        (
            "an ownerReference",
            {
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}
                ]
            },
        ),
        ("an empty labels map spelled out", {"labels": {}}),
    ],
)
def test_manifest_sha_sees_what_prune_drops(change: str, metadata: dict[str, object]) -> None:
    changed = {**_CM, "metadata": {**_CM["metadata"], **metadata}}  # type: ignore[dict-item]
    assert manifest_sha(changed) != manifest_sha(_CM), change
    assert object_sha(changed) == object_sha(_CM), "the server-side comparison stays pruned"


def test_manifest_sha_ignores_key_order() -> None:
    reordered = {
        "metadata": {"namespace": "n", "name": "a"},
        "kind": "ConfigMap",
        "apiVersion": "v1",
    }
    assert manifest_sha(reordered) == manifest_sha(_CM)
