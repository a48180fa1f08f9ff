"""Ignored fields: parts of an object another controller manages, which driftbus neither applies
nor compares (docs/drift.md).

They come from a bundle's ``IgnoreRule`` list (``publish --ignore``) and from the object's own
``driftbus.dev/ignore`` annotation (JSON pointers, comma-separated). The planner merges both
into that annotation and removes the fields from the manifest; because the annotation travels
on the live object, the SHA of a live object (``sha.object_sha``) leaves the same fields out
without knowing any bundle.

Pure; objects are never mutated (copy-on-write along the removed paths).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from schemas.messages import IgnoreRule
from schemas.subjects import ObjectKey
from services.core.manifest import OWNER_LABEL, TENANT_LABEL, ManifestError

IGNORE_ANNOTATION: Final = "driftbus.dev/ignore"
_POINTER: Final = re.compile(r"^(/([^~/]|~[01])*)+$")


class IgnoreError(ManifestError):
    """An ignore rule or pointer that cannot be used; the message says which and why."""


_INDEX: Final = re.compile(r"^(0|[1-9][0-9]*)$")
# Paths an ignore rule must not reach: the object's identity, and what driftbus's own ownership
# and this very mechanism rest on (a pointer to a parent of one reaches it too).
_PROTECTED: Final = (
    ["apiVersion"],
    ["kind"],
    ["metadata", "name"],
    ["metadata", "namespace"],
    ["metadata", "labels", OWNER_LABEL],
    ["metadata", "labels", TENANT_LABEL],
    ["metadata", "annotations", IGNORE_ANNOTATION],
)


def list_index(token: str) -> int | None:
    """A reference token as an array index (RFC 6901: ASCII digits, no leading zero)."""
    return int(token) if _INDEX.match(token) else None


def tokens(pointer: str) -> list[str]:
    """The reference tokens of an RFC 6901 pointer (``~1`` is ``/``, ``~0`` is ``~``)."""
    if not _POINTER.match(pointer):
        raise IgnoreError(f"{pointer!r} is not a JSON pointer (like /spec/replicas)")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def parse_rule(text: str) -> IgnoreRule:
    """``[GROUP/]KIND[/NAMESPACE/NAME]:POINTER[,POINTER…]`` as the CLI takes it, e.g.
    ``apps/Deployment:/spec/replicas``. A kind without a group (``ConfigMap``) is of the core
    group; NAMESPACE and NAME may be ``*`` (any), NAMESPACE empty for a cluster-scoped object
    (``rbac.authorization.k8s.io/ClusterRole//view:/rules``)."""
    selector, sep, pointer_text = text.partition(":")
    if not sep or not selector or not pointer_text:
        raise IgnoreError(f"ignore rule {text!r}: expected [GROUP/]KIND[/NAMESPACE/NAME]:POINTER")
    pointers = [p.strip() for p in pointer_text.split(",") if p.strip()]
    if not pointers:
        raise IgnoreError(f"ignore rule {text!r}: no pointer after ':'")
    for p in pointers:
        check_pointer(p)
    parts = selector.split("/")
    group, namespace, name = "", "*", "*"
    if len(parts) == 1:
        (kind,) = parts
    elif len(parts) == 2:
        group, kind = parts
    elif len(parts) == 3:
        kind, namespace, name = parts
    elif len(parts) == 4:
        group, kind, namespace, name = parts
    else:
        raise IgnoreError(f"ignore rule {text!r}: too many '/' in {selector!r}")
    if not kind or not name:
        raise IgnoreError(f"ignore rule {text!r}: the kind and the name must not be empty")
    return IgnoreRule(kind=kind, pointers=pointers, group=group, namespace=namespace, name=name)


def matches(rule: IgnoreRule, key: ObjectKey) -> bool:
    return (
        (rule.group, rule.kind) == (key.group, key.kind)
        and rule.namespace in ("*", key.namespace)
        and rule.name in ("*", key.name)
    )


def pointers_of(obj: Mapping[str, Any]) -> list[str]:
    """The pointers an object's annotation names (valid ones only: the planner refused any other
    when it took the manifest in, and a live object must always be hashable)."""
    raw = _annotation(obj)
    if not isinstance(raw, str):
        return []
    return [p for p in (p.strip() for p in raw.split(",")) if _POINTER.match(p)]


def _annotation(obj: Mapping[str, Any]) -> Any:
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations.get(IGNORE_ANNOTATION) if isinstance(annotations, Mapping) else None


def check_annotation(obj: Mapping[str, Any]) -> None:
    """Raise IgnoreError naming the first unusable entry of the object's annotation."""
    raw = _annotation(obj)
    if raw is None:
        return
    if not isinstance(raw, str):
        raise IgnoreError(f"annotation {IGNORE_ANNOTATION} must be a string")
    for p in raw.split(","):
        if p.strip():
            check_pointer(p.strip())


def check_pointer(pointer: str) -> list[str]:
    """The tokens of a pointer an ignore rule may use; IgnoreError for a malformed one or one
    that reaches the object's identity, its ownership label or the ignore annotation itself."""
    path = tokens(pointer)
    for protected in _PROTECTED:
        if protected[: len(path)] == path:
            raise IgnoreError(
                f"{pointer!r} would ignore {'/'.join(protected)}, which driftbus needs"
            )
    return path


def with_rules(
    manifest: dict[str, Any], rules: Iterable[IgnoreRule], key: ObjectKey
) -> dict[str, Any]:
    """``manifest`` whose annotation also names the pointers of every rule matching ``key``
    (sorted, once each); the manifest itself when none matches."""
    extra = [p for r in rules if matches(r, key) for p in r.pointers]
    if not extra:
        return manifest
    merged = sorted(set(pointers_of(manifest)) | set(extra))
    meta = dict(manifest.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), IGNORE_ANNOTATION: ",".join(merged)}
    return {**manifest, "metadata": meta}


def without(obj: Mapping[str, Any], pointers: Iterable[str]) -> Mapping[str, Any]:
    """``obj`` with the pointed fields removed (a pointer to nothing removes nothing; a list
    index removes that element)."""
    out: Any = obj
    for p in pointers:
        out = _removed(out, tokens(p))
    return out  # type: ignore[no-any-return]


def _removed(node: Any, path: list[str]) -> Any:
    """A copy of ``node`` without the field at ``path`` (a mapping's key or a list's index);
    ``node`` itself when there is no such field."""
    head, rest = path[0], path[1:]
    copy: dict[str, Any] | list[Any]
    at: Any
    if isinstance(node, Mapping):
        if head not in node:
            return node
        copy, at = dict(node), head
    elif isinstance(node, list) and (i := list_index(head)) is not None and i < len(node):
        copy, at = list(node), i
    else:
        return node
    if rest:
        copy[at] = _removed(node[at], rest)
    else:
        del copy[at]
    return copy


def value_at(obj: Any, pointer: str) -> tuple[bool, Any]:
    """(found, value) of the pointed field."""
    node = obj
    for t in tokens(pointer):
        if isinstance(node, Mapping) and t in node:
            node = node[t]
        elif isinstance(node, list) and (i := list_index(t)) is not None and i < len(node):
            node = node[i]
        else:
            return False, None
    return True, node


def owned_at(fields: Mapping[str, Any] | None, pointer: str) -> bool:
    """Whether a ``fieldsV1`` set owns the field a map-only pointer names (a pointer through a
    list is not resolved: False)."""
    node: Any = fields
    for t in tokens(pointer):
        if not isinstance(node, Mapping) or f"f:{t}" not in node:
            return False
        node = node[f"f:{t}"]
    return True


def sparse(obj: Mapping[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    """The smallest apply body that sets only ``pointer`` to ``value`` in ``obj`` (its identity
    plus the path; map-only pointers)."""
    meta = obj.get("metadata") or {}
    body: dict[str, Any] = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace") if meta.get(k)},
    }
    node = body
    path = tokens(pointer)
    for t in path[:-1]:
        node = node.setdefault(t, {})
    node[path[-1]] = value
    return body
