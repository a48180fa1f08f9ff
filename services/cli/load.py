"""Reading manifests for ``driftbus publish`` and ``driftbus plan``.

Directories (recursive, ``*.yaml``/``*.yml``/``*.json``), single files, ``.tar.gz`` tarballs,
and a directory of a Git repository at a given ref (the commit SHA becomes the revision). Every
problem is an ``InputError`` naming the file and line or document index, and nothing is
published when there is any: a half-published bundle would prune the other half.
"""

from __future__ import annotations

import dataclasses
import io
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from schemas.subjects import ObjectKey
from services.core.manifest import (
    MAX_EXPANDED_NODES,
    ManifestError,
    check_size,
    expanded_nodes,
    key_of,
)

SUFFIXES = (".yaml", ".yml", ".json")


class InputError(ValueError):
    """Bad input for a publish; one clear line naming where and why."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    obj: dict[str, Any]
    where: str  # "path/file.yaml#2" (document index) for messages


@dataclasses.dataclass(frozen=True)
class Loaded:
    manifests: list[Manifest]
    revision: str = ""  # set for Git sources (the commit SHA)
    source: str = ""


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
        for i, doc in enumerate(yaml.safe_load_all(text)):
            if doc is not None:
                yield i, doc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InputError(f"{name}{line}: invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: invalid YAML: {exc}") from None


def parse(text: str, name: str) -> list[Manifest]:
    out = []
    for i, doc in _documents(text, name):
        where = f"{name}#{i}"
        if isinstance(doc, dict) and doc.get("kind", "").endswith("List") and "items" in doc:
            for j, item in enumerate(doc.get("items") or []):
                out.append(_checked(item, f"{where}.items[{j}]"))
            continue
        out.append(_checked(doc, where))
    return out


def _checked(doc: Any, where: str) -> Manifest:
    try:
        key = key_of(doc, where)
        if expanded_nodes(doc) > MAX_EXPANDED_NODES:
            raise ManifestError(
                f"{where}: {key} expands to over {MAX_EXPANDED_NODES:,} values through YAML "
                "aliases (an alias bomb?)"
            )
        check_size(orjson.dumps(doc), f"{where}: {key}")
    except ManifestError as exc:
        raise InputError(str(exc)) from None
    return Manifest(doc, where)


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in SUFFIXES and not any(x.startswith(".") for x in p.parts):
            yield p


def load_paths(paths: list[str]) -> Loaded:
    manifests: list[Manifest] = []
    for raw in paths:
        path = Path(raw)
        if raw.endswith((".tar.gz", ".tgz")):
            manifests += _load_tarball(path)
            continue
        for f in _files(path):
            try:
                text = f.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{f}: cannot read: {exc}") from None
            manifests += parse(text, str(f))
    return Loaded(_no_duplicates(manifests), source=" ".join(paths))


def _load_tarball(path: Path) -> list[Manifest]:
    out: list[Manifest] = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if not member.isfile() or not member.name.endswith(SUFFIXES):
                    continue
                data = tar.extractfile(member)
                if data is None:
                    continue
                out += parse(io.TextIOWrapper(data).read(), f"{path}:{member.name}")
    except (tarfile.TarError, OSError) as exc:
        raise InputError(f"{path}: not a readable .tar.gz: {exc}") from None
    return out


def load_git(repo: str, ref: str, subdir: str = "") -> Loaded:
    """Manifests under ``subdir`` of ``repo`` at ``ref``, read with ``git`` (no checkout)."""

    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
        if res.returncode != 0:
            raise InputError(f"git {' '.join(args)} in {repo}: {res.stderr.strip()}")
        return res.stdout

    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    listing = git("ls-tree", "-r", "--name-only", commit, "--", subdir or ".")
    manifests: list[Manifest] = []
    for name in sorted(listing.splitlines()):
        if name.endswith(SUFFIXES):
            manifests += parse(git("show", f"{commit}:{name}"), f"{repo}@{commit[:12]}:{name}")
    return Loaded(_no_duplicates(manifests), revision=commit, source=f"{repo}@{commit}")


def _no_duplicates(manifests: list[Manifest]) -> list[Manifest]:
    seen: dict[ObjectKey, str] = {}
    for m in manifests:
        key = key_of(m.obj, m.where)
        if key in seen:
            raise InputError(f"{key} is defined twice: {seen[key]} and {m.where}")
        seen[key] = m.where
    return manifests
