"""How much input one publish, plan or source round may read (issue 30, item 4).

Every limit is counted on what the input *becomes*, not on its text: a YAML alias is counted
each time it occurs, so a small file that expands to gigabytes is refused before anything
expands it. The defaults leave room many times over the largest real installs we carry in
``../shared/corpus/`` (measured: a file of 1.9 MB, a document and an object of 343 kB as JSON,
59 objects and 634 kB of JSON in one bundle, 38 levels of nesting — all Argo CD's
``install.yaml`` or cert-manager's CRDs). Each is a setting (``DRIFTBUS_MAX_*``; ``publish`` and
``plan`` take the flags too) and each refusal names the file, the object and the setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

import orjson

from services.common import settings
from services.common.settings import SettingsError, setting
from services.core.manifest import BUNDLE_LIMIT_SETTING, DEFAULT_BUNDLE_MAX_BYTES

JSON_DEPTH_CEILING: Final = 200
"""orjson refuses to encode a document nested 255 levels or more, and every stage after the
loader encodes: ``max_depth`` may not be raised past this."""

OBJECT_BYTES_CEILING: Final = 1_000_000
"""One object travels as one intent in one NATS message; the planner refuses anything larger
(``manifest.MAX_MANIFEST_BYTES``), so ``max_object_bytes`` may not be raised past it."""

MiB: Final = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class InputLimits:
    max_file_bytes: int = setting(
        32 * MiB, "bytes of one file, tarball member, standard input or rendered output"
    )
    max_document_bytes: int = setting(
        32 * MiB, "bytes of one YAML/JSON document as JSON, every alias expanded (a List's items)"
    )
    max_object_bytes: int = setting(
        OBJECT_BYTES_CEILING, "bytes of one object as JSON (at most 1,000,000: one message)"
    )
    max_objects: int = setting(50_000, "objects in one bundle")
    bundle_max_bytes: int = setting(
        DEFAULT_BUNDLE_MAX_BYTES,
        "bytes of all of a bundle's objects as JSON: the bus's limit of the same name (one "
        "setting: what a publish may read is what the planner may fetch)",
        env=BUNDLE_LIMIT_SETTING,
    )
    max_depth: int = setting(100, "levels of nesting of one document (at most 200)")
    max_expanded_nodes: int = setting(
        1_000_000, "values, lists and maps of one document, every alias expanded"
    )
    max_files: int = setting(20_000, "files (or tarball members) read for one bundle")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) < 1:
                raise SettingsError(f"{env_name(f.name)}={getattr(self, f.name)}: at least 1")
        if self.max_depth > JSON_DEPTH_CEILING:
            raise SettingsError(
                f"{env_name('max_depth')}={self.max_depth}: at most {JSON_DEPTH_CEILING}"
            )
        if self.max_object_bytes > OBJECT_BYTES_CEILING:
            raise SettingsError(
                f"{env_name('max_object_bytes')}={self.max_object_bytes}: at most "
                f"{OBJECT_BYTES_CEILING:,} (one object is one message)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, args: Any = None) -> InputLimits:
        """The limits the environment (and ``args``, flags of ``add_arguments``) set."""
        return settings.load(cls, args, environ=environ)


def env_name(field: str) -> str:
    """The environment variable of a limit, as refusals name it."""
    named = {f.name: f.metadata.get("env") for f in dataclasses.fields(InputLimits)}
    return named.get(field) or f"DRIFTBUS_{field.upper()}"


def setting_name(field: str) -> str:
    """How a refusal names the setting to raise: the variable (``publish`` also takes the
    flag of the same name)."""
    return env_name(field)


class LimitError(ValueError):
    """Input over one of the ``InputLimits``: one line naming where, what and the setting."""


@dataclasses.dataclass(frozen=True)
class Measured:
    """A value's size as JSON with every alias expanded: bytes, values, levels of nesting."""

    bytes: int
    nodes: int
    depth: int


def measure(doc: Any, limits: InputLimits, what: str = "the document") -> Measured:
    """``doc``'s size as the JSON every later stage writes, each shared (aliased) subtree
    counted wherever it occurs, without building that JSON: linear in the parsed size, and
    stopped as soon as ``limits`` (document bytes, values, depth) are passed. A value that
    contains itself (a recursive alias) is refused: it has no end."""
    memo: dict[int, Measured] = {}
    busy: set[int] = set()

    def over(field: str, text: str) -> LimitError:
        return LimitError(f"{what} {text} ({setting_name(field)})")

    def walk(node: Any, level: int) -> Measured:
        if isinstance(node, dict):
            children: Any = node.items()
        elif isinstance(node, list):
            children = ((None, v) for v in node)
        else:
            return Measured(_scalar_bytes(node, what), 1, 0)
        known = memo.get(id(node))
        if known is None and id(node) in busy:
            raise LimitError(f"{what} refers to itself through a YAML alias (it has no end)")
        if level > limits.max_depth or (known and level + known.depth - 1 > limits.max_depth):
            raise over("max_depth", f"is nested over {limits.max_depth} levels deep")
        if known is not None:
            return known
        busy.add(id(node))
        size, nodes, depth, count = 2, 1, 0, 0
        for key, value in children:
            child = walk(value, level + 1)
            count += 1
            size += child.bytes + (_scalar_bytes(key, what) + 1 if key is not None else 0)
            nodes += child.nodes
            depth = max(depth, child.depth)
            if size > limits.max_document_bytes:
                raise over(
                    "max_document_bytes",
                    f"expands to over {limits.max_document_bytes:,} bytes as JSON (every YAML "
                    "alias counted where it occurs): the limit for one document",
                )
            if nodes > limits.max_expanded_nodes:
                raise over(
                    "max_expanded_nodes",
                    f"expands to over {limits.max_expanded_nodes:,} values through YAML "
                    "aliases (an alias bomb?): the limit for one document",
                )
        busy.discard(id(node))
        memo[id(node)] = got = Measured(size + max(count - 1, 0), nodes, depth + 1)
        return got

    return walk(doc, 1)


def _scalar_bytes(value: Any, what: str) -> int:
    if value is None:
        return 4
    if value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, str):
        try:
            return len(orjson.dumps(value))
        except orjson.JSONEncodeError:  # YAML's "\ud83d" escapes: a lone surrogate, no UTF-8
            raise LimitError(
                f"{what}: the string {value[:40]!r} holds a lone UTF-16 surrogate (an escaped "
                "emoji?): it is not text"
            ) from None
    if isinstance(value, int | float):
        try:
            return len(orjson.dumps(value))
        except orjson.JSONEncodeError:  # an integer beyond 64 bits: JSON has no such number
            raise LimitError(f"{what}: the number {value} does not fit 64 bits") from None
    raise LimitError(f"{what}: a {type(value).__name__} has no JSON form")
