"""Where a followed source's revisions come from: a Git repository (the commit a branch, tag or
semver range stands at) or an OCI repository (the digest of the manifest a tag, or the newest
tag in a semver range, names). ``service.Follower`` asks an origin two things — where does the
rule stand now (``locate``), and what does that revision render (``load``) — and does the rest
(publish when the objects differ, report the source's status) the same way for both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Protocol

from services.inputs.confine import redacted
from services.inputs.git import ReadOptions, Repository
from services.inputs.limits import InputLimits
from services.inputs.load import Loaded
from services.inputs.oci import artifact as oci_artifact
from services.inputs.oci.client import RegistryClient
from services.inputs.oci.reference import Reference, parse_reference
from services.source.refs import resolve
from services.source.specs import SourceSpec


@dataclasses.dataclass(frozen=True)
class At:
    """Where the rule stands: the name followed (``main``, ``v1.2.0``) and the revision there
    (a commit id, or a manifest digest)."""

    ref: str
    revision: str


class Origin(Protocol):
    url: str
    """The source as statuses and logs name it: without credentials."""
    following: str
    """What is followed, for status: ``branch main``, ``tag 1.0.0``, ``semver ^1``."""
    noun: str
    """What one revision is called in messages: ``commit`` or ``artifact``."""

    async def locate(self) -> At: ...

    async def load(self, at: At) -> Loaded: ...

    def forget(self) -> None:
        """Drop what was fetched: it is fetched afresh next time (after a fetch error)."""


def short(revision: str) -> str:
    """A revision as messages show it: 12 hex digits of a commit, ``sha256:`` + 12 of a digest."""
    return revision[:19] if revision.startswith("sha256:") else revision[:12]


def origin_of(spec: SourceSpec, cache: Path, limits: InputLimits | None) -> Origin:
    if spec.oci:
        return OciOrigin(spec, limits)
    return GitOrigin(spec, cache, limits)


class GitOrigin:
    """A Git repository: a local one read in place, any other through a bare copy cloned once
    into ``cache`` (this source's own) and fetched on every poll."""

    noun = "commit"

    def __init__(self, spec: SourceSpec, cache: Path, limits: InputLimits | None) -> None:
        self.spec = spec
        self._read = ReadOptions(limits, spec.allow_remote_bases)
        self._cache = cache
        self.url = redacted(spec.git)
        self.following = spec.rule.describe()
        self._repo: Repository | None = None

    def _mirror(self) -> Repository:
        if self._repo is None:
            if Path(self.spec.git).is_dir():
                self._repo = Repository(self.spec.git, self.spec.git, read=self._read)
                return self._repo
            if self._cache.exists():
                shutil.rmtree(self._cache)  # a copy from an earlier life may be half-cloned
            self._cache.parent.mkdir(parents=True, exist_ok=True)
            self._repo = Repository.clone(self.spec.git, self._cache, read=self._read)
            return self._repo
        if not Path(self.spec.git).is_dir():
            self._repo.fetch(head=self.spec.rule.follows_default())
        return self._repo

    async def locate(self) -> At:
        repo = await asyncio.to_thread(self._mirror)
        refs = await asyncio.to_thread(repo.refs)
        rule = self.spec.rule
        # the default branch only when it is what is followed: a local repository on a
        # detached HEAD has none, and needs none to follow a tag
        default = ""
        if rule.follows_default():
            default = await asyncio.to_thread(repo.default_branch)
        at = resolve(refs, rule, default)
        self.following = rule.describe(default)
        return At(at.ref.removeprefix("refs/heads/").removeprefix("refs/tags/"), at.commit)

    async def load(self, at: At) -> Loaded:
        repo = self._mirror() if self._repo is None else self._repo
        spec = self.spec
        return await asyncio.to_thread(repo.load, at.revision, spec.path, spec.helm())

    def forget(self) -> None:
        self._repo = None


class OciOrigin:
    """An OCI repository: a tag (moved tags are followed), the newest tag in a semver range, or
    a fixed digest; the revision is the manifest's digest, read anew on every poll."""

    noun = "artifact"

    def __init__(self, spec: SourceSpec, limits: InputLimits | None) -> None:
        self.spec = spec
        self.ref: Reference = parse_reference(spec.oci, bare=True)
        if spec.rule.tag:
            self.ref = self.ref.at(tag=spec.rule.tag)
        self.url = self.ref.base
        self.following = self._describe(self.ref.tag)
        self._limits = limits

    def _describe(self, tag: str) -> str:
        if self.spec.rule.semver:
            return f"semver {self.spec.rule.semver}"
        if self.ref.digest and not self.ref.tag:
            return f"digest {short(self.ref.digest)}"
        return f"tag {tag}"

    async def locate(self) -> At:
        async with RegistryClient(self.ref.registry, self.spec.access) as client:
            ref = await oci_artifact.resolve(client, self.ref, self.spec.rule.semver)
            digest = ref.digest or (await client.manifest(ref)).digest
        return At(ref.tag or short(digest), digest)

    async def load(self, at: At) -> Loaded:
        spec = self.spec
        limits = self._limits or InputLimits.from_env()
        ref = self.ref.at(tag="" if self.ref.digest else at.ref, digest=at.revision)
        chart = oci_artifact.ChartOptions(
            release=spec.helm().release,
            namespace=spec.namespace,
            values=spec.values,
            values_in_chart=True,
        )
        with tempfile.TemporaryDirectory(prefix="driftbus-oci-") as tmp:
            async with RegistryClient(self.ref.registry, spec.access) as client:
                pulled = await oci_artifact.pull(client, ref, Path(tmp), limits)
            return await asyncio.to_thread(
                oci_artifact.load_pulled,
                pulled,
                path=spec.path,
                chart=chart,
                limits=limits,
                allow_remote_bases=spec.allow_remote_bases,
            )

    def forget(self) -> None:
        pass
