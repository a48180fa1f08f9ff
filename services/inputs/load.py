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
  directories are not followed (as ``filepath.Walk`` in kubectl), and a link of either kind
  that leaves the directory is refused, naming it (``confine``);
* the difference: files and directories whose name starts with ``.`` **below** the given
  directory are skipped (``.git/``, ``.github/workflows/*.yml``, editor and AppleDouble
  ``._x.yaml`` files). kubectl skips nothing, but it does not recurse unless asked; a recursive
  walk of a repository would otherwise publish CI configuration as manifests. Only the path
  *relative to the given directory* is judged: ``..``, ``./deploy``, ``.config/team/deploy``
  and ``/home/me/.config/deploy`` are directories like any other.

A tarball's members and a Git directory's files follow the same rule (relative to the tarball's
root and to ``--path``), so a directory, its tarball and its commit load the same objects.

The text of each file becomes manifests in ``documents``, within the input limits.

A SOPS-encrypted document (a top-level ``sops:`` map) is taken as it is, never decrypted here:
it must be a Secret whose ``apiVersion``, ``kind`` and ``metadata`` are plaintext, or the load
fails naming the file and document (``sops.check``); its original metadata is recorded in its
``sops`` map for the applier, the one component that decrypts it (``sops.carried``,
docs/secrets.md).

Loading zero objects is not an error here (``Loaded.manifests`` is empty); ``require_objects``
is the check the commands make, since an empty revision prunes the whole bundle.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePath, PurePosixPath
from typing import TextIO

from schemas.subjects import ObjectKey, split_bundle
from services.common import binaries
from services.core.manifest import ManifestError, check_not_empty, key_of
from services.core.scope import Scopes, group_kind, normalise
from services.inputs import sops
from services.inputs.confine import (
    KUSTOMIZATION_FILES,
    ConfinementError,
    check_kustomization,
    redact_text,
    redacted,
    refuse_links_out,
    renderer_env,
)
from services.inputs.documents import (
    InputError,
    Loaded,
    Manifest,
    Tally,
    TransientInputError,
    parse,
)
from services.inputs.limits import InputLimits, setting_name

__all__ = [  # what callers read from here, defined in ``documents``
    "InputError",
    "Loaded",
    "Manifest",
    "Tally",
    "TransientInputError",
    "parse",
]

SUFFIXES = (".yaml", ".yml", ".json")

Locate = Callable[[str], Path]
"""Where a renderer is: ``kubectl`` or ``helm`` → its path, or ``binaries.AssetError`` (or an
``OSError``) saying why there is none."""


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
    and without its tests. Hooks are rendered as Helm renders them and kept: the planner runs
    them in their phase (docs/hooks.md). No cluster is in reach (``lookup`` finds nothing), a
    chart directory's symbolic links stay inside it, and a chart or values URL is shown without
    credentials."""
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
        _accepted(parse(res.stdout, where, tally)),
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
    return Loaded(_accepted(manifests), source=source, where=where, files=tally.files)


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
    """Refuse a revision with no objects (``check_not_empty``, the rule every publish and the
    planner apply), naming the path ``command`` read and what it found there. ``--allow-empty``
    skips this check."""
    try:
        check_not_empty(bundle, len(loaded.manifests), allow_empty=False)
    except ManifestError as exc:
        found = (
            f"{loaded.files} manifest file(s) but no objects in them"
            if loaded.files
            else "no .yaml, .yml or .json files (hidden ones below it are skipped)"
        )
        raise InputError(
            f"{loaded.where or '(no path)'}: nothing to {command}: {found}; {exc}"
        ) from None


def require_namespaces(loaded: Loaded, namespace: str) -> None:
    """Refuse before publishing what the planner would refuse: an object of a kind known to be
    namespaced (built in, or a CRD of this bundle) with no namespace and no default. Kinds of
    unknown scope are left to the planner, which may hear the cluster serve them."""
    scopes = Scopes().for_revision([m.obj for m in loaded.manifests])
    problems = []
    for m in loaded.manifests:
        gk = group_kind(m.obj)
        if gk is None or scopes.namespaced(*gk) is None:
            continue
        try:
            normalise(m.obj, scopes, namespace)
        except ManifestError as exc:
            problems.append(f"{m.where}: {exc}")
    if problems:
        more = f" (and {len(problems) - 1} more like it)" if len(problems) > 1 else ""
        raise InputError(problems[0] + more)


def _accepted(manifests: list[Manifest]) -> list[Manifest]:
    """``manifests`` with each SOPS document checked and carried as published (``sops``), and
    no object twice."""
    return _no_duplicates([_sops_carried(m) if sops.is_encrypted(m.obj) else m for m in manifests])


def _sops_carried(m: Manifest) -> Manifest:
    try:
        sops.check(m.obj)
    except sops.SopsError as exc:
        raise InputError(f"{m.where}: {_named(m)}: SOPS-encrypted: {exc}") from None
    return Manifest(sops.carried(m.obj), m.where)


def _named(m: Manifest) -> str:
    """The document's object as far as it can be told (its identifying fields may be the
    encrypted ones)."""
    try:
        key = str(key_of(m.obj, m.where))
    except ManifestError:
        return "a document"
    return "a document" if "ENC[" in key else key


def _no_duplicates(manifests: list[Manifest]) -> list[Manifest]:
    seen: dict[ObjectKey, str] = {}
    for m in manifests:
        key = key_of(m.obj, m.where)
        if key in seen:
            raise InputError(f"{key} is defined twice: {seen[key]} and {m.where}")
        seen[key] = m.where
    return manifests
