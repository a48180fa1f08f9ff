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

from services.cli.load import InputError, Loaded, Manifest, load_helm, load_paths

GIT_TIMEOUT = 600


@dataclasses.dataclass(frozen=True)
class HelmOptions:
    """How a chart found at the path is rendered: ``helm template RELEASE CHART``. Values files
    are relative to the chart's directory in the repository."""

    release: str
    namespace: str = ""
    values: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()


class Repository:
    """A Git repository read through ``gitdir`` (bare copy or local repository); ``url`` is
    how messages name it."""

    def __init__(self, gitdir: str | Path, url: str) -> None:
        self.gitdir = str(gitdir)
        self.url = url

    def git(self, *args: str, env: dict[str, str] | None = None) -> bytes:
        res = subprocess.run(
            ["git", "-C", self.gitdir, *args], capture_output=True, env=env, timeout=GIT_TIMEOUT
        )
        if res.returncode != 0:
            raise InputError(f"git {' '.join(args)} in {self.url}: {res.stderr.decode().strip()}")
        return res.stdout

    @classmethod
    def clone(cls, url: str, dest: Path) -> Repository:
        """A bare copy of ``url`` (anything ``git clone`` takes) in ``dest``, which must not
        exist or be empty. Every branch and tag is fetched; ``fetch`` brings them up to date."""
        res = subprocess.run(
            ["git", "clone", "--bare", "--quiet", "--", url, str(dest)],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
        )
        if res.returncode != 0:
            raise InputError(f"git clone {url}: {res.stderr.strip() or 'failed'}")
        repo = cls(dest, url)
        # a bare clone maps branches 1:1 but sets no fetch refspec: say what a fetch updates
        repo.git("config", "remote.origin.fetch", "+refs/heads/*:refs/heads/*")
        return repo

    def fetch(self) -> None:
        """Bring every branch and tag up to date with the remote, dropping deleted ones (a
        moved tag moves too: following a tag means following what it names now)."""
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
        for line in out.decode().splitlines():
            name, obj, peeled = [*line.split(" "), "", ""][:3]
            refs[name] = peeled or obj
        return refs

    def default_branch(self) -> str:
        """The branch the remote's HEAD names (``refs/heads/main``), as a clone has it."""
        return self.git("symbolic-ref", "HEAD").decode().strip()

    def commit_of(self, ref: str) -> str:
        return self.git("rev-parse", "--verify", f"{ref}^{{commit}}").decode().strip()

    def load(self, commit: str, subdir: str = "", helm: HelmOptions | None = None) -> Loaded:
        """The manifests under ``subdir`` at ``commit``; a chart there is rendered with
        ``helm`` (release and namespace; without it, a ``Chart.yaml`` is an error)."""
        top = PurePosixPath(subdir.strip("/") or ".")  # "./deploy/" → deploy
        label = f"{self.url}@{commit[:12]}:"
        if str(top) != ".":
            kind = subprocess.run(
                ["git", "-C", self.gitdir, "cat-file", "-t", f"{commit}:{top}"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            if kind != "tree":
                what = "not a directory" if kind else "no such directory"
                raise InputError(f"{top}: {what} in {self.url}@{commit[:12]} (--path)")
        with self._checkout(commit) as tree:
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
                )
            else:
                loaded = load_paths([str(root)]) if root.is_dir() else Loaded([])
            # name files as they are in the repository, not in the temporary tree
            manifests = [
                Manifest(m.obj, m.where.replace(f"{tree}/", label, 1)) for m in loaded.manifests
            ]
            rendered = loaded.source.replace(str(root), f"{label}{top}").replace(f"{tree}/", label)
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


def _no_links_out(tree: Path, label: str) -> None:
    """A repository's symbolic link must not make us read a file outside it."""
    top = tree.resolve()
    for path in tree.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(top):
            rel = path.relative_to(tree)
            raise InputError(f"{label}{rel}: a symbolic link out of the repository")


def load_git(repo: str, ref: str, subdir: str = "", helm: HelmOptions | None = None) -> Loaded:
    """Manifests under ``subdir`` of ``repo`` at ``ref``: a local repository, or any URL git
    clones (``file://``, ``https://``, ``ssh``), cloned bare into a temporary directory."""
    if Path(repo).is_dir():
        local = Repository(repo, repo)
        return local.load(local.commit_of(ref), subdir, helm)
    with tempfile.TemporaryDirectory(prefix="driftbus-git-") as tmp:
        cloned = Repository.clone(repo, Path(tmp))
        return cloned.load(cloned.commit_of(ref), subdir, helm)
