"""Keep Secret values out of every message driftbus writes (DESIGN §6, CVE-2022-24449's class).

API error messages can echo the value that failed validation. Before any text about an object
reaches a status event, a decision record or a log line, the values of that object's Secret data
are replaced — both as sent (base64 in ``data``) and decoded, and ``stringData`` as given; a value
that is not a string (``stringData: {pin: 12345678}``, which the API server refuses and echoes)
in each form it may be printed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import decimal
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

MASK: Final = "***"
_MAX_DEPTH: Final = 64
_MIN_LEN: Final = 4  # shorter values would mask ordinary words; Secret errors are also cut below
_INVALID_VALUE = re.compile(r'(Invalid value: )("(?:[^"\\]|\\.)*"|\S+)')
_TYPED_VALUE = re.compile(r"(valueUnstructured\{Value:).*\}", re.DOTALL)
"""Server-side apply's "expected string, got &value.valueUnstructured{Value:12345678}": the
value as Go prints it, whatever its length (to the last brace: it may nest)."""


def secret_values(obj: Mapping[str, Any]) -> list[str]:
    """Every string of a Secret's data that must never be printed (empty for other kinds): each
    value of ``data`` and ``stringData`` whatever its type — a string as given (and ``data``'s
    decoded), any other value in every form an error message may print it (``printed_forms``)."""
    if obj.get("kind") != "Secret":
        return []
    values: list[str] = []
    for field in ("data", "stringData"):
        data = obj.get(field)
        if not isinstance(data, Mapping):
            values += printed_forms(data)  # a malformed field is echoed whole
            continue
        for v in data.values():
            values += printed_forms(v)
            if field == "data" and isinstance(v, str):
                with contextlib.suppress(binascii.Error, UnicodeDecodeError):
                    values.append(base64.b64decode(v, validate=True).decode())
    return values


def printed_forms(value: Any, _depth: int = 0) -> list[str]:
    """The ways ``value`` may come back in an error message: a string as is; a number or a
    boolean as Python, JSON and Go's ``%v`` print it (``12345678``, ``1.2345678e+07``); a list
    or map as its leaves and its JSON (to ``_MAX_DEPTH`` levels: deeper is hostile input, and a
    Secret's message loses its echoed value anyway, ``_TYPED_VALUE``)."""
    if value is None or _depth > _MAX_DEPTH:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return [str(value).lower(), str(value)]
    if isinstance(value, int):
        return [str(value)]
    if isinstance(value, float):
        return [repr(value), *_go_float(value)]
    if isinstance(value, Mapping):
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return [str(value)]
    forms = [f for item in items for f in printed_forms(item, _depth + 1)]
    with contextlib.suppress(TypeError, ValueError, RecursionError):
        forms += [json.dumps(value, separators=(",", ":")), json.dumps(value)]
    return forms


def _go_float(v: float) -> list[str]:
    """``v`` as Go's ``fmt`` prints a float64 with ``%v`` (``strconv`` 'g', shortest): plain up
    to six integer digits, else exponent form."""
    if not math.isfinite(v):
        return []
    _, digits, exponent = decimal.Decimal(repr(abs(v))).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite
    ds = "".join(map(str, digits))
    dp = 1 if ds == "0" else len(ds) + exponent  # digits before the decimal point
    neg = "-" if v < 0 else ""
    exp = dp - 1
    if exp < -4 or exp >= 6:
        mantissa = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return [f"{neg}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"]
    if dp <= 0:
        return [f"{neg}0.{'0' * -dp}{ds}"]
    if dp >= len(ds):
        return [f"{neg}{ds}{'0' * (dp - len(ds))}"]
    return [f"{neg}{ds[:dp]}.{ds[dp:]}"]


def scrub(text: str, values: Iterable[str], *, is_secret: bool = False) -> str:
    """``text`` with every secret value masked; for Secrets also every ``Invalid value: ...``."""
    for v in sorted({v for v in values if len(v) >= _MIN_LEN}, key=len, reverse=True):
        text = text.replace(v, MASK)
    if is_secret:
        text = _INVALID_VALUE.sub(rf"\1{MASK}", text)
        text = _TYPED_VALUE.sub(rf"\1{MASK}}}", text)
    return text


def scrub_for(obj: Mapping[str, Any], text: str) -> str:
    return scrub(text, secret_values(obj), is_secret=obj.get("kind") == "Secret")
