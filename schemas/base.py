"""What every wire message shares: the base Struct with its schema tag, and the common field
types (SHA, name, raw object)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

Sha = Annotated[str, Meta(pattern="^[0-9a-f]{64}$", description="SHA-256, lower-case hex")]
Name = Annotated[str, Meta(min_length=1, max_length=253)]
Count = Annotated[int, Meta(ge=0, le=2**63 - 1)]
"""A count: what JSON readers that take 64-bit integers (orjson, Go) can read back."""
RawObject = Annotated[
    dict[str, Any], Meta(description="a Kubernetes object as raw JSON (apiVersion, kind, ...)")
]


def tag(name: str, version: int = 1) -> str:
    return f"driftbus.{name}/v{version}"


class Message(msgspec.Struct, frozen=True, forbid_unknown_fields=False, tag_field="schema"):
    """Base of all messages. Unknown fields are ignored so a newer minor writer stays readable."""
