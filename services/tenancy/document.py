"""The tenants file (docs/tenancy.md) as a ``Document``: read and checked, with ``FILE:LINE``
errors in words (the tenant or key at fault, what a pattern asks for), and the policy stored on
the bus read back and checked again (pure). What the policy allows is ``policy``'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any, Final

import msgspec

from schemas.tenants import (
    DNS_LABEL,
    GROUP_KIND,
    NAMESPACE_OR_NONE,
    SERVICE_ACCOUNT,
    Tenant,
    TenantPolicy,
)
from services.stored.document import Document, Path, Problem, kind_of, path_of
from services.tenancy.clusters import selector_problem
from services.tenancy.rights import rights_problem

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


class PolicyError(Problem):
    """A tenants file or stored policy is unusable: one line, ``FILE:LINE: `` first if known."""


def _converted(kind: type[TenantPolicy], raw: dict[str, Any]) -> TenantPolicy:
    """The policy of a tenants file's map, each tenant converted and checked in turn: a
    PolicyError in words, with the path of the tenant or key at fault."""
    try:  # YAML's "\ud83d\ude00" escapes are two lone surrogates, not an emoji: not UTF-8
        json.dumps(raw, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise PolicyError("a string holds a lone UTF-16 surrogate (an escaped emoji?)") from None
    try:
        base = msgspec.convert({k: v for k, v in raw.items() if k != "tenants"}, kind)
    except msgspec.ValidationError as exc:
        path, problem = _explained(str(exc), raw)
        raise PolicyError(problem, path) from None
    tenants = raw.get("tenants", {})
    if not isinstance(tenants, dict):
        raise PolicyError(
            f"tenants must be a map of tenant names, not {kind_of(tenants)}", ("tenants",)
        )
    out: dict[str, Tenant] = {}
    for name, body in tenants.items():
        at: Path = ("tenants", name)
        if not _TENANT_NAME.match(name):
            raise PolicyError(f"tenant name {name!r} must be {_DNS_LABEL_WORDS}", at)
        try:
            tenant = msgspec.convert(body, Tenant)
        except msgspec.ValidationError as exc:
            path, problem = _explained(str(exc), body)
            raise PolicyError(f"tenant {name}: {problem}", at + path) from None
        _check_tenant(name, tenant)
        out[name] = tenant
    return msgspec.structs.replace(base, tenants=out)


def _checked(policy: TenantPolicy) -> None:
    for name, tenant in policy.tenants.items():
        _check_tenant(name, tenant)


def _check_tenant(name: str, tenant: Tenant) -> None:
    trouble = _tenant_problem(tenant)
    if trouble is not None:
        raise PolicyError(f"tenant {name}: {trouble[1]}", ("tenants", name, *trouble[0]))


TENANTS: Final = Document(
    kind=TenantPolicy,
    error=PolicyError,
    name="the tenants file",
    keys="lockdown, tenants",
    stored="stored tenant policy",
    check=_checked,
    convert=_converted,
)
"""The tenant policy as a setting."""


def matches_any(value: str, patterns: Sequence[str]) -> bool:
    return any(fnmatchcase(value, p) for p in patterns)


def listed(values: Sequence[str]) -> str:
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
    if ns and limited and not matches_any(ns, namespaces):
        return ("defaultNamespace",), (
            f"defaultNamespace {ns!r} is not in its namespaces {listed(namespaces)}"
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


# --- msgspec's words, in ours ----------------------------------------------------------------


_REGEX: Final = re.compile(r"^Expected `str` matching regex '(?P<regex>.*)'$")
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_MISSING: Final = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_NOT_STR: Final = re.compile(r"^Expected `str`, got `(int|float|bool)`$")


def _explained(message: str, raw: Any) -> tuple[Path, str]:
    """A msgspec ValidationError about ``raw`` as (where in it, what, in words)."""
    path = path_of(message)
    problem = message.split(" - at `$", 1)[0]
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
