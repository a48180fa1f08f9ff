"""The SHA functions: raw Kubernetes object → (pruned) canonical bytes → SHA-256.

applySHA and serverSHA (DESIGN §2) are ``object_sha`` applied to different objects, each
projected first onto the fields driftbus owns (``owned.py``, issue 15);
manifestSHA (``manifest_sha``) hashes the whole manifest, see there why. Pruning keeps what a
user or another controller can *intend* and drops what the server maintains, so an object
untouched since our apply hashes the same in the apply response and in every later watch event,
even though the server added defaults, a uid and a resourceVersion.

Objects stay raw dicts decoded straight from JSON. Typed client models drop unknown fields and
reformat timestamps, which would change the hash.

Speed matters (the watcher hashes every event): the pruned form is built as a new shallow dict
that shares all sub-structures with the input — nothing is deep-copied — and orjson sorts keys
at every depth while it serializes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, Final

import orjson

from services.core.ignore import pointers_of, without
from services.core.owned import owned_projection

# metadata fields that belong to the intent of an object; everything else in metadata
# (resourceVersion, uid, generation, managedFields, creationTimestamp, ownerReferences
# set by controllers, selfLink, ...) is maintained by the server.
_KEPT_METADATA: Final = ("name", "namespace", "labels", "annotations", "deletionTimestamp")
# A missing, null or empty value of these is the same thing: the server omits empty maps and the
# namespace of cluster-scoped objects, while manifests often spell them out.
_EMPTY_IS_MISSING: Final = frozenset(("namespace", "labels", "annotations"))
_DROPPED_TOP_LEVEL: Final = frozenset(("metadata", "status"))

_DUMP_OPTIONS: Final = orjson.OPT_SORT_KEYS


class HashError(ValueError):
    """An object cannot be hashed; the message names the object and the reason."""


def prune(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Return the pruned form of ``obj`` (shares sub-structures with ``obj``; do not mutate)."""
    pruned = {k: v for k, v in obj.items() if k not in _DROPPED_TOP_LEVEL}
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        kept = {}
        for field in _KEPT_METADATA:
            value = meta.get(field)
            if value is None or (field in _EMPTY_IS_MISSING and not value):
                continue
            kept[field] = value
        pruned["metadata"] = kept
    elif meta is not None:
        raise HashError(f"{describe(obj)}: metadata is {type(meta).__name__}, not an object")
    return pruned


def canonical_bytes(obj: Mapping[str, Any]) -> bytes:
    """The pruned form as JSON with sorted keys and no insignificant whitespace."""
    try:
        return orjson.dumps(prune(obj), option=_DUMP_OPTIONS)
    except orjson.JSONEncodeError as exc:
        raise HashError(f"{describe(obj)}: cannot be serialized canonically: {exc}") from None


def object_sha(obj: Mapping[str, Any], *, whole: bool = False) -> bytes:
    """applySHA / serverSHA: SHA-256 (32 raw bytes) of the pruned canonical form of the fields
    driftbus owns in a live object (``owned.owned_projection``; the whole object when driftbus
    owns none of it, which is also the case of a manifest), less the fields its
    ``driftbus.dev/ignore`` annotation names (``ignore.py``). ``whole``: of the whole pruned
    object, the rule before issue 15 (every write by another controller is drift), kept only to
    measure against (``bench/churn.py``)."""
    projected = obj if whole else owned_projection(obj)
    # the annotation counts only where driftbus owns it: anyone else's would switch off drift
    if ignored := pointers_of(projected):
        projected = without(projected, ignored)
    return hashlib.sha256(canonical_bytes(projected)).digest()


def manifest_sha(manifest: Mapping[str, Any]) -> bytes:
    """manifestSHA: the SHA of the *whole* desired manifest (canonical JSON, sorted keys).

    Unlike applySHA and serverSHA it is never compared with what a server returns, only with
    the manifestSHA an earlier apply carried out — so nothing needs pruning, and pruning would
    hide real intent: a manifest that only adds a finalizer or an ownerReference (fields
    ``prune`` drops because the server and controllers maintain them on live objects) must
    still be applied. This deliberately extends DESIGN §2 (issue 14)."""
    try:
        return hashlib.sha256(orjson.dumps(manifest, option=_DUMP_OPTIONS)).digest()
    except orjson.JSONEncodeError as exc:
        raise HashError(f"{describe(manifest)}: cannot be serialized canonically: {exc}") from None


def describe(obj: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` (or ``Kind/name``) for error messages; never raises."""
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "?"
    meta = obj.get("metadata")
    name = ns = None
    if isinstance(meta, Mapping):
        name, ns = meta.get("name"), meta.get("namespace")
    name = name if isinstance(name, str) and name else "?"
    return f"{kind}/{ns}/{name}" if isinstance(ns, str) and ns else f"{kind}/{name}"
