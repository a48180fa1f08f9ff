"""Field-level diffs for plans; Secret values never shown."""

from __future__ import annotations

from typing import Any

import pytest

from services.core.diff import diff, mask_sensitive


def test_paths_read_like_kubectl() -> None:
    old = {"spec": {"replicas": 1, "template": {"containers": [{"image": "a"}, {"image": "b"}]}}}
    new = {
        "spec": {
            "replicas": 2,
            "template": {"containers": [{"image": "a"}, {"image": "c"}]},
            "paused": True,
        }
    }
    assert [str(c) for c in diff(old, new)] == [
        "+ spec.paused: True",
        "~ spec.replicas: 1 → 2",
        "~ spec.template.containers[1].image: b → c",
    ]


def test_removed_fields_and_list_length_changes() -> None:
    changes = diff({"data": {"a": "1", "b": "2"}, "l": [1]}, {"data": {"a": "1"}, "l": [1, 2]})
    assert [str(c) for c in changes] == ["- data.b: 2", "~ l: [1] → [1, 2]"]


def test_equal_objects_have_no_changes() -> None:
    assert diff({"a": {"b": [1, {"c": 2}]}}, {"a": {"b": [1, {"c": 2}]}}) == []


def test_secret_values_are_masked_but_the_change_is_visible() -> None:
    changes = mask_sensitive(
        diff(
            {"data": {"password": "b2xk"}, "type": "Opaque"},
            {"data": {"password": "bmV3", "token": "dA=="}, "type": "x"},
        ),
        "Secret",
    )
    text = "\n".join(map(str, changes))
    assert "b2xk" not in text
    assert "bmV3" not in text
    assert "dA==" not in text
    assert "~ data.password: *** → ***" in text
    assert "+ data.token: ***" in text
    assert "~ type: Opaque → x" in text


CONTAINER = {"name": "app", "image": "app:1", "env": [{"name": "TOKEN", "value": "hunter2"}]}


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        # one env value changes
        (
            [CONTAINER],
            [{**CONTAINER, "env": [{"name": "TOKEN", "value": "hunter3"}]}],
            "~ spec.containers[0].env[0].value: *** → ***",
        ),
        # an env entry is added (the list grows: the whole list is the change)
        (
            [CONTAINER],
            [{**CONTAINER, "env": [*CONTAINER["env"], {"name": "B", "value": "hunter3"}]}],
            "'value': '***'",
        ),
        # a whole container is added
        ([CONTAINER], [CONTAINER, {**CONTAINER, "name": "side"}], "'value': '***'"),
        # the env key itself appears
        (
            [{"name": "app", "image": "app:1"}],
            [CONTAINER],
            "+ spec.containers[0].env: [{'name': 'TOKEN', 'value': '***'}]",
        ),
    ],
)
def test_env_values_are_masked_in_any_kind(old: Any, new: Any, shown: str) -> None:
    text = "\n".join(
        map(
            str,
            mask_sensitive(
                diff({"spec": {"containers": old}}, {"spec": {"containers": new}}), "Deployment"
            ),
        )
    )
    assert "hunter" not in text
    assert shown in text


def test_non_sensitive_changes_are_shown_as_they_are() -> None:
    changes = mask_sensitive(diff({"spec": {"image": "a:1"}}, {"spec": {"image": "a:2"}}), "Pod")
    assert [str(c) for c in changes] == ["~ spec.image: a:1 → a:2"]
