"""Keep Secret values out of every message driftbus writes (DESIGN §6, CVE-2022-24449's class).

API error messages can echo the value that failed validation. Before any text about an object
reaches a status event, a decision record or a log line, the values of that object's Secret data
are replaced — both as sent (base64 in ``data``) and decoded, and ``stringData`` as given.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

MASK: Final = "***"
_MIN_LEN: Final = 4  # shorter values would mask ordinary words; Secret errors are also cut below
_INVALID_VALUE = re.compile(r'(Invalid value: )("(?:[^"\\]|\\.)*"|\S+)')


def secret_values(obj: Mapping[str, Any]) -> list[str]:
    """Every string of a Secret's data that must never be printed (empty for other kinds)."""
    if obj.get("kind") != "Secret":
        return []
    values: list[str] = []
    for field in ("data", "stringData"):
        data = obj.get(field)
        if not isinstance(data, Mapping):
            continue
        for v in data.values():
            if not isinstance(v, str):
                continue
            values.append(v)
            if field == "data":
                with contextlib.suppress(binascii.Error, UnicodeDecodeError):
                    values.append(base64.b64decode(v, validate=True).decode())
    return values


def scrub(text: str, values: Iterable[str], *, is_secret: bool = False) -> str:
    """``text`` with every secret value masked; for Secrets also every ``Invalid value: ...``."""
    for v in sorted({v for v in values if len(v) >= _MIN_LEN}, key=len, reverse=True):
        text = text.replace(v, MASK)
    if is_secret:
        text = _INVALID_VALUE.sub(rf"\1{MASK}", text)
    return text


def scrub_for(obj: Mapping[str, Any], text: str) -> str:
    return scrub(text, secret_values(obj), is_secret=obj.get("kind") == "Secret")
