"""The tenant policy: reading the tenants file, and what it allows a bundle (docs/tenancy.md).

A bundle's full name says whose it is (``team-a/web``; a plain ``web`` is the platform team's).
Everything here is a pure decision on the policy and names: whether a bundle may be taken at
all (:func:`bundle_refusal`; the clusters a tenant may use are ``tenant_clusters``', the rights
it may be granted ``tenant_rights``'), which of its objects fall outside the tenant's limits
(:func:`object_refusals`), and whose identity its requests carry (:func:`impersonation`). The
limits are a first fence that names the rule broken before anything is written; what the API
server enforces is the impersonated ServiceAccount's RBAC.

Errors in a tenants file name the file and, when it can be found, the line of the offending
tenant or key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Final

import msgspec
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from schemas.subjects import ObjectKey, split_bundle
from schemas.tenants import (
    DNS_LABEL,
    GROUP_KIND,
    NAMESPACE_OR_NONE,
    SERVICE_ACCOUNT,
    Tenant,
    TenantPolicy,
)
from services.core import kyaml
from services.tenancy.clusters import NOT_READ, Labels, cluster_problem, selector_problem
from services.tenancy.rights import rights_problem

Path = tuple[str | int, ...]
"""Where in the file: keys and list indexes, from the document's root."""

_TENANT_NAME: Final = re.compile(DNS_LABEL)
_DNS_LABEL_WORDS: Final = (
    "a DNS label (at most 63 lower-case letters, digits and '-', starting and ending with a "
    "letter or digit)"
)
_PATTERN_WORDS: Final = {
    DNS_LABEL: _DNS_LABEL_WORDS,
    NAMESPACE_OR_NONE: _DNS_LABEL_WORDS,
    SERVICE_ACCOUNT: "NAMESPACE/NAME of a ServiceAccount (e.g. team-a/deployer)",
    GROUP_KIND: (
        "GROUP/KIND with exactly one '/' and no version (apps/Deployment; /ConfigMap for the "
        "core group; '*' on either side)"
    ),
}
"""What a pattern of ``schemas/tenants.py`` asks for, in words (msgspec quotes the regex)."""

_CLASS: Final = re.compile(r"\[!?\]?[^\]]*\]")
"""An fnmatch character class, ``[a-z]`` or ``[!0-9]``."""
_NAMESPACE_GLOB: Final = re.compile(r"[-a-z0-9*?\[\]!]+")
_GROUP_GLOB: Final = re.compile(r"[-a-z0-9.*?\[\]!]*")
_KIND_GLOB: Final = re.compile(r"[A-Za-z0-9*?\[\]!]+")
_NAMESPACE: Final = ("", "Namespace")


class PolicyError(ValueError):
    """A tenants file or stored policy is unusable: one line, ``FILE:LINE: `` first if known."""


@dataclass(frozen=True)
class Identity:
    """Who a tenant's requests are made as: what the API server gives its ServiceAccount."""

    user: str
    groups: tuple[str, ...]


def tenant_of(bundle: str) -> str:
    """The tenant of a bundle's full name ("" for a platform bundle)."""
    return split_bundle(bundle)[0]


def load_policy(text: str | bytes, where: str) -> TenantPolicy:
    """The policy of a tenants file (YAML or JSON) named ``where``; PolicyError if unusable."""
    try:
        text, docs = kyaml.file_documents(text, where)
    except kyaml.FileTextError as exc:
        raise PolicyError(str(exc)) from None
    if not docs:
        return TenantPolicy()
    nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    if len(docs) > 1:
        line = nodes[docs[1][0]].start_mark.line + 1
        raise PolicyError(f"{_at(where, line)}a second document: the tenants file is one map")
    index, raw = docs[0]
    root = nodes[index]

    def fail(path: Path, problem: str) -> PolicyError:
        return PolicyError(f"{_at(where, _line(root, path))}{problem}")

    if not isinstance(raw, dict):
        raise fail((), f"the tenants file must be a map (lockdown, tenants), not {_kind(raw)}")
    try:  # YAML's "\ud83d\ude00" escapes are two lone surrogates, not an emoji: not UTF-8
        json.dumps(raw, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise fail((), "a string holds a lone UTF-16 surrogate (an escaped emoji?)") from None
    try:
        base = msgspec.convert({k: v for k, v in raw.items() if k != "tenants"}, TenantPolicy)
    except msgspec.ValidationError as exc:
        path, problem = _explained(str(exc), raw)
        raise fail(path, problem) from None
    tenants = raw.get("tenants", {})
    if not isinstance(tenants, dict):
        raise fail(("tenants",), f"tenants must be a map of tenant names, not {_kind(tenants)}")
    out: dict[str, Tenant] = {}
    for name, body in tenants.items():
        at: Path = ("tenants", name)
        if not _TENANT_NAME.match(name):
            raise fail(at, f"tenant name {name!r} must be {_DNS_LABEL_WORDS}")
        try:
            tenant = msgspec.convert(body, Tenant)
        except msgspec.ValidationError as exc:
            path, problem = _explained(str(exc), body)
            raise fail(at + path, f"tenant {name}: {problem}") from None
        trouble = _tenant_problem(tenant)
        if trouble is not None:
            raise fail(at + trouble[0], f"tenant {name}: {trouble[1]}")
        out[name] = tenant
    return msgspec.structs.replace(base, tenants=out)


def dump_policy(policy: TenantPolicy) -> bytes:
    """The policy as JSON, as it is stored on the bus (tenants sorted by name)."""
    return msgspec.json.encode(policy, order="deterministic")


def decode_stored(data: bytes) -> TenantPolicy:
    """The policy of stored bytes (``dump_policy``'s; empty: the empty policy); PolicyError if
    they are not one."""
    if not data:
        return TenantPolicy()
    try:
        policy = msgspec.json.decode(data, type=TenantPolicy)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise PolicyError(f"stored tenant policy: {exc}") from None
    for name, tenant in policy.tenants.items():
        trouble = _tenant_problem(tenant)
        if trouble is not None:
            raise PolicyError(f"stored tenant policy: tenant {name}: {trouble[1]}")
    return policy


def identity(tenant: Tenant) -> Identity:
    """The user and groups a real token of the tenant's ServiceAccount authenticates as."""
    namespace, name = tenant.service_account.split("/")
    return Identity(
        user=f"system:serviceaccount:{namespace}:{name}",
        groups=(
            "system:serviceaccounts",
            f"system:serviceaccounts:{namespace}",
            "system:authenticated",
        ),
    )


def impersonation(policy: TenantPolicy, bundle: str) -> Identity | None:
    """Whom requests for ``bundle`` impersonate; None for platform bundles and unknown tenants."""
    tenant = policy.tenants.get(tenant_of(bundle))
    return identity(tenant) if tenant is not None else None


def default_namespace(policy: TenantPolicy, bundle: str) -> str:
    """The namespace the tenant of ``bundle`` gives objects naming none ("" when none)."""
    tenant = policy.tenants.get(tenant_of(bundle))
    return tenant.default_namespace if tenant is not None else ""


def may_manage_cluster_scoped(tenant: Tenant) -> bool:
    """Whether the tenant may manage cluster-scoped objects (unset: only if its namespaces are)."""
    if isinstance(tenant.cluster_scoped, bool):
        return tenant.cluster_scoped
    return isinstance(tenant.namespaces, msgspec.UnsetType)


def bundle_refusal(
    policy: TenantPolicy, bundle: str, cluster: str, labels: Labels = NOT_READ
) -> str | None:
    """Why ``bundle`` may not be taken for ``cluster`` at all, or None if it may. The tenant's
    ``clusterSelector`` is checked against the cluster's registry ``labels`` (None: unknown,
    admitted by no selector) unless they were not read."""
    name = tenant_of(bundle)
    if not name:
        if policy.lockdown:
            return (
                "bundles of no tenant are refused: the tenant policy is in lockdown "
                "(name the bundle TENANT/NAME)"
            )
        return None
    tenant = policy.tenants.get(name)
    if tenant is None:
        return _undefined(name)
    return cluster_problem(name, tenant, cluster, labels)


def object_refusals(
    policy: TenantPolicy, bundle: str, objects: Iterable[tuple[ObjectKey, bool]]
) -> list[str]:
    """One message per object of ``bundle`` outside its tenant's limits; ``bool`` is whether
    the object's kind is namespaced. Always empty for a platform bundle."""
    name = tenant_of(bundle)
    if not name:
        return []
    tenant = policy.tenants.get(name)
    out = []
    for key, namespaced in objects:
        why = _undefined(name) if tenant is None else _object_problem(name, tenant, key, namespaced)
        if why is not None:
            out.append(f"{key}: {why}")
    return out


def _object_problem(name: str, tenant: Tenant, key: ObjectKey, namespaced: bool) -> str | None:
    """The first rule ``key`` breaks: kinds, then scope, then namespace."""
    kind = f"{key.group}/{key.kind}"
    if any(_kind_match(p, key) for p in tenant.kinds.deny):
        return f"kind {kind} is denied to tenant {name}"
    if not any(_kind_match(p, key) for p in tenant.kinds.allow):
        return f"kind {kind} is not among tenant {name}'s kinds {_list(tenant.kinds.allow)}"
    if (key.group, key.kind) == _NAMESPACE:
        namespace = key.name  # a tenant's own namespace is inside its namespaces, not cluster-wide
    elif namespaced:
        namespace = key.namespace
    elif not may_manage_cluster_scoped(tenant):
        return f"tenant {name} may not manage cluster-scoped objects"
    else:
        return None
    allowed = tenant.namespaces
    if isinstance(allowed, msgspec.UnsetType) or _any_match(namespace, allowed):
        return None
    if not namespace:
        return f"names no namespace, and tenant {name}'s objects must be in {_list(allowed)}"
    return f'namespace "{namespace}" is outside tenant {name}\'s namespaces {_list(allowed)}'


def _kind_match(pattern: str, key: ObjectKey) -> bool:
    """Whether a ``GROUP/KIND`` pattern matches the object's group and kind."""
    group, _, kind = pattern.partition("/")
    return fnmatchcase(key.group, group) and fnmatchcase(key.kind, kind)


def _any_match(value: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(value, p) for p in patterns)


def _undefined(name: str) -> str:
    return f'tenant "{name}" is not defined in the tenant policy'


def _list(values: Sequence[str]) -> str:
    return f"[{', '.join(values)}]"


# --- checks beyond what the Structs' types say ---------------------------------------------------


def _tenant_problem(tenant: Tenant) -> tuple[Path, str] | None:
    """The first thing wrong with a tenant its types let through: (where in it, what)."""
    if len(tenant.service_account.partition("/")[2]) > 253:
        return ("serviceAccount",), "serviceAccount: the name is longer than 253 characters"
    limited = not isinstance(tenant.namespaces, msgspec.UnsetType)
    namespaces = () if isinstance(tenant.namespaces, msgspec.UnsetType) else tenant.namespaces
    for i, pattern in enumerate(namespaces):
        why = _glob_problem(pattern, _NAMESPACE_GLOB, "a namespace")
        if why:
            return ("namespaces", i), f"namespaces[{i}] {pattern!r}: {why}"
    ns = tenant.default_namespace
    if ns and limited and not _any_match(ns, namespaces):
        return ("defaultNamespace",), (
            f"defaultNamespace {ns!r} is not in its namespaces {_list(namespaces)}"
        )
    for field, patterns in (("allow", tenant.kinds.allow), ("deny", tenant.kinds.deny)):
        for i, pattern in enumerate(patterns):
            why = _kind_pattern_problem(pattern)
            if why:
                return ("kinds", field, i), f"kinds.{field}[{i}] {pattern!r}: {why}"
    for i, pattern in enumerate(tenant.clusters):
        why = _glob_problem(pattern, None, "a cluster name")
        if why:
            return ("clusters", i), f"clusters[{i}] {pattern!r}: {why}"
    if why := selector_problem(tenant.cluster_selector):
        return ("clusterSelector",), f"clusterSelector: {why}"
    return rights_problem(tenant)


def _kind_pattern_problem(pattern: str) -> str:
    """Why a ``GROUP/KIND`` pattern cannot match any kind ("" if it can)."""
    group, _, kind = pattern.partition("/")
    return _glob_problem(group, _GROUP_GLOB, "an API group", empty_ok=True) or _glob_problem(
        kind, _KIND_GLOB, "a kind"
    )


def _glob_problem(
    pattern: str, chars: re.Pattern[str] | None, what: str, *, empty_ok: bool = False
) -> str:
    """Why ``pattern`` cannot be a glob of ``what`` ("" if it can)."""
    if not pattern:
        return "" if empty_ok else "empty"
    if any(c.isspace() for c in pattern):
        return "contains white space"
    if chars is not None and not chars.fullmatch(pattern):
        return f"has characters {what} cannot contain"
    if any(c in "[]" for c in _CLASS.sub("", pattern)):
        return "has an unbalanced '[' or ']'"
    return ""


# --- where in the file ----------------------------------------------------------------------------


_AT: Final = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_STEP: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_REGEX: Final = re.compile(r"^Expected `str` matching regex '(?P<regex>.*)'$")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_MISSING: Final = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_NOT_STR: Final = re.compile(r"^Expected `str`, got `(int|float|bool)`$")


def _explained(message: str, raw: Any) -> tuple[Path, str]:
    """A msgspec ValidationError about ``raw`` as (where in it, what, in words)."""
    found = _AT.search(message)
    problem = message[: found.start()] if found else message
    path: Path = tuple(
        m[1] if m[1] is not None else int(m[2])
        for m in _STEP.finditer(found["path"] if found else "")
    )
    shown = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in path).replace(".[", "[")
    where = f"{shown}: " if shown else ""
    if unknown := _UNKNOWN.match(problem):
        return (*path, unknown["field"]), f"{where}unknown key {unknown['field']!r}"
    if missing := _MISSING.match(problem):
        return path, f"{where}{missing['field']} is required"
    if (regex := _REGEX.match(problem)) and (words := _PATTERN_WORDS.get(_unescaped(regex))):
        return path, f"{shown} {_value_at(raw, path)!r} must be {words}"
    if problem.endswith(", got `null`"):
        return path, f"{where}empty (null): give it a value or leave the key out"
    if problem == "Expected `str` of length >= 1":
        return path, f"{shown} must not be empty"
    if _NOT_STR.match(problem):
        problem += " (YAML reads unquoted yes, no, on, off and numbers as that; quote it)"
    return path, f"{where}{problem}"


def _unescaped(regex: re.Match[str]) -> str:
    """The pattern msgspec quotes (it doubles backslashes)."""
    return regex["regex"].replace("\\\\", "\\")


def _value_at(raw: Any, path: Path) -> Any:
    """The decoded value ``path`` leads to."""
    for step in path:
        raw = raw[step]
    return raw


def _line(node: Node, path: Path) -> int | None:
    """The 1-based line of the deepest part of ``path`` found under ``node`` (a key's own line
    for a map entry). Best effort: keys a merge (``<<``) brings in are not followed."""
    line = node.start_mark.line + 1 if path == () else None
    for step in path:
        if isinstance(node, MappingNode) and isinstance(step, str):
            entry = next(
                ((k, v) for k, v in node.value if isinstance(k, ScalarNode) and k.value == step),
                None,
            )
            if entry is None:
                break
            line, node = entry[0].start_mark.line + 1, entry[1]
        elif isinstance(node, SequenceNode) and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _at(where: str, line: int | None) -> str:
    """The ``FILE:LINE: `` (or ``FILE: ``) an error message starts with."""
    return f"{where}:{line}: " if line is not None else f"{where}: "


def _kind(value: Any) -> str:
    """What a decoded value is, in words."""
    words = {dict: "a map", list: "a list", str: "a string", type(None): "null"}
    return words.get(type(value), type(value).__name__)
