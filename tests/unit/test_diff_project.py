"""A live object cut to its manifest's shape (issue 41, item 5): a difference never holds a live
subtree the manifest does not declare as one — a scalar (or the other kind of container) in
the manifest against a live mapping or list is a type mismatch, shown without the live content.
"""

from __future__ import annotations

from typing import Any

import pytest

from services.core.diff import Withheld, diff, mask_sensitive, project

MAP, LIST = Withheld("mapping"), Withheld("list")
SECRET = "hunter2-live-only"

# (id, live, desired, projected)
CASES: list[tuple[str, Any, Any, Any]] = [
    ("scalar-against-a-live-mapping-is-its-type",
     {"data": {"password": SECRET}}, {"data": 0}, {"data": MAP}),
    ("scalar-against-a-live-list-is-its-type",
     {"args": [SECRET]}, {"args": "x"}, {"args": LIST}),
    ("null-against-a-live-mapping-is-its-type",
     {"data": {"k": SECRET}}, {"data": None}, {"data": MAP}),
    ("empty-string-against-a-live-mapping-is-its-type",
     {"data": {"k": SECRET}}, {"data": ""}, {"data": MAP}),
    ("mapping-against-a-live-list-is-its-type",
     {"spec": [{"k": SECRET}]}, {"spec": {"k": "v"}}, {"spec": LIST}),
    ("list-against-a-live-mapping-is-its-type",
     {"spec": {"k": SECRET}}, {"spec": ["k"]}, {"spec": MAP}),
    ("nested-scalar-against-a-mapping-deep-down",
     {"spec": {"template": {"env": {"k": SECRET}, "image": "a"}}},
     {"spec": {"template": {"env": "x", "image": "b"}}},
     {"spec": {"template": {"env": MAP, "image": "a"}}}),
    ("inside-a-list-item",
     {"items": [{"v": {"k": SECRET}}]}, {"items": [{"v": 1}]}, {"items": [{"v": MAP}]}),
    ("a-whole-object-against-a-scalar", {"data": {"k": SECRET}}, 0, MAP),
    ("a-live-scalar-where-the-manifest-has-a-mapping-is-the-value",
     {"data": "plain"}, {"data": {"k": "v"}}, {"data": "plain"}),
    ("scalars-are-the-live-values", {"data": {"k": "live"}}, {"data": {"k": "want"}},
     {"data": {"k": "live"}}),
    ("keys-the-manifest-does-not-set-are-cut",
     {"data": {"k": "v", "other": SECRET}, "extra": {"k": SECRET}}, {"data": {"k": "v"}},
     {"data": {"k": "v"}}),
    ("missing-live-keys-stay-missing", {"data": {}}, {"data": {"k": "v"}, "binaryData": 0},
     {"data": {}}),
    ("lists-of-equal-length-item-by-item",
     {"c": [{"name": "a", "image": "1", "tty": True}]}, {"c": [{"name": "a", "image": "2"}]},
     {"c": [{"name": "a", "image": "1"}]}),
    ("a-longer-live-list-keeps-its-scalars-and-withholds-its-containers",
     {"c": [{"name": "a", "x": SECRET}, {"name": "side", "x": SECRET}, "s"]},
     {"c": [{"name": "a"}]},
     {"c": [{"name": "a"}, MAP, "s"]}),
    ("a-shorter-live-list-item-by-item", {"c": [{"name": "a", "x": 1}]},
     {"c": [{"name": "a"}, {"name": "b"}]}, {"c": [{"name": "a"}]}),
    ("an-empty-manifest-list-withholds-every-live-container",
     {"c": [{"k": SECRET}, [SECRET]]}, {"c": []}, {"c": [MAP, LIST]}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("live", "desired", "projected"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_project_declares_what_the_live_side_may_show(
    live: Any, desired: Any, projected: Any
) -> None:
    assert project(live, desired) == projected
    # what a user sees of the difference: never a live value under an undeclared subtree
    for kind in ("ConfigMap", "Secret", "Deployment"):
        text = "\n".join(map(str, mask_sensitive(diff(project(live, desired), desired), kind)))
        assert SECRET not in text, text


def test_a_type_mismatch_reads_as_the_live_type() -> None:
    (change,) = diff(project({"data": {"password": SECRET}}, {"data": 0}), {"data": 0})
    assert str(change) == "~ data: (a mapping) → 0"
    assert change.old == MAP
    assert not change.added
    assert not change.removed


def test_a_withheld_value_never_equals_a_manifest_value() -> None:
    """Not even the string the page shows for it: the mismatch is always a change."""
    desired = {"data": "(a mapping)"}
    assert [c.path for c in diff(project({"data": {}}, desired), desired)] == ["data"]
