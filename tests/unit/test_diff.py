"""Field-level diffs for plans; Secret values never shown."""

from __future__ import annotations

from services.core.diff import diff, mask_secret


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
    changes = mask_secret(
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
