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
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from services.common import binaries
from services.common.load import (
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


def redacted(url: str) -> str:
    """``url`` as messages may show it: without the user and password of
    ``https://user:token@host/…`` (a token in a URL must not reach statuses, logs or bundles)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        # a path, or scp-like [user@]host:path: a user name is no secret, "user:pass@" is
        who, at, where = url.partition("@")
        return where if at and ":" in who and "/" not in who else url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


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


class Repository:
    """A Git repository read through ``gitdir`` (bare copy or local repository); messages name
    it by ``url`` without credentials. Kustomizations and charts in it are rendered by the
    binaries ``locate`` names (``load.Locate``)."""

    def __init__(self, gitdir: str | Path, url: str, *, locate: Locate = binaries.require) -> None:
        self.gitdir = str(gitdir)
        self.url = redacted(url)
        self.locate = locate

    def git(self, *args: str, env: dict[str, str] | None = None) -> bytes:
        what = f"git {' '.join(args)} in {self.url}"
        res = _run(["git", "-C", self.gitdir, *args], what, env=env)
        if res.returncode != 0:
            raise InputError(f"{what}: {res.stderr.decode(errors='replace').strip()}")
        return res.stdout

    @classmethod
    def clone(cls, url: str, dest: Path, *, locate: Locate = binaries.require) -> Repository:
        """A bare copy of ``url`` (anything ``git clone`` takes) in ``dest``, which must not
        exist or be empty. Every branch and tag is fetched; ``fetch`` brings them up to date."""
        what = f"git clone {redacted(url)}"
        res = _run(["git", "clone", "--bare", "--quiet", "--", url, str(dest)], what)
        if res.returncode != 0:
            why = res.stderr.decode(errors="replace").strip().replace(url, redacted(url))
            raise InputError(f"{what}: {why or 'failed'}")
        repo = cls(dest, url, locate=locate)
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
        return self.git("rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()

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
        _no_links_out(tree, label)
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
            )
        else:
            loaded = load_paths([str(root)], locate=self.locate) if root.is_dir() else Loaded([])
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


def _loops(path: Path) -> bool:
    try:
        path.stat()
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _no_links_out(tree: Path, label: str) -> None:
    """A repository's symbolic link must not make us read a file outside it (nor loop)."""
    top = tree.resolve()
    for path in tree.rglob("*"):
        if not path.is_symlink():
            continue
        rel = path.relative_to(tree)
        try:
            target = path.resolve(strict=False)  # 3.11, 3.12: RuntimeError on a loop
            if _loops(path):  # 3.13 resolves leniently: stat says ELOOP
                raise OSError(errno.ELOOP, "symbolic link loop")
        except (RuntimeError, OSError) as exc:  # 3.11: RuntimeError("Symlink loop …")
            raise InputError(f"{label}{rel}: an unreadable symbolic link: {exc}") from None
        if not target.is_relative_to(top):
            raise InputError(f"{label}{rel}: a symbolic link out of the repository")


def load_git(
    repo: str,
    ref: str,
    subdir: str = "",
    helm: HelmOptions | None = None,
    *,
    locate: Locate = binaries.require,
) -> Loaded:
    """Manifests under ``subdir`` of ``repo`` at ``ref``: a local repository, or any URL git
    clones (``file://``, ``https://``, ``ssh``), cloned bare into a temporary directory."""
    if Path(repo).is_dir():
        local = Repository(repo, repo, locate=locate)
        return local.load(local.commit_of(ref), subdir, helm)
    with tempfile.TemporaryDirectory(prefix="driftbus-git-") as tmp:
        cloned = Repository.clone(repo, Path(tmp), locate=locate)
        return cloned.load(cloned.commit_of(ref), subdir, helm)
