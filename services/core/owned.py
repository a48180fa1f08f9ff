"""The fields driftbus owns: a live object projected onto its server-side-apply field set.

serverSHA and applySHA hash this projection (DESIGN §2, issue 15), so a write by another field
manager to a field driftbus does not own (an HPA's ``spec.replicas``, a controller's annotation,
cainjector's ``caBundle``) changes neither SHA and costs no write. A change to a field driftbus
owns changes the projection; so does ownership moved away by another client's update or forced
apply, since the field then leaves driftbus's set.

The field set is the ``fieldsV1`` of driftbus's ``managedFields`` entry (operation Apply, no
subresource), structured-merge-diff's trie: ``f:<name>`` a map field, ``k:<json>`` the element
of a keyed list whose key fields equal the JSON object, ``v:<json>`` a set element, ``i:<n>``
a list index, ``.`` the node itself. A child with no entries of its own is owned whole.

Pure, and cheap: the projection is built from new containers that share every owned leaf with
the input (nothing is copied), and an object without driftbus's entry is returned as it is
(whole-object hashing, the rule before issue 15 and still the rule for manifests).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import orjson

from services.core.manifest import FIELD_MANAGER

# Identity and lifecycle: always part of the projection, whoever owns them. A deletion in
# progress (deletionTimestamp) is a change to the object driftbus must see.
_IDENTITY_METADATA: Final = ("name", "namespace", "deletionTimestamp")
_IDENTITY_TOP_LEVEL: Final = ("apiVersion", "kind")
_SELF: Final = "."


def field_set(obj: Mapping[str, Any], manager: str = FIELD_MANAGER) -> dict[str, Any] | None:
    """The fields ``manager`` owns by server-side apply (its Apply entries' ``fieldsV1`` merged;
    an object applied at two API versions has two), or None when it owns none."""
    meta = obj.get("metadata")
    entries = meta.get("managedFields") if isinstance(meta, Mapping) else None
    if not isinstance(entries, list):
        return None
    merged: dict[str, Any] | None = None
    for entry in entries:
        if (
            isinstance(entry, Mapping)
            and entry.get("manager") == manager
            and entry.get("operation") == "Apply"
            and not entry.get("subresource")
            and type(fields := entry.get("fieldsV1")) is dict
        ):
            merged = fields if merged is None else union(merged, fields)
    return merged


def union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two ``fieldsV1`` sets as one (new dicts; neither is changed)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = union(out[k], v) if k in out and type(v) is dict else v
    return out


def owned_projection(obj: Mapping[str, Any], manager: str = FIELD_MANAGER) -> Mapping[str, Any]:
    """``obj`` reduced to the fields ``manager`` owns plus its identity, or ``obj`` itself when
    the manager owns nothing in it (never applied by driftbus, or its managedFields cleared)."""
    fields = field_set(obj, manager)
    if fields is None:
        return obj
    projected = _project(obj, fields)
    # a copy even when the whole object is owned (_project then returns it as it is)
    out: dict[str, Any] = dict(projected) if isinstance(projected, dict) else {}
    for k in _IDENTITY_TOP_LEVEL:
        if k in obj:
            out[k] = obj[k]
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        kept = dict(out.get("metadata") or {})
        for k in _IDENTITY_METADATA:
            if meta.get(k) is not None:
                kept[k] = meta[k]
        out["metadata"] = kept
    return out


def _project(value: Any, fields: dict[str, Any]) -> Any:
    if len(fields) == (_SELF in fields):
        return value  # owned whole: a leaf, an atomic map or list (or an element's "." only)
    if type(value) is dict:
        out = {}
        for k, sub in fields.items():
            if k[:2] == "f:" and (v := value.get(name := k[2:], _ABSENT)) is not _ABSENT:
                out[name] = _project(v, sub) if sub else v
        return out
    if type(value) is list:
        return _project_list(value, fields)
    return value  # a scalar where the set expects structure: keep it, a change is then seen


def _project_list(items: list[Any], fields: dict[str, Any]) -> list[Any]:
    """The owned elements of a list, in the live order, each projected on its own set."""
    keyed: list[tuple[dict[str, Any], dict[str, Any]]] = []
    members: list[tuple[Any, dict[str, Any]]] = []
    indexed: dict[int, dict[str, Any]] = {}
    for k, sub in fields.items():
        tag = k[:2]
        if tag == "k:":
            if type(key := _decoded(k)) is dict:
                keyed.append((key, sub))
        elif tag == "v:":
            if (member := _decoded(k)) is not _ABSENT:
                members.append((member, sub))
        elif tag == "i:" and k[2:].isascii() and k[2:].isdigit():
            indexed[int(k[2:])] = sub
    out = []
    for i, item in enumerate(items):
        sub = indexed.get(i)
        if sub is None and type(item) is dict:
            sub = next((s for key, s in keyed if _matches(item, key)), None)
        if sub is None and members:
            sub = next((s for member, s in members if item == member), None)
        if sub is not None:
            out.append(_project(item, sub))
    return out


@functools.lru_cache(maxsize=8192)
def _decoded(key: str) -> Any:
    """The JSON of a ``k:`` or ``v:`` entry (objects share a few thousand distinct keys at most:
    container and port names, env vars); ``_ABSENT`` for one that is not JSON."""
    try:
        return orjson.loads(key[2:])
    except orjson.JSONDecodeError:
        return _ABSENT  # not a key the API server writes: owns nothing we could match


def _matches(item: dict[str, Any], key: dict[str, Any]) -> bool:
    return all(item.get(k, _ABSENT) == v for k, v in key.items())


_ABSENT: Final = object()
