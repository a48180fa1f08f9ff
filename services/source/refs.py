"""Which commit a followed Git source stands at: a branch, a tag, or the newest tag in a semver
range (pure: it reads a listing of refs, never the repository).

A semver range is npm's syntax (``^1.2``, ``~1.4.0``, ``>=1.0.0 <2.0.0``, ``1.x || 2.x``), as
Flux's ``semver`` and Argo CD's ``targetRevision`` ranges read; tags may carry a leading ``v``
(``v1.2.3``). Pre-releases match only a range that names one, as in npm. Tags that are not
versions are ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import semantic_version

from services.inputs.confine import ConfinementError, check_ref
from services.inputs.oci.reference import newest_matching


class RefError(ValueError):
    """The source's ref rule names nothing in the repository (or is not a valid rule)."""


@dataclasses.dataclass(frozen=True)
class RefRule:
    """What to follow: at most one of branch, tag and semver; none means the default branch."""

    branch: str = ""
    tag: str = ""
    semver: str = ""

    def __post_init__(self) -> None:
        if sum(map(bool, (self.branch, self.tag, self.semver))) > 1:
            raise RefError("follow one of a branch, a tag or a semver range, not several")
        if self.semver:
            _spec(self.semver)  # fail at start-up, not on the first poll
        for what, ref in (("branch", self.branch), ("tag", self.tag)):
            try:
                if ref:
                    check_ref(ref, what)
            except ConfinementError as exc:
                raise RefError(str(exc)) from None

    def follows_default(self) -> bool:
        """Whether the repository's default branch is what is followed (no rule given)."""
        return not (self.branch or self.tag or self.semver)

    def describe(self, default_branch: str = "") -> str:
        if self.semver:
            return f"semver {self.semver}"
        if self.tag:
            return f"tag {self.tag}"
        return f"branch {self.branch or _short(default_branch) or '(default)'}"


@dataclasses.dataclass(frozen=True)
class Resolved:
    ref: str
    """The full ref name followed now (``refs/tags/v1.3.0``)."""
    commit: str


def resolve(refs: Mapping[str, str], rule: RefRule, default_branch: str) -> Resolved:
    """The commit ``rule`` stands at, given every ref (``refs/heads/x``/``refs/tags/y`` →
    commit) and the repository's default branch."""
    if rule.semver:
        tags = {
            name.removeprefix("refs/tags/"): name for name in refs if name.startswith("refs/tags/")
        }
        tag = newest_matching(tags, rule.semver)  # the one rule for Git tags and OCI tags
        if tag is None:
            raise RefError(f"no tag matches semver {rule.semver}")
        return Resolved(tags[tag], refs[tags[tag]])
    if rule.tag:
        name = f"refs/tags/{rule.tag}"
        if name not in refs:
            raise RefError(f"no tag {rule.tag}")
        return Resolved(name, refs[name])
    name = f"refs/heads/{rule.branch}" if rule.branch else default_branch
    if name not in refs:
        raise RefError(f"no branch {_short(name) or '(default)'}")
    return Resolved(name, refs[name])


def _spec(text: str) -> semantic_version.NpmSpec:
    try:
        return semantic_version.NpmSpec(text)
    except ValueError as exc:
        raise RefError(f"not a semver range: {text!r} ({exc})") from None


def _short(ref: str) -> str:
    return ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
