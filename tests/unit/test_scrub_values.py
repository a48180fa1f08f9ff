# ruff: noqa: E501 - the tables read best one case per line
"""Every value of a Secret's ``data``/``stringData`` is scrubbed whatever its type (issue 30,
item 7): the forms a value may be printed in, and API error messages of the shape the real
server sends (tests/integration/test_secret_values.py has them from the real server)."""

from __future__ import annotations

from typing import Any

import pytest

from services.core.scrub import MASK, printed_forms, scrub_for, secret_values

# (case, value, forms that must be among printed_forms(value))
FORMS: list[tuple[str, Any, list[str]]] = [
    ("string", "hunter22", ["hunter22"]),
    ("int", 12345678, ["12345678"]),
    ("negative int", -4242, ["-4242"]),
    ("big int", 10**30, [str(10**30)]),
    ("bool true", True, ["true", "True"]),
    ("bool false", False, ["false", "False"]),
    ("float", 3.14159, ["3.14159"]),
    ("float, Go exponent", 27182818.5, ["27182818.5", "2.71828185e+07"]),
    ("integral float", 12345678.0, ["12345678.0", "1.2345678e+07"]),
    ("small float", 0.00012, ["0.00012"]),
    ("tiny float", 1e-7, ["1e-07"]),
    ("huge float", 1e21, ["1e+21"]),
    ("six digits stay plain", 123456.0, ["123456"]),
    ("list", [55554444, "inner-secret"], ["55554444", "inner-secret", '[55554444,"inner-secret"]']),
    ("map", {"a": 9876543}, ["9876543", '{"a":9876543}', '{"a": 9876543}']),
    ("nested", {"a": [{"b": 31337000}]}, ["31337000"]),
]


@pytest.mark.parametrize(("value", "forms"), [c[1:] for c in FORMS], ids=[c[0] for c in FORMS])
def test_printed_forms(value: Any, forms: list[str]) -> None:
    got = printed_forms(value)
    for f in forms:
        assert f in got, (f, got)


@pytest.mark.parametrize("value", [None, float("nan"), float("inf")])
def test_printed_forms_of_nothing_to_hide_do_not_crash(value: Any) -> None:
    assert all(isinstance(f, str) for f in printed_forms(value))


def test_a_deeply_nested_value_does_not_crash_the_scrubber() -> None:
    deep: Any = 31337000
    for _ in range(5000):
        deep = [deep]
    out = scrub_for(
        secret(stringData={"d": deep}), "got &value.valueUnstructured{Value:[[[31337000]]]}"
    )
    assert "31337000" not in out


def secret(**fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "namespace": "n"},
        **fields,
    }


PREFIX = "Secret/n/s: HTTP 500 (500): failed to create typed patch object (n/s; /v1, Kind=Secret): "

# (case, object, the server's message, values that must not survive)
MESSAGES: list[tuple[str, dict[str, Any], str, list[str]]] = [
    (
        "stringData int",
        secret(stringData={"pin": 12345678}),
        PREFIX + ".stringData.pin: expected string, got &value.valueUnstructured{Value:12345678}",
        ["12345678"],
    ),
    (
        "stringData float",
        secret(stringData={"r": 27182818.5}),
        PREFIX
        + ".stringData.r: expected string, got &value.valueUnstructured{Value:2.71828185e+07}",
        ["2.71828185e+07", "27182818"],
    ),
    (
        "data int",
        secret(data={"n": 987654321}),
        PREFIX + ".data.n: expected string, got &value.valueUnstructured{Value:987654321}",
        ["987654321"],
    ),
    (
        "data bool",
        secret(data={"b": True}),
        PREFIX + ".data.b: expected string, got &value.valueUnstructured{Value:true}",
        ["Value:true"],
    ),
    (
        "short int",
        secret(stringData={"p": 42}),
        PREFIX + ".stringData.p: expected string, got &value.valueUnstructured{Value:42}",
        ["Value:42"],
    ),
    (
        "nested list",
        secret(stringData={"l": [55554444, "inner-secret-text"]}),
        PREFIX
        + '.stringData.l: expected string, got &value.valueUnstructured{Value:[]interface {}{55554444, "inner-secret-text"}}',
        ["55554444", "inner-secret-text"],
    ),
    (
        "echoed elsewhere",
        secret(stringData={"pin": 12345678}),
        "admission webhook denied: pin 12345678 is weak",
        ["12345678"],
    ),
    (
        "invalid value",
        secret(stringData={"pin": 12345678}),
        'Secret "s" is invalid: data[pin]: Invalid value: 12345678: bad',
        ["12345678"],
    ),
    ("data not a map", secret(data=[31337000]), "data: expected map, got [31337000]", ["31337000"]),
    (
        "string values still",
        secret(stringData={"password": "hunter22"}),
        "rejected hunter22",
        ["hunter22"],
    ),
]


@pytest.mark.parametrize(
    ("obj", "message", "hidden"), [c[1:] for c in MESSAGES], ids=[c[0] for c in MESSAGES]
)
def test_a_secret_message_keeps_no_value(
    obj: dict[str, Any], message: str, hidden: list[str]
) -> None:
    out = scrub_for(obj, message)
    for h in hidden:
        assert h not in out, out
    assert MASK in out


def test_other_kinds_are_left_alone() -> None:
    cm = {"kind": "ConfigMap", "data": {"n": 12345678}}
    text = "got &value.valueUnstructured{Value:12345678}"
    assert secret_values(cm) == []
    assert scrub_for(cm, text) == text


def test_the_object_name_and_field_path_survive() -> None:
    out = scrub_for(
        secret(stringData={"pin": 12345678}),
        PREFIX + ".stringData.pin: expected string, got &value.valueUnstructured{Value:12345678}",
    )
    assert out.startswith("Secret/n/s: HTTP 500")
    assert ".stringData.pin: expected string" in out
