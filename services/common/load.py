"""Reading manifests for ``driftbus publish``, ``driftbus plan`` and ``driftbus source``.

Directories, single files, ``.tar.gz`` tarballs, standard input and Helm charts (a Git
repository at a commit is read through these: ``gitrepo``). Kustomizations and charts are
rendered by the kubectl and helm ``locate`` names: by default one found on this machine
(``services.common.binaries``); the CLI passes one that builds a missing binary. Every problem
is an ``InputError`` naming the file and line or document index, and nothing is published when
there is any: a half-published bundle would prune the other half.

Which files a path loads — what ``kubectl apply -f PATH -R`` loads, with one difference:

* a file named on the command line is read whatever its name or extension (so is a hidden one);
* a directory is read **recursively** (kubectl needs ``-R``; driftbus always recurses), in the
  order of the sorted paths, taking the files ending in ``.yaml``, ``.yml`` or ``.json``
  (kubectl's ``FileExtensions``); symbolic links to files are read, symbolic links to
  directories are not followed (as ``filepath.Walk`` in kubectl);
* the difference: files and directories whose name starts with ``.`` **below** the given
  directory are skipped (``.git/``, ``.github/workflows/*.yml``, editor and AppleDouble
  ``._x.yaml`` files). kubectl skips nothing, but it does not recurse unless asked; a recursive
  walk of a repository would otherwise publish CI configuration as manifests. Only the path
  *relative to the given directory* is judged: ``..``, ``./deploy``, ``.config/team/deploy``
  and ``/home/me/.config/deploy`` are directories like any other.

A tarball's members and a Git directory's files follow the same rule (relative to the tarball's
root and to ``--path``), so a directory, its tarball and its commit load the same objects.

Loading zero objects is not an error here (``Loaded.manifests`` is empty); ``require_objects``
is the check the commands make, since an empty revision prunes the whole bundle.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, TextIO

import orjson

from schemas.subjects import ObjectKey, split_bundle
from services.common import binaries
from services.common.confine import (
    KUSTOMIZATION_FILES,
    ConfinementError,
    check_kustomization,
    redact_text,
    redacted,
    refuse_links_out,
    renderer_env,
)
from services.common.limits import InputLimits, LimitError, measure, setting_name
from services.core import kyaml
from services.core.manifest import ManifestError, key_of
from services.core.scope import Scopes, normalise

SUFFIXES = (".yaml", ".yml", ".json")

Locate = Callable[[str], Path]
"""Where a renderer is: ``kubectl`` or ``helm`` → its path, or ``binaries.AssetError`` (or an
``OSError``) saying why there is none."""


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


def hidden(relative: PurePath) -> bool:
    """Whether a path *below* a given root is skipped: one of its names starts with ``.``.
    Only ever called with the path relative to that root (never ``..`` or a parent above it)."""
    return any(part.startswith(".") for part in relative.parts)


def _files(root: Path) -> Iterator[Path]:
    """The manifest files under ``root`` and the kustomizations (directories holding a
    kustomization file, rendered as one unit and not walked further), sorted by path. A
    symbolic link anywhere under a directory ``root`` must stay inside it."""
    if root.is_file():
        yield root  # named explicitly: read whatever its name is
        return
    if not root.exists():
        raise InputError(f"{root}: no such file or directory")
    if not root.is_dir():
        raise InputError(f"{root}: not a regular file or directory")
    try:
        refuse_links_out(root)
    except ConfinementError as exc:
        raise InputError(str(exc)) from None

    def unreadable(exc: OSError) -> None:
        raise InputError(f"{exc.filename or root}: cannot read: {exc.strerror or exc}")

    found: list[Path] = []
    # os.walk: does not descend into symlinked directories, and lets us prune hidden ones
    for top, dirs, names in os.walk(root, onerror=unreadable):
        if any(k in names for k in KUSTOMIZATION_FILES):
            found.append(Path(top))  # kustomize reads what it needs below
            dirs[:] = []
            continue
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            p = Path(top, name)
            if not name.startswith(".") and p.suffix in SUFFIXES and p.is_file():
                found.append(p)
    yield from sorted(found)


RENDER_TIMEOUT = 300


def _render(argv: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a renderer with no cluster in reach (``confine.renderer_env``)."""
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=RENDER_TIMEOUT,
            env=renderer_env(),
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise TransientInputError(f"{what}: not done within {RENDER_TIMEOUT} s") from None
    except OSError as exc:
        raise TransientInputError(f"{what}: {exc}") from None


def render_kustomization(
    directory: Path, locate: Locate, *, allow_remote_bases: bool = False
) -> tuple[str, str]:
    """(the YAML ``kubectl kustomize`` renders, which kubectl did it). The kubectl is the one
    the project builds from pinned modules (or one of that version on PATH, ``TEST_ASSET_KUBECTL``):
    kustomize as ``kubectl apply -k`` runs it, with its load restrictor on (files only from
    below each kustomization) and remote bases only when allowed (``confine``)."""
    try:
        check_kustomization(directory, allow_remote=allow_remote_bases)
    except ConfinementError as exc:
        raise InputError(str(exc)) from None
    try:
        kubectl = locate("kubectl")
    except (OSError, binaries.AssetError) as exc:
        raise TransientInputError(
            f"{directory}: rendering a kustomization needs kubectl: {exc}"
        ) from None
    argv = [str(kubectl), "kustomize", "--load-restrictor=LoadRestrictionsRootOnly", str(directory)]
    res = _render(argv, f"{directory}: kustomize")
    if res.returncode != 0:
        raise InputError(f"{directory}: kustomize failed: {redact_text(res.stderr.strip())}")
    version = binaries.version_of("kubectl", kubectl).split()[-1]
    return res.stdout, f"kustomize in kubectl {version}"


def release_name(bundle: str) -> str:
    """The Helm release a bundle renders as unless told: its name without the tenant (a release
    name is a DNS label, and ``team-a/web`` is not one)."""
    return split_bundle(bundle)[1]


def load_helm(
    chart: str,
    *,
    release: str,
    namespace: str,
    values: list[str],
    sets: list[str],
    locate: Locate = binaries.require,
    limits: InputLimits | None = None,
) -> Loaded:
    """What ``helm template RELEASE CHART`` renders (the Helm the project builds from its
    pinned module, or one of that version on PATH / ``TEST_ASSET_HELM``), with the chart's CRDs
    and without its tests. Hooks are rendered as Helm renders them; driftbus applies them as
    ordinary objects. No cluster is in reach (``lookup`` finds nothing), a chart directory's
    symbolic links stay inside it, and a chart or values URL is shown without credentials."""
    shown = redacted(chart)
    if Path(chart).is_dir():
        try:
            refuse_links_out(Path(chart))
        except ConfinementError as exc:
            raise InputError(str(exc)) from None
    try:
        helm = locate("helm")
    except (OSError, binaries.AssetError) as exc:
        raise TransientInputError(f"{shown}: rendering a chart needs helm: {exc}") from None
    # CRDs in crds/ too (helm install would create them first); a chart's test Pods are for
    # `helm test`, not objects to keep running
    argv = [str(helm), "template", release, chart, "--include-crds", "--skip-tests"]
    if namespace:
        argv += ["--namespace", namespace]
    for v in values:
        argv += ["--values", v]
    for kv in sets:
        argv += ["--set", kv]
    res = _render(argv, f"{shown}: helm template")
    if res.returncode != 0:
        why = redact_text(res.stderr.strip(), chart, *values)
        raise InputError(f"{shown}: helm template failed: {why}")
    tally = Tally(limits)
    tally.file(f"{shown}: helm template output", len(res.stdout.encode(errors="replace")))
    tool = f"helm {binaries.version_of('helm', helm).split('+')[0]}"
    where = f"{shown} (release {release}, {tool})"
    return Loaded(
        _no_duplicates(parse(res.stdout, where, tally)),
        source=f"{shown} [rendered: {tool}, release {release}"
        + "".join(f", values {redacted(v)}" for v in values)
        + "".join(f", --set {kv.split('=', 1)[0]}" for kv in sets)  # values may be secrets
        + "]",
        where=shown,
        files=1,
    )


def load_paths(
    paths: list[str],
    *,
    stdin: TextIO | None = None,
    locate: Locate = binaries.require,
    limits: InputLimits | None = None,
    allow_remote_bases: bool = False,
) -> Loaded:
    """Manifests of every path, in order; ``-`` is standard input (as ``kubectl apply -f -``).
    Everything read counts against one bundle's ``limits`` (by default the environment's)."""
    tally = Tally(limits)
    manifests: list[Manifest] = []
    rendered: list[str] = []
    for raw in paths:
        if raw == "-":
            text = _read_bounded(stdin or sys.stdin, tally.limits.max_file_bytes, "<stdin>")
            tally.file("<stdin>", 0)
            manifests += parse(text, "<stdin>", tally)
            continue
        path = Path(raw)
        if raw.endswith((".tar.gz", ".tgz")):
            manifests += _load_tarball(path, tally)
            continue
        for f in _files(path):
            if f.is_dir():
                text, tool = render_kustomization(f, locate, allow_remote_bases=allow_remote_bases)
                name = f"{f} ({tool})"
                tally.file(name, len(text.encode(errors="replace")))
                manifests += parse(text, name, tally)
                rendered.append(f"{f}: {tool}")
                continue
            try:
                tally.file(str(f), f.stat().st_size)
                text = f.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"{f}: cannot read: {exc}") from None
            manifests += parse(text, str(f), tally)
    where = " ".join(paths)
    source = where + (f" [rendered: {'; '.join(rendered)}]" if rendered else "")
    return Loaded(_no_duplicates(manifests), source=source, where=where, files=tally.files)


def _read_bounded(stream: TextIO, limit: int, name: str) -> str:
    text = stream.read(limit + 1)
    if len(text) > limit or len(text.encode(errors="surrogatepass")) > limit:
        raise InputError(
            f"{name}: over the {limit:,}-byte limit for one file ({setting_name('max_file_bytes')})"
        )
    return text


def _load_tarball(path: Path, tally: Tally) -> list[Manifest]:
    """The manifests of a ``.tar.gz``; a member's declared size is checked before it is read,
    and the member list is bounded (``max_files``) before it is sorted."""
    out: list[Manifest] = []
    try:
        with tarfile.open(path, "r:gz") as tar:
            members: list[tarfile.TarInfo] = []
            for member in tar:
                members.append(member)
                if len(members) > 4 * tally.limits.max_files:
                    raise InputError(
                        f"{path}: over {4 * tally.limits.max_files:,} members, four times the "
                        f"limit of files per bundle ({setting_name('max_files')})"
                    )
            for member in sorted(members, key=lambda m: m.name):
                name = PurePosixPath(member.name)  # "./a/b.yaml" → a/b.yaml
                if not member.isfile() or name.suffix not in SUFFIXES or hidden(name):
                    continue
                where = f"{path}:{member.name}"
                tally.file(where, member.size)
                data = tar.extractfile(member)
                if data is None:
                    continue
                try:
                    text = data.read(tally.limits.max_file_bytes + 1).decode()
                except UnicodeDecodeError as exc:
                    raise InputError(f"{where}: cannot read: {exc}") from None
                out += parse(text, where, tally)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: not a readable .tar.gz: {exc}") from None
    return out


def require_objects(loaded: Loaded, bundle: str, command: str = "publish") -> None:
    """Refuse a revision with no objects: it would prune everything ``bundle`` has, and it is
    far more often a wrong path than a wish. ``--allow-empty`` skips this check."""
    if loaded.manifests:
        return
    found = (
        f"{loaded.files} manifest file(s) but no objects in them"
        if loaded.files
        else "no .yaml, .yml or .json files (hidden ones below it are skipped)"
    )
    effect = (
        f"publishing nothing would prune every object of bundle {bundle}"
        if command == "publish"
        else f"a revision with nothing in it would prune every object of bundle {bundle}"
    )
    raise InputError(
        f"{loaded.where or '(no path)'}: {found}; {effect}. "
        "Give --allow-empty if that is what you want."
    )


def require_namespaces(loaded: Loaded, namespace: str) -> None:
    """Refuse before publishing what the planner would refuse: an object of a kind known to be
    namespaced (built in, or a CRD of this bundle) with no namespace and no default. Kinds of
    unknown scope are left to the planner, which may know their CRD from another bundle."""
    scopes = Scopes()
    for m in loaded.manifests:
        scopes.learn_crd(m.obj)
    problems = []
    for m in loaded.manifests:
        api_version, kind = str(m.obj.get("apiVersion", "")), str(m.obj.get("kind", ""))
        if scopes.namespaced(api_version.rpartition("/")[0], kind) is None:
            continue
        try:
            normalise(m.obj, scopes, namespace)
        except ManifestError as exc:
            problems.append(f"{m.where}: {exc}")
    if problems:
        more = f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""
        raise InputError(problems[0] + more)


def _no_duplicates(manifests: list[Manifest]) -> list[Manifest]:
    seen: dict[ObjectKey, str] = {}
    for m in manifests:
        key = key_of(m.obj, m.where)
        if key in seen:
            raise InputError(f"{key} is defined twice: {seen[key]} and {m.where}")
        seen[key] = m.where
    return manifests
