"""YAML to JSON exactly as Kubernetes reads it.

``kubectl apply -f`` turns each YAML document into JSON with sigs.k8s.io/yaml, which decodes
with go-yaml v2 into untyped values and marshals those with Go's encoding/json. PyYAML's own
resolver differs from go-yaml's on plain scalars, so it is replaced here by a port of go-yaml v2's
``resolve()`` (go.yaml.in/yaml/v2 resolve.go); the parser, anchors and merge keys stay PyYAML's.
What a plain (unquoted) scalar becomes, as in Kubernetes:

* ``y Y yes Yes YES true True TRUE on On ON`` → true; the ``n``/``no``/``false``/``off`` forms →
  false (YAML 1.1 booleans, including ``y`` and ``n``, which PyYAML leaves strings);
* ``~ null Null NULL`` and nothing → null;
* integers as Go's ``strconv.ParseInt(s, 0, 64)`` reads them after dropping ``_``: ``0755`` is
  octal (493), ``0x1F`` hex, ``0b101`` binary; too big for int64 → uint64 → float;
* floats of the YAML form (``1.5``, ``1e3``, ``.5``); ``.inf``/``.nan`` are floats, and JSON has
  no way to say them: an error, as kubectl's;
* anything else is a string: dates and times (PyYAML: ``date``), ``1:20`` (PyYAML: sexagesimal
  80), a bare ``=`` (PyYAML: the YAML 1.1 value tag, an error).

A float with an integral value is written as an integer (Go writes ``float64(1)`` as ``1``, so the
API server sees an integer); map keys that are not strings become strings (``1``, ``true``).
Duplicate keys in one mapping are an error naming the line (go-yaml v2, as kubectl calls it,
keeps the last silently — almost always a mistake that silently drops the first value); keys
that a merge key (``<<``) brings in may be overridden, as YAML defines.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

STR, INT, FLOAT, BOOL, NULL, MERGE, TIMESTAMP = (
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "merge", "timestamp")
)
_PLAIN = "!kubernetes-plain"
"""The tag every plain scalar resolves to here; ``resolve`` decides what it is."""

_CONSTANTS: dict[str, Any] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"), True),
    **dict.fromkeys(("on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE"), False),
    **dict.fromkeys(("off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_INT = re.compile(
    r"^[-+]?(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)$"
)  # strconv.ParseInt(s, 0, 64) syntax once underscores are gone
_GO_FLOAT_DOT = re.compile(r"^\.[0-9]+([eE][-+]?[0-9]+)?$")
"""What Go's ParseFloat takes of a scalar starting with ``.``."""
INT64 = (-(2**63), 2**63 - 1)
UINT64_MAX = 2**64 - 1


class DecodeError(ValueError):
    """The YAML cannot become the JSON Kubernetes would read: why, and the line if known."""

    def __init__(self, problem: str, line: int | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line


def _go_int(text: str) -> int | None:
    if not _GO_INT.match(text):
        return None
    sign = -1 if text[0] == "-" else 1
    digits = text.lstrip("+-")
    body = digits[2:] if len(digits) > 1 and digits[1] in "xXoObB" else digits
    base = {"x": 16, "o": 8, "b": 2}.get(digits[1:2].lower(), 8 if digits[0] == "0" else 10)
    if base == 8 and body.startswith("0") and digits[1:2] not in ("o", "O"):
        body = body[1:] or "0"
    return sign * int(body, base)


def resolve(text: str) -> Any:
    """A plain scalar as go-yaml v2 resolves it into an untyped value."""
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    first = text[0]
    if first == ".":
        if _GO_FLOAT_DOT.match(text) and not math.isinf(float(text)):
            return float(text)
        return text  # out of range is an error to Go's ParseFloat: a string
    if not (first.isdigit() and first.isascii()) and first not in "+-":
        return text
    plain = text.replace("_", "")
    if len(plain) > 400:
        return text  # far beyond uint64 and float64 range: Go's parsers fail, a string
    value = _go_int(plain)
    if value is not None and INT64[0] <= value <= UINT64_MAX:
        return value  # int64, or uint64 if positive and bigger
    if _YAML_FLOAT.match(plain) and not math.isinf(float(plain)):
        return float(plain)  # out of range is an error to Go's ParseFloat: a string
    if plain.startswith("0b") and re.fullmatch(r"[01]+", plain[2:]):
        return int(plain[2:], 2) if int(plain[2:], 2) <= UINT64_MAX else text
    if plain.startswith("-0b") and re.fullmatch(r"[01]+", plain[3:]):
        return -int(plain[3:], 2) if int(plain[3:], 2) <= 2**63 else text
    return text


class _Loader(yaml.SafeLoader):
    """PyYAML's parser with go-yaml v2's scalar resolution."""

    # only these two: ``<<`` is a merge key, every other plain scalar is ``resolve``'s
    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's class-level registry
        "<": [(MERGE, re.compile(r"^<<$"))],
        None: [(_PLAIN, re.compile(r".*", re.DOTALL))],
    }

    def construct_plain(self, node: ScalarNode) -> Any:
        return resolve(node.value)

    def construct_tagged(self, node: Node) -> Any:
        """An explicit tag: ``!!int``/``!!float``/``!!bool``/``!!null`` as YAML says; on any
        other scalar the text, unresolved (go-yaml's ``resolve`` returns it as it is); a tagged
        mapping or sequence as if untagged."""
        if isinstance(node, ScalarNode):
            if node.tag not in (INT, FLOAT, BOOL, NULL):
                return node.value  # !!str, and any tag go-yaml does not resolve: the text
            value = resolve(node.value)
            wanted = {INT: int, FLOAT: float, BOOL: bool, NULL: type(None)}.get(node.tag)
            if wanted is float and type(value) is int:
                return float(value)
            if wanted is not None and type(value) is not wanted:
                raise ConstructorError(
                    None, None, f"cannot decode {node.value!r} as {node.tag}", node.start_mark
                )
            return value
        if isinstance(node, SequenceNode):
            return self.construct_sequence(node, deep=True)
        assert isinstance(node, MappingNode)
        return self.construct_mapping(node, deep=True)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys in document order, as go-yaml decodes them: a merge (``<<``) is applied where
        it stands — it overrides keys before it, later keys override it; of a list of merged
        maps the earlier ones win. A key given twice explicitly is an error."""
        seen: dict[Any, int] = {}
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE:
                for merged in reversed(self._merged(value_node, node)):
                    out.update(merged)
                continue
            key = _key(self.construct_object(key_node, deep=True), key_node)
            if key in seen:
                raise ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"duplicate key {key!r} (first at line {seen[key] + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line
            out[key] = self.construct_object(value_node, deep=deep)
        return out

    def _merged(self, value: Node, parent: MappingNode) -> list[dict[Any, Any]]:
        nodes = value.value if isinstance(value, SequenceNode) else [value]
        out = []
        for n in nodes:
            if not isinstance(n, MappingNode):
                raise ConstructorError(
                    "while constructing a mapping",
                    parent.start_mark,
                    "a merge (<<) needs a map or a list of maps",
                    n.start_mark,
                )
            out.append(self.construct_mapping(n, deep=True))
        return out


_Loader.add_constructor(_PLAIN, _Loader.construct_plain)
_Loader.add_constructor(TIMESTAMP, lambda _loader, node: node.value)
_Loader.add_constructor(None, _Loader.construct_tagged)
for _tag in (INT, FLOAT, BOOL, NULL, STR):
    _Loader.add_constructor(_tag, _Loader.construct_tagged)


def _key(key: Any, node: Node) -> str:
    """A mapping key as sigs.k8s.io/yaml makes it a JSON object key."""
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        if math.isfinite(key) and abs(key) > _FLOAT32_MAX:
            # as a float32 it is infinite: no key sigs.k8s.io/yaml would agree on
            raise ConstructorError(
                None, None, f"map key {key!r} is beyond a float32's range", node.start_mark
            )
        return _go_float32(key)
    raise ConstructorError(
        None, None, f"unsupported map key {key!r} (JSON keys are strings)", node.start_mark
    )


_FLOAT32_MAX = 3.4028234663852886e38


def _go_float32(value: float) -> str:
    """``strconv.FormatFloat(v, 'g', -1, 32)``: how sigs.k8s.io/yaml spells a float map key
    (shortest digits that survive a round trip through float32; exponent form below 1e-4 and
    from 1e6 on, as Go's shortest ``%g``)."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"

    def f32(x: float) -> float:
        return float(struct.unpack("f", struct.pack("f", x))[0])

    target = f32(value)
    for digits in range(1, 10):
        text = f"{target:.{digits - 1}e}"
        if f32(float(text)) == target:
            break
    mantissa, _, exponent = text.partition("e")
    exp = int(exponent)
    if exp < -4 or exp >= 6:
        return f"{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return f"{float(text):.{max(digits - 1 - exp, 0)}f}"


def _jsonable(value: Any, where: str, done: dict[int, Any] | None = None) -> Any:
    """Go's encoding/json view of a decoded value: integral floats as integers, no Inf/NaN.
    A node an alias repeats is converted once and shared (``done``), so an alias bomb stays a
    small graph here; ``services.inputs.limits.measure`` refuses it afterwards."""
    if isinstance(value, float):
        if math.isinf(value) or math.isnan(value):
            raise DecodeError(f"{where or 'the document'}: {value} has no JSON form")
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if not isinstance(value, dict | list):
        if value is None or isinstance(value, str | int | bool):
            return value
        raise DecodeError(f"{where or 'the document'}: a {type(value).__name__} has no JSON form")
    done = {} if done is None else done
    if id(value) in done:
        return done[id(value)]
    out: Any
    if isinstance(value, dict):
        out = done[id(value)] = {}
        for k, v in value.items():
            out[k] = _jsonable(v, f"{where}.{k}" if where else k, done)
    else:
        out = done[id(value)] = []
        out.extend(_jsonable(v, f"{where}[{i}]", done) for i, v in enumerate(value))
    return out


def documents(text: str) -> Iterator[tuple[int, Any]]:
    """(index, JSON value) of every non-empty document of a YAML stream. Raises
    ``DecodeError`` with the line for anything Kubernetes would not read the same way."""
    try:
        for i, doc in enumerate(yaml.load_all(text, Loader=_Loader)):
            if doc is not None:
                yield i, _jsonable(doc, "")
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise DecodeError(str(exc.problem or exc), mark.line + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise DecodeError(str(exc)) from None
    except RecursionError:
        raise DecodeError("nested too deeply") from None


class FileTextError(ValueError):
    """A file's text that is not UTF-8, or not YAML Kubernetes would read: the message starts
    with ``FILE:LINE: `` (or ``FILE: ``)."""


def file_documents(text: str | bytes, where: str) -> tuple[str, list[tuple[int, Any]]]:
    """A settings file's text (the tenants, windows and notifications files) and its
    documents as ``documents`` reads them; FileTextError naming ``where`` and the line."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise FileTextError(f"{where}: not UTF-8 text") from None
    try:
        return text, list(documents(text))
    except DecodeError as exc:
        at = f"{where}:{exc.line}: " if exc.line is not None else f"{where}: "
        raise FileTextError(f"{at}invalid YAML: {exc.problem}") from None
