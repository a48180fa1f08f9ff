"""Text to manifests, within the input limits: one file's YAML or JSON documents, ``List``s
flattened, each object keyed and counted against the bundle's ``InputLimits`` (``Tally``) as it
is read, so nothing over a limit is ever expanded. ``load`` finds the files and renders; this
reads them.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from typing import Any

import orjson

from services.core import kyaml
from services.core.manifest import ManifestError, key_of
from services.inputs.limits import InputLimits, LimitError, measure, setting_name


class InputError(ValueError):
    """Bad input for a publish; one clear line naming where and why."""


class TransientInputError(InputError):
    """The input could not be read for a reason that may pass (a tool timed out, the disk, a
    process that could not start): the same input may read fine when tried again."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    obj: dict[str, Any]
    where: str  # "path/file.yaml#2" (document index) for messages


@dataclasses.dataclass(frozen=True)
class Loaded:
    manifests: list[Manifest]
    revision: str = ""  # set for Git sources (the commit SHA)
    source: str = ""
    where: str = ""
    """What was read, for messages: the paths as given, or ``repo@commit:path``."""
    files: int = 0
    """How many files were read (manifest files, not counting skipped ones)."""

    def content_revision(self) -> str:
        """Same manifests, same revision: republishing unchanged content is recognisably the
        same."""
        digest = hashlib.sha256(
            orjson.dumps([m.obj for m in self.manifests], option=orjson.OPT_SORT_KEYS)
        )
        return "sha256:" + digest.hexdigest()[:16]


def _documents(text: str, name: str) -> Iterator[tuple[int, Any]]:
    if name.endswith(".json"):
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{name}: invalid JSON: {exc}") from None
        docs = doc if isinstance(doc, list) else [doc]
        yield from enumerate(docs)
        return
    try:
        yield from kyaml.documents(text)
    except kyaml.DecodeError as exc:
        line = f":{exc.line}" if exc.line is not None else ""
        raise InputError(f"{name}{line}: invalid YAML: {exc.problem}") from None


class Tally:
    """What one bundle has read so far, against its ``InputLimits``: files, objects, bytes."""

    def __init__(self, limits: InputLimits | None = None) -> None:
        self.limits = limits or InputLimits.from_env()
        self.files = 0
        self.objects = 0
        self.bytes = 0

    def file(self, name: str, size: int) -> None:
        """Count one file of ``size`` bytes (refused over the file or files limits)."""
        lim = self.limits
        if size > lim.max_file_bytes:
            raise InputError(
                f"{name}: {size:,} bytes, over the {lim.max_file_bytes:,}-byte limit for one "
                f"file ({setting_name('max_file_bytes')})"
            )
        self.files += 1
        if self.files > lim.max_files:
            raise InputError(
                f"{name}: over the limit of {lim.max_files:,} files per bundle "
                f"({setting_name('max_files')})"
            )

    def add(self, where: str, key: object, size: int) -> None:
        """Count one object of ``size`` bytes as JSON (refused over the object, objects and
        bundle limits)."""
        lim = self.limits
        if size > lim.max_object_bytes:
            raise InputError(
                f"{where}: {key}: {size:,} bytes as JSON, over the {lim.max_object_bytes:,}-byte "
                f"limit for one object ({setting_name('max_object_bytes')}; split it: a "
                "ConfigMap or Secret holds at most 1 MiB anyway)"
            )
        self.objects += 1
        self.bytes += size
        if self.objects > lim.max_objects:
            raise InputError(
                f"{where}: {key}: over the limit of {lim.max_objects:,} objects per bundle "
                f"({setting_name('max_objects')})"
            )
        if self.bytes > lim.bundle_max_bytes:
            raise InputError(
                f"{where}: {key}: the bundle reaches {self.bytes:,} bytes as JSON, over the "
                f"{lim.bundle_max_bytes:,}-byte limit for one bundle "
                f"({setting_name('bundle_max_bytes')})"
            )


def parse(text: str, name: str, tally: Tally | None = None) -> list[Manifest]:
    """The objects of one file's ``text`` (``name`` for messages), counted in ``tally`` (a
    bundle of this file alone when not given)."""
    tally = tally or Tally()
    if len(text) * 4 > tally.limits.max_file_bytes:  # cheap first; exact below
        size = len(text.encode(errors="surrogatepass"))
        if size > tally.limits.max_file_bytes:
            tally.file(name, size)
    out: list[Manifest] = []
    for i, doc in _documents(text, name):
        where = f"{name}#{i}"
        try:
            measure(doc, tally.limits, f"{where}: {_label(doc, where)}")
        except LimitError as exc:
            raise InputError(str(exc)) from None
        _flatten(doc, where, out, tally)
    return out


def _label(doc: Any, where: str) -> str:
    """How a refusal names a whole document: its object's key, or its kind, or its type."""
    try:
        return str(key_of(doc, where))
    except ManifestError:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        return kind if isinstance(kind, str) and kind else f"a {type(doc).__name__}"


def _flatten(doc: Any, where: str, out: list[Manifest], tally: Tally) -> None:
    """A ``List`` (any kind ending in ``List`` with ``items``: ``v1/List``, ``ConfigMapList``)
    stands for its items, recursively, as kubectl's FlattenListVisitor has it."""
    kind = doc.get("kind") if isinstance(doc, dict) else None
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc["items"] or []
        if not isinstance(items, list):
            raise InputError(f"{where}: {kind}.items is not a list")
        for j, item in enumerate(items):
            _flatten(item, f"{where}.items[{j}]", out, tally)
        return
    try:
        key = key_of(doc, where)
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    # measured with its document: bounded, so encoding it costs at most that
    tally.add(where, key, len(orjson.dumps(doc)))
    out.append(Manifest(doc, where))
