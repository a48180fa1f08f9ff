"""YAML decoded as Kubernetes decodes it (``services/core/kyaml.py``).

The vectors in ``tests/vectors/yaml.json`` are also applied with the real kubectl to the real API
server (``tests/integration/test_kyaml_apiserver.py``), which proves the table, not just this
decoder against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from services.core.kyaml import DecodeError, documents, resolve

VECTORS: list[dict[str, Any]] = orjson.loads(
    (Path(__file__).parents[1] / "vectors" / "yaml.json").read_bytes()
)


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    [(_, doc)] = list(documents(vector["yaml"]))
    # compared as JSON text: 1 and 1.0 and True are equal in Python, not on the wire
    assert orjson.dumps(doc, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        vector["json"], option=orjson.OPT_SORT_KEYS
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0o17", 15),
        ("0b101", 5),
        ("-0b11", -3),
        ("12345678901234567890", 12345678901234567890),  # uint64
        ("123456789012345678901234", 1.2345678901234568e23),  # beyond uint64: a float
        ("1.5e400", "1.5e400"),  # out of range: Go's ParseFloat fails, so a string
        (".5_0", ".5_0"),
        ("True", True),
        ("tRue", "tRue"),
        ("-", "-"),
        ("1.2.3", "1.2.3"),
        ("007", 7),
    ],
)
def test_plain_scalars_resolve_as_go_yaml_v2(text: str, value: Any) -> None:
    got = resolve(text)
    assert (type(got), got) == (type(value), value)


def test_empty_and_comment_only_documents_are_skipped_and_indexes_kept() -> None:
    text = "# leading comment\n---\n---\n# only a comment\n---\na: 1\n---\n"
    assert list(documents(text)) == [(2, {"a": 1})]


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", 4, "duplicate key 'c' (first at line 3)"),
        ("a:\n  b: .inf\n", None, "a.b: inf has no JSON form"),
        ("a: [1, 2\n", 2, "expected ',' or ']'"),
        ("? [1, 2]\n: x\n", 1, "unsupported map key [1, 2]"),
    ],
)
def test_what_kubernetes_cannot_read_the_same_way_is_an_error_with_its_line(
    text: str, line: int | None, problem: str
) -> None:
    with pytest.raises(DecodeError) as caught:
        list(documents(text))
    assert caught.value.line == line
    assert problem in caught.value.problem


def test_keys_a_merge_brings_in_may_be_overridden_without_being_duplicates() -> None:
    [(_, doc)] = list(documents("b: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n"))
    assert doc["m"] == {"x": 2}


def test_an_alias_bomb_stays_a_small_graph() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    [(_, doc)] = list(documents("\n".join(lines)))  # returns at once: shared, not expanded
    assert doc["a8"][0] is doc["a7"]
