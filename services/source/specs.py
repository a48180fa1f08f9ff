"""What a ``driftbus source`` follows: its settings, and the sources they describe (one from the
flags, or a YAML list). A source is a Git repository (``git``) or an OCI repository (``oci``:
Flux artifacts or Helm charts, docs/oci.md). It publishes to one bundle of one cluster, or
(``selector``) to a fleet bundle rolled out over every cluster the selector names
(docs/fleet.md), with every rollout flag ``publish`` takes (``RolloutSettings``, declared once)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec

from schemas.fleet import OnLeave, RolloutSpec
from services.core import kyaml
from services.fleet import rollout_flags
from services.fleet.publish import FleetError, check
from services.fleet.rollout_flags import RolloutFlagError, RolloutSettings
from services.inputs import load
from services.inputs.git import HelmOptions
from services.inputs.oci.reference import OciAccess, OciError, parse_reference
from services.source.refs import RefError, RefRule
from services.source.settings import SourceSettings


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One followed repository and the bundle it is published as."""

    cluster: str
    bundle: str
    git: str = ""
    oci: str = ""
    """An OCI repository (``oci://host/repo``, or with a tag or digest) instead of ``git``."""
    access: OciAccess = dataclasses.field(default_factory=OciAccess)
    rule: RefRule = dataclasses.field(default_factory=RefRule)
    path: str = ""
    namespace: str = ""
    release: str = ""
    values: tuple[str, ...] = ()
    prune: bool = True
    allow_remote_bases: bool = False
    """kustomize may fetch remote bases: the operator's choice in the sources file or flags,
    never the repository's."""
    selector: str | None = None
    """Set: each new commit is a fleet bundle revision for every cluster this label selector
    names ("" every registered cluster), rolled out by ``rollout``; ``cluster`` is unused."""
    rollout: RolloutSpec = dataclasses.field(default_factory=RolloutSpec)
    on_leave: OnLeave = "prune"
    """A fleet's: what a cluster that leaves it gets (prune, or orphan)."""
    substitute: bool = False
    """A fleet's: ``${cluster.name}`` and ``${cluster.labels.KEY}`` replaced per cluster."""

    @property
    def fleet(self) -> bool:
        return self.selector is not None

    @property
    def where(self) -> str:
        """The cluster token its source status is published under (a fleet's has none)."""
        return FLEET_SOURCE if self.fleet else self.cluster

    def helm(self) -> HelmOptions:
        return HelmOptions(
            self.release or load.release_name(self.bundle), self.namespace, self.values
        )


class SpecError(ValueError):
    """The sources configuration is unusable; the message names the entry and field."""


def specs(s: SourceSettings) -> list[SourceSpec]:
    """The sources ``s`` describes: the ``sources`` file's, or the one of the flags."""
    if not s.sources and not s.selector and (flags := rollout_flags.given(s)):
        raise SpecError(f"source: {', '.join(flags)} roll out a fleet: give --selector too")
    if not s.sources:
        entries: list[dict[str, Any]] = [
            {f: getattr(s, f) for f in _SPEC_FIELDS if getattr(s, f) not in ("", ())}
            | {"prune": s.prune, "allow_remote_bases": s.allow_remote_bases}
            | ({"insecure": True} if s.insecure else {})
        ]
        if s.selector:
            entries[0] |= {
                "selector": "" if s.selector == "*" else s.selector,
                "rollout": msgspec.to_builtins(s.spec()),
                "on_leave": s.on_leave,
                "substitute": s.substitute,
            }
    else:
        try:
            docs = [doc for _, doc in kyaml.documents(Path(s.sources).read_text())]
        except (OSError, kyaml.DecodeError) as exc:
            raise SpecError(f"{s.sources}: {exc}") from None
        entries = docs[0] if len(docs) == 1 and isinstance(docs[0], list) else []
        if not entries or not all(isinstance(e, dict) for e in entries):
            raise SpecError(f"{s.sources}: expected a YAML list of sources")
    out = []
    for i, e in enumerate(entries):
        where = f"{s.sources}[{i}]" if s.sources else "source"
        unknown = set(e) - set(_SPEC_FIELDS) - {*_FLAGS, *_FLEET_FIELDS}
        if unknown:
            raise SpecError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        selector, rollout, on_leave, substitute = _fleet_of(e, where)
        for required in ("bundle",) if selector is not None else ("cluster", "bundle"):
            if not isinstance(e.get(required), str) or not e[required]:
                raise SpecError(f"{where}: {required} is required")
        given = [f for f in ("git", "oci") if isinstance(e.get(f), str) and e[f]]
        if not given:
            raise SpecError(f"{where}: git is required (or oci: an OCI repository)")
        if len(given) > 1:
            raise SpecError(f"{where}: give git or oci, not both")
        try:
            rule = RefRule(
                str(e.get("branch", "")), str(e.get("tag", "")), str(e.get("semver", ""))
            )
        except RefError as exc:
            raise SpecError(f"{where}: {exc}") from None
        access = _oci_of(e, rule, where)
        values = e.get("values", ())
        out.append(
            SourceSpec(
                cluster=str(e.get("cluster", "")),
                selector=selector,
                rollout=rollout,
                on_leave=on_leave,
                substitute=substitute,
                bundle=e["bundle"],
                git=str(e.get("git", "")),
                oci=str(e.get("oci", "")),
                access=access,
                rule=rule,
                path=str(e.get("path", "")),
                namespace=str(e.get("namespace", "")),
                release=str(e.get("release", "")),
                values=(values,) if isinstance(values, str) else tuple(map(str, values)),
                prune=bool(e.get("prune", True)),
                allow_remote_bases=e.get("allow_remote_bases") is True,
            )
        )
    if len({(o.where, o.bundle) for o in out}) < len(out):
        raise SpecError("two sources publish the same bundle")
    return out


_SPEC_FIELDS = (
    "cluster",
    "bundle",
    "git",
    "branch",
    "tag",
    "semver",
    "path",
    "namespace",
    "release",
    "values",
    "oci",
    "oci_username",
    "oci_password_file",
    "oci_config",
)
_FLAGS = ("prune", "allow_remote_bases", "insecure")

_FLEET_FIELDS = ("selector", "rollout", "on_leave", "substitute")
FLEET_SOURCE = "_fleet"
"""The cluster token of a fleet source's status (no cluster is called that: names are DNS
labels)."""


def _oci_of(e: dict[str, Any], rule: RefRule, where: str) -> OciAccess:
    """An OCI source's reference checked against its rule, and how its registry is reached."""
    if not e.get("oci"):
        return OciAccess()
    try:
        ref = parse_reference(str(e["oci"]), bare=True)
    except OciError as exc:
        raise SpecError(f"{where}: {exc}") from None
    if rule.branch:
        raise SpecError(f"{where}: an OCI repository has tags, not branches")
    given = sum(map(bool, (ref.tag or ref.digest, rule.tag, rule.semver)))
    if given != 1:
        raise SpecError(
            f"{where}: follow one of a tag (in the URL or tag), a digest (in the URL) or a "
            "semver range"
        )
    return OciAccess(
        username=str(e.get("oci_username", "")),
        password_file=str(e.get("oci_password_file", "")),
        docker_config=str(e.get("oci_config", "")),
        insecure=e.get("insecure") is True,
    )


def _fleet_of(e: dict[str, Any], where: str) -> tuple[str | None, RolloutSpec, OnLeave, bool]:
    """A source entry's fleet: its selector (None: one cluster), rollout, what a cluster that
    leaves gets and whether values are substituted per cluster, checked."""
    if "selector" not in e:
        if given := [f for f in _FLEET_FIELDS if f in e]:
            raise SpecError(f"{where}: {', '.join(given)} needs a selector")
        return None, RolloutSpec(), "prune", False
    selector = e["selector"]
    if not isinstance(selector, str):
        raise SpecError(f"{where}: selector must be a string")
    raw = e.get("rollout", {})
    try:
        rollout = msgspec.convert(raw, RolloutSpec)
        check(selector, (), rollout)
        flags = RolloutSettings(
            on_leave=e.get("on_leave", "prune"), substitute=e.get("substitute", False)
        ).checked()
    except (msgspec.ValidationError, FleetError, RolloutFlagError) as exc:
        raise SpecError(f"{where}: {exc}") from None
    if not isinstance(flags.substitute, bool):
        raise SpecError(f"{where}: substitute must be true or false")
    return selector, rollout, flags.on_leave, flags.substitute
