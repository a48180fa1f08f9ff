"""Encoding and decoding of wire messages: the one place bytes become typed messages.

Decoders are built once per type (msgspec compiles them). A message that fails to decode raises
``WireError`` naming the expected schema and msgspec's path to the bad field, so a service can
report it and carry on instead of crashing.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from schemas.decision import DecisionRecord, DecisionRecords
from schemas.messages import (
    AppliedEvent,
    AppliedFacts,
    ApplyIntent,
    Bundle,
    BundleStatus,
    DeleteIntent,
    ObjectStatus,
    ServerEvent,
    ServerFacts,
    SourceStatus,
)
from schemas.subjects import BATCH_TOKEN, SubjectError, decode_token

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


def server_events(subject: str, data: bytes) -> list[ServerEvent]:
    """The server facts a SERVER message carries, in order: a batch (``ServerFacts``, on a
    ``batch_subject``) or one object's fact (the per-object subject watchers used before
    issue 44). WireError for bytes that are neither, and for a fact of another cluster than the
    subject's (a watcher may publish on its own cluster's subjects only)."""
    return _facts(subject, data, ServerEvent, ServerFacts)


def applied_events(subject: str, data: bytes) -> list[AppliedEvent]:
    """The applied facts an APPLIED message carries, in order: a batch (``AppliedFacts``, one
    applier's report) or one object's fact (appliers before issue 44); errors as
    ``server_events``."""
    return _facts(subject, data, AppliedEvent, AppliedFacts)


def decision_records(subject: str, data: bytes) -> list[DecisionRecord]:
    """The decision records a DECISIONS message carries, in order: a shelf's batch
    (``DecisionRecords``) or one object's record (planners before issue 44); errors as
    ``server_events``."""
    return _facts(subject, data, DecisionRecord, DecisionRecords)


Fact = TypeVar("Fact", ServerEvent, AppliedEvent, DecisionRecord)


def _facts(
    subject: str,
    data: bytes,
    one: type[Fact],
    many: type[ServerFacts | AppliedFacts | DecisionRecords],
) -> list[Fact]:
    parts = subject.split(".")
    # a batch's subject is <family>.<c>.batch.<id> (decisions: .batch.<shelf>.<id>); an
    # object's has four key tokens, and a Job's begins with its group, "batch", too
    if parts[3:4] == [BATCH_TOKEN] and len(parts) == (6 if many is DecisionRecords else 5):
        batch = decode(data, many)
        events: list[Fact] = (
            batch.records if isinstance(batch, DecisionRecords) else batch.events  # type: ignore[assignment]
        )
    else:
        events = [decode(data, one)]
    try:
        cluster = decode_token(parts[2]) if len(parts) > 2 else ""
    except SubjectError:
        cluster = ""
    for ev in events:
        if ev.cluster != cluster:
            raise WireError(f"a fact of cluster {ev.cluster!r} on {subject}")
    return events


def _name(kind: object) -> str:
    return getattr(kind, "__name__", None) or str(kind)


__all__ = [
    "AppliedEvent",
    "AppliedFacts",
    "ApplyIntent",
    "Bundle",
    "BundleStatus",
    "DecisionRecord",
    "DeleteIntent",
    "ObjectStatus",
    "ServerEvent",
    "ServerFacts",
    "SourceStatus",
    "WireError",
    "applied_events",
    "decision_records",
    "decode",
    "encode",
    "server_events",
]
