"""One setting kept on the bus, as a ``Document[T]``: its file read and checked with ``FILE:LINE``
errors, its stored form written and read back, and the last good value of its stored versions
(pure).

The tenants file, the windows file and a notifications file share one shape: one YAML or JSON map,
turned into a msgspec Struct ``T`` and checked beyond what the Struct's types say; stored on the
bus as JSON and checked again when read back, since anything may have been written past the CLI.
A setting brings only what is its own — the Struct, its name in messages, its checks (and, if
msgspec's words are not enough, its own conversion); the reading, the lines, the stored form and
the last good value are here, once.

A problem found by a check is a ``Problem`` carrying where in the document it is (keys and list
indexes from the root): a file's error then starts with ``FILE:LINE: `` (the line of the deepest
part of that path the file has), a stored value's with what it is (``stored windows: ``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any, Final, Generic, TypeVar

import msgspec
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from services.core import kyaml

T = TypeVar("T", bound=msgspec.Struct)

Path = tuple[str | int, ...]
"""Where in a document: keys and list indexes, from its root."""

_AT: Final = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_STEP: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


class Problem(ValueError):
    """A document that cannot be used: one line, ``FILE:LINE: `` first once known; ``path`` is
    where in the document (``()``: the whole of it, or unknown). Each setting's own error
    (``PolicyError``, ``WindowsError``, ``ConfigError``) is one."""

    def __init__(self, message: str, path: Path = ()) -> None:
        super().__init__(message)
        self.path = path


def _convert(kind: type[T], raw: dict[str, Any]) -> T:
    return msgspec.convert(raw, kind)


def _no_check(value: Any) -> None:
    return None


@dataclasses.dataclass(frozen=True)
class Document(Generic[T]):
    """One kind of setting: how its file is read and checked, and how it is stored."""

    kind: type[T]
    """The Struct a document is (its defaults: the empty document)."""
    error: type[Problem]
    """The setting's own error, raised for every problem."""
    name: str
    """The file in words: ``the windows file``."""
    keys: str
    """What its map holds, in words (``lockdown, tenants``): said when it is not a map."""
    stored: str
    """A stored value in words, first in its errors: ``stored windows``."""
    check: Callable[[T], None] = _no_check
    """Everything beyond the Struct's types: raises ``error`` (a ``Problem``) with its path."""
    convert: Callable[[type[T], dict[str, Any]], T] = _convert
    """The file's map as a ``T``: ``msgspec.convert``, or the setting's own (which raises a
    ``Problem`` with its path, in its own words)."""

    # --- a file ---------------------------------------------------------------------------

    def load(self, text: str | bytes, where: str) -> T:
        """The document of a file (YAML or JSON) named ``where``, checked; ``error`` naming
        ``where`` and, when it can be found, the line, if it cannot be used."""
        try:
            text, docs = kyaml.file_documents(text, where)
        except kyaml.FileTextError as exc:
            raise self.error(str(exc)) from None
        if not docs:
            return self.kind()
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))

        def at(node: Node, path: Path) -> str:
            line = line_of(node, path)
            return f"{where}:{line}: " if line is not None else f"{where}: "

        if len(docs) > 1:
            second = nodes[docs[1][0]]
            raise self.error(f"{at(second, ())}a second document: {self.name} is one map")
        index, raw = docs[0]
        root = nodes[index]
        if not isinstance(raw, dict):
            raise self.error(
                f"{at(root, ())}{self.name} must be a map ({self.keys}), not {kind_of(raw)}"
            )
        try:
            value = self.convert(self.kind, raw)
            self.check(value)
        except msgspec.ValidationError as exc:
            raise self.error(f"{at(root, path_of(str(exc)))}{exc}") from None
        except Problem as exc:
            raise self.error(f"{at(root, exc.path)}{exc}") from None
        return value

    # --- stored on the bus ----------------------------------------------------------------

    def dump(self, value: T) -> bytes:
        """The document as it is stored on the bus: JSON, maps sorted by key."""
        return msgspec.json.encode(value, order="deterministic")

    def decode(self, data: bytes) -> T:
        """The document of stored bytes (``dump``'s; empty: the empty document), checked
        again; ``error`` starting with ``stored`` if they are not a usable one."""
        if not data:
            return self.kind()
        try:
            value = msgspec.json.decode(data, type=self.kind)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
            raise self.error(f"{self.stored}: {exc}") from None
        try:
            self.check(value)
        except Problem as exc:
            raise self.error(f"{self.stored}: {exc}") from None
        return value

    def after(self, good: Good[T], data: bytes) -> Good[T]:
        """What is held once the stored version ``data`` (a removal: empty) is read after
        ``good``: it, when usable; else ``good``'s value still, and why not."""
        try:
            return Good(self.decode(data))
        except Problem as exc:
            return Good(good.value, str(exc))

    def last_good(self, stored: Iterable[bytes]) -> Good[T]:
        """What is held after reading the stored versions ``stored``, oldest first."""
        good = Good(self.kind())
        for data in stored:
            good = self.after(good, data)
        return good


@dataclasses.dataclass(frozen=True)
class Good(Generic[T]):
    """The last good value of a setting, and why the latest stored version is not it."""

    value: T
    problem: str = ""
    """Why the latest stored version is unusable ("" when it is ``value``)."""


# --- where in the file ----------------------------------------------------------------------


def path_of(message: str) -> Path:
    """The path a msgspec ValidationError names (``... - at `$.windows[0].kind```)."""
    found = _AT.search(message)
    if found is None:
        return ()
    return tuple(m[1] if m[1] is not None else int(m[2]) for m in _STEP.finditer(found["path"]))


def line_of(node: Node, path: Path) -> int | None:
    """The 1-based line of the deepest part of ``path`` found under ``node`` (a key's own line
    for a map entry). Best effort: keys a merge (``<<``) brings in are not followed."""
    line = node.start_mark.line + 1 if path == () else None
    for step in path:
        if isinstance(node, MappingNode) and isinstance(step, str):
            entry = next(
                ((k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == step),
                None,
            )
            if entry is None:
                break
            line, node = entry[0].start_mark.line + 1, entry[1]
        elif isinstance(node, SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line


def kind_of(value: Any) -> str:
    """What a decoded value is, in words."""
    words = {dict: "a map", list: "a list", str: "a string", type(None): "null"}
    return words.get(type(value), type(value).__name__)
