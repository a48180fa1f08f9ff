"""Encoding and decoding of wire messages: the one place bytes become typed messages.

Decoders are built once per type (msgspec compiles them). A message that fails to decode raises
``WireError`` naming the expected schema and msgspec's path to the bad field, so a service can
report it and carry on instead of crashing.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from schemas.decision import DecisionRecord
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    Bundle,
    BundleStatus,
    DeleteIntent,
    ObjectStatus,
    ServerEvent,
    SourceStatus,
)

T = TypeVar("T")

_ENCODER: Final = msgspec.json.Encoder()
_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {}


class WireError(ValueError):
    """Bytes on a subject are not the message its contract promises."""


def encode(message: msgspec.Struct) -> bytes:
    return _ENCODER.encode(message)


def decode(data: bytes, kind: type[T]) -> T:
    """Decode ``data`` as ``kind`` (a Struct or a union of Structs such as ``Intent``)."""
    decoder = _DECODERS.get(kind)
    if decoder is None:
        decoder = _DECODERS[kind] = msgspec.json.Decoder(kind)
    try:
        result: T = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise WireError(f"not a valid {_name(kind)} message: {exc}") from None
    except UnicodeDecodeError as exc:  # msgspec lets invalid UTF-8 inside strings through as this
        raise WireError(f"not a valid {_name(kind)} message: invalid UTF-8: {exc}") from None
    except RecursionError:  # free-form fields (manifests) nested thousands deep
        raise WireError(f"not a valid {_name(kind)} message: nested too deeply") from None
    return result


def _name(kind: object) -> str:
    return getattr(kind, "__name__", None) or str(kind)


__all__ = [
    "AppliedEvent",
    "ApplyIntent",
    "Bundle",
    "BundleStatus",
    "DecisionRecord",
    "DeleteIntent",
    "ObjectStatus",
    "ServerEvent",
    "SourceStatus",
    "WireError",
    "decode",
    "encode",
]
