"""Reading manifests out of a Git repository: ``publish --git`` and ``driftbus source``.

A repository is read through a bare copy of it (a local repository is read in place), so
nothing about the user's checkout — its working tree, its index, what is staged — matters: the
commit is what is published, and the commit id is the revision. The whole tree at the commit is
checked out into a temporary directory with a throwaway index and read exactly as a directory
is (``load.load_paths``: the same file rules, kustomizations rendered), or rendered with Helm
when the path holds a ``Chart.yaml``. So a directory, its tarball and its commit load the same
objects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from services.common import binaries
from services.inputs.confine import (
    ConfinementError,
    check_ref,
    redact_text,
    redacted,
    refuse_links_out,
)
from services.inputs.limits import InputLimits
from services.inputs.load import (
    InputError,
    Loaded,
    Locate,
    Manifest,
    TransientInputError,
    load_helm,
    load_paths,
)

GIT_TIMEOUT = 600


@dataclasses.dataclass(frozen=True)
class HelmOptions:
    """How a chart found at the path is rendered: ``helm template RELEASE CHART``. Values files
    are relative to the chart's directory in the repository."""

    release: str
    namespace: str = ""
    values: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()


def _text(out: bytes) -> str:
    """git output as text: ref and file names may be any bytes, and must not stop a read."""
    return out.decode(errors="surrogateescape")


def _run(argv: list[str], what: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, capture_output=True, timeout=GIT_TIMEOUT, **kwargs)
    except subprocess.TimeoutExpired:
        raise TransientInputError(f"{what}: no answer within {GIT_TIMEOUT} s") from None
    except OSError as exc:
        raise TransientInputError(f"{what}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a repository's files are read: the bundle's limits and whether kustomize may fetch
    remote bases (``confine``)."""

    limits: InputLimits | None = None
    allow_remote_bases: bool = False


class Repository:
    """A Git repository read through ``gitdir`` (bare copy or local repository); messages name
    it by ``url`` without credentials (git's own error text too). Kustomizations and charts in
    it are rendered by the binaries ``locate`` names (``load.Locate``)."""

    def __init__(
        self,
        gitdir: str | Path,
        url: str,
        *,
        locate: Locate = binaries.require,
        read: ReadOptions | None = None,
    ) -> None:
        self.gitdir = str(gitdir)
        self._raw_url = url
        self.url = redacted(url)
        self.locate = locate
        self.read = read or ReadOptions()

    def git(self, *args: str, env: dict[str, str] | None = None) -> bytes:
        what = f"git {' '.join(args)} in {self.url}"
        res = _run(["git", "-C", self.gitdir, *args], what, env=env)
        if res.returncode != 0:
            why = redact_text(res.stderr.decode(errors="replace").strip(), self._raw_url)
            raise InputError(f"{what}: {why}")
        return res.stdout

    @classmethod
    def clone(
        cls,
        url: str,
        dest: Path,
        *,
        locate: Locate = binaries.require,
        read: ReadOptions | None = None,
    ) -> Repository:
        """A bare copy of ``url`` (anything ``git clone`` takes) in ``dest``, which must not
        exist or be empty. Every branch and tag is fetched; ``fetch`` brings them up to date."""
        what = f"git clone {redacted(url)}"
        res = _run(["git", "clone", "--bare", "--quiet", "--", url, str(dest)], what)
        if res.returncode != 0:
            why = redact_text(res.stderr.decode(errors="replace").strip(), url)
            raise InputError(f"{what}: {why or 'failed'}")
        repo = cls(dest, url, locate=locate, read=read)
        # a bare clone maps branches 1:1 but sets no fetch refspec: say what a fetch updates
        repo.git("config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        return repo

    def fetch(self, *, head: bool = False) -> None:
        """Bring every branch and tag up to date with the remote, dropping deleted ones (a
        moved tag moves too: following a tag means following what it names now); with
        ``head``, HEAD too, to the remote's default branch (it may have been renamed since the
        clone: one more round trip, so only when the default branch is what is followed)."""
        if head:  # asked first: the fetch then brings the branch HEAD names
            remote = _text(self.git("ls-remote", "--symref", "origin", "HEAD"))
            for line in remote.splitlines():
                if line.startswith("ref: ") and line.endswith("\tHEAD"):
                    self.git("symbolic-ref", "HEAD", line[5:].split("\t")[0])
        self.git("fetch", "--quiet", "--prune", "--prune-tags", "--force", "--tags", "origin")

    def refs(self) -> dict[str, str]:
        """Every branch and tag: ``refs/heads/main`` / ``refs/tags/v1.2.0`` → commit id (an
        annotated tag is peeled to its commit)."""
        out = self.git(
            "for-each-ref",
            "--format=%(refname) %(objectname) %(*objectname)",
            "refs/heads",
            "refs/tags",
        )
        refs: dict[str, str] = {}
        for line in _text(out).splitlines():
            name, obj, peeled = [*line.split(" "), "", ""][:3]
            refs[name] = peeled or obj
        return refs

    def default_branch(self) -> str:
        """The branch the remote's HEAD names (``refs/heads/main``), as a clone has it."""
        return _text(self.git("symbolic-ref", "HEAD")).strip()

    def commit_of(self, ref: str) -> str:
        try:
            check_ref(ref, "--ref")
        except ConfinementError as exc:
            raise InputError(str(exc)) from None
        return (
            self.git("rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
            .decode()
            .strip()
        )

    def load(self, commit: str, subdir: str = "", helm: HelmOptions | None = None) -> Loaded:
        """The manifests under ``subdir`` at ``commit``; a chart there is rendered with
        ``helm`` (release and namespace; without it, a ``Chart.yaml`` is an error)."""
        top = PurePosixPath(subdir.strip("/") or ".")  # "./deploy/" → deploy
        label = f"{self.url}@{commit[:12]}:"
        if str(top) != ".":
            argv = ["git", "-C", self.gitdir, "cat-file", "-t", f"{commit}:{top}"]
            kind = _text(_run(argv, f"git cat-file in {self.url}").stdout).strip()
            if kind != "tree":
                what = "not a directory" if kind else "no such directory"
                raise InputError(f"{top}: {what} in {self.url}@{commit[:12]} (--path)")
        with self._checkout(commit) as tree:
            try:
                return self._read(tree, top, label, commit, helm)
            except InputError as exc:  # name files as in the repository, not the temporary tree
                raise type(exc)(_in_repository(str(exc), tree, label)) from None

    def _read(
        self, tree: Path, top: PurePosixPath, label: str, commit: str, helm: HelmOptions | None
    ) -> Loaded:
        """What ``load`` returns, read from the checked-out ``tree``."""
        try:
            refuse_links_out(tree, label, "the repository")
        except ConfinementError as exc:
            raise InputError(str(exc)) from None
        root = tree / top
        if (root / "Chart.yaml").is_file():
            if helm is None:
                raise InputError(f"{label}{top}: a Helm chart; give a release to render it")
            loaded = load_helm(
                str(root),
                release=helm.release,
                namespace=helm.namespace,
                values=[str(root / v) for v in helm.values],
                sets=list(helm.sets),
                locate=self.locate,
                limits=self.read.limits,
            )
        elif root.is_dir():
            loaded = load_paths(
                [str(root)],
                locate=self.locate,
                limits=self.read.limits,
                allow_remote_bases=self.read.allow_remote_bases,
            )
        else:
            loaded = Loaded([])
        # name files as they are in the repository, not in the temporary tree
        manifests = [
            Manifest(m.obj, _in_repository(m.where, tree, label)) for m in loaded.manifests
        ]
        rendered = _in_repository(loaded.source.replace(str(root), f"{label}{top}"), tree, label)
        source = f"{self.url}@{commit}"
        if " [rendered: " in rendered:
            source += rendered[rendered.index(" [rendered: ") :]
        return Loaded(
            manifests, revision=commit, source=source, where=f"{label}{top}", files=loaded.files
        )

    @contextlib.contextmanager
    def _checkout(self, commit: str) -> Iterator[Path]:
        """The whole tree at ``commit`` in a temporary directory, checked out with a throwaway
        index — not ``git archive``, which honours export-ignore/export-subst and would silently
        drop or change manifests (a dropped object would be pruned). Whole, because a
        kustomization under the path may refer to ``../../base``."""
        with tempfile.TemporaryDirectory(prefix="driftbus-tree-") as tmp:
            tree = Path(tmp)
            env = {**os.environ, "GIT_INDEX_FILE": str(tree / ".driftbus-index")}
            self.git(f"--work-tree={tree}", "read-tree", commit, env=env)
            self.git(f"--work-tree={tree}", "checkout-index", "--all", "--force", env=env)
            (tree / ".driftbus-index").unlink()
            yield tree


def _in_repository(text: str, tree: Path, label: str) -> str:
    """``text`` naming files as they are in the repository, not in the temporary ``tree``
    (its root too: a kustomization or chart at the top of the repository)."""
    return text.replace(f"{tree}/", label).replace(str(tree), f"{label}.")


def load_git(
    repo: str,
    ref: str,
    subdir: str = "",
    helm: HelmOptions | None = None,
    *,
    locate: Locate = binaries.require,
    read: ReadOptions | None = None,
) -> Loaded:
    """Manifests under ``subdir`` of ``repo`` at ``ref``: a local repository, or any URL git
    clones (``file://``, ``https://``, ``ssh``), cloned bare into a temporary directory."""
    try:
        check_ref(ref, "--ref")  # before anything is cloned
    except ConfinementError as exc:
        raise InputError(str(exc)) from None
    if Path(repo).is_dir():
        local = Repository(repo, repo, locate=locate, read=read)
        return local.load(local.commit_of(ref), subdir, helm)
    with tempfile.TemporaryDirectory(prefix="driftbus-git-") as tmp:
        cloned = Repository.clone(repo, Path(tmp), locate=locate, read=read)
        return cloned.load(cloned.commit_of(ref), subdir, helm)
