"""Object keys and the one reversible encoding of them into NATS subject tokens and KV keys.

A subject token may not contain ``.``, ``*``, ``>`` or whitespace, and a KV key may only contain
``[-/_=.A-Za-z0-9]``. Kubernetes values break both: API groups are dotted, RBAC names contain
``:`` (``system:aggregate-to-admin``), the core group and cluster-scoped namespaces are empty.

Encoding, per value: ``A-Z a-z 0-9 - _`` pass through; every other byte of the UTF-8 form becomes
``=XX`` (upper-case hex). An empty value is the single token ``=``, which no non-empty value can
encode to (escapes always carry two hex digits). The mapping is injective, so distinct keys never
collide, and ``decode_token(encode_token(v)) == v`` for every string.
"""

from __future__ import annotations

import re
import sys
from typing import Final

import msgspec

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_ESCAPE: Final = [chr(b) if b in _SAFE else f"={b:02X}" for b in range(256)]
_EMPTY: Final = "="
_TOKEN_RE: Final = re.compile(r"(?:[A-Za-z0-9_-]|=[0-9A-F]{2})+")


class SubjectError(ValueError):
    """A value or subject cannot be encoded or decoded; the message says which and why."""


class ObjectKey(msgspec.Struct, frozen=True, order=True, forbid_unknown_fields=True):
    """Identity of an object in a cluster. The API version is not part of it (DESIGN §2)."""

    group: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        # Kind/ns/name: how every message about an object starts (STYLE.md).
        gk = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{gk}/{self.namespace}/{self.name}" if self.namespace else f"{gk}/{self.name}"

    @classmethod
    def of(cls, obj: dict[str, object]) -> ObjectKey:
        """Key of a raw object; raises SubjectError when apiVersion, kind or name is missing."""
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        namespace = (meta.get("namespace") if isinstance(meta, dict) else None) or ""
        if not isinstance(api_version, str) or not api_version:
            raise SubjectError(f"{kind or '?'}/{name or '?'}: apiVersion is missing")
        if not isinstance(kind, str) or not kind:
            raise SubjectError(f"?/{name or '?'}: kind is missing")
        if name is not None and not isinstance(name, str):
            raise SubjectError(f"{kind}/?: metadata.name must be a string, not {_scalar(name)}")
        if not isinstance(name, str) or not name:
            raise SubjectError(f"{kind}/?: metadata.name is missing")
        if not isinstance(namespace, str):
            raise SubjectError(
                f"{kind}/{name}: metadata.namespace must be a string, not {_scalar(namespace)}"
            )
        return cls.shared(api_version.rpartition("/")[0], kind, namespace, name)

    @classmethod
    def shared(cls, group: str, kind: str, namespace: str, name: str) -> ObjectKey:
        """The key, its group, kind and namespace one copy each for the whole process: they
        repeat across thousands of cached keys (a key read back from a checkpoint held its
        own: 10 MiB of a 100,000-object restart)."""
        return cls(sys.intern(group), sys.intern(kind), sys.intern(namespace), name)


def _scalar(value: object) -> str:
    """How a misread value is shown: YAML 1.1 reads unquoted ``y``, ``no``, ``on``, ``0755`` as
    booleans and numbers, and the fix is to quote them."""
    shown = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
    hint = (
        " (YAML reads it unquoted as that; quote it)"
        if isinstance(value, bool | int | float)
        else ""
    )
    return f"{type(value).__name__} {shown}{hint}"


def encode_token(value: str) -> str:
    if not value:
        return _EMPTY
    return "".join([_ESCAPE[b] for b in value.encode("utf-8")])


def decode_token(token: str) -> str:
    if token == _EMPTY:
        return ""
    if not _TOKEN_RE.fullmatch(token):
        raise SubjectError(f"not an encoded subject token: {token!r}")
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "=":
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(token[i]))
            i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise SubjectError(f"encoded subject token is not UTF-8: {token!r}") from None


def key_tokens(key: ObjectKey) -> str:
    return ".".join(
        (
            encode_token(key.group),
            encode_token(key.kind),
            encode_token(key.namespace),
            encode_token(key.name),
        )
    )


def parse_key_tokens(tokens: list[str]) -> ObjectKey:
    if len(tokens) != 4:
        raise SubjectError(f"an object key is 4 tokens, got {len(tokens)}: {'.'.join(tokens)!r}")
    group, kind, namespace, name = (decode_token(t) for t in tokens)
    return ObjectKey(group=group, kind=kind, namespace=namespace, name=name)
