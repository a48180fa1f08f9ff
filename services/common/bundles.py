"""Reading and writing bundle manifests, inline or through the Object Store.

A bundle message over the payload limit carries an ``ObjectStoreRef`` instead of its manifests;
the stored object is a JSON array whose SHA-256 is checked on read, so a dangling or tampered
reference is an error naming the bundle, never a silently empty bundle.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, NotFoundError, ObjectNotFoundError

from schemas.messages import Bundle, ObjectStoreRef
from services.common.bus import OBJECT_STORE_BUCKET
from services.core.manifest import bundle_kinds

__all__ = ["BundleError", "bundle_kinds", "load_manifests", "store_manifests"]


class BundleError(ValueError):
    """A bundle's manifests cannot be read; the message names the bundle and the reason."""


async def load_manifests(js: JetStreamContext, bundle: Bundle) -> list[Any]:
    """The manifests of ``bundle`` (raw; validation is the caller's)."""
    ref = bundle.manifests_ref
    if ref is None:
        return list(bundle.manifests)
    where = f"bundle {bundle.cluster}/{bundle.bundle}@{bundle.revision}"
    try:
        store = await js.object_store(ref.bucket)
        result = await store.get(ref.name)
    except (BucketNotFoundError, ObjectNotFoundError, NotFoundError):
        raise BundleError(
            f"{where}: object store reference {ref.bucket}/{ref.name} does not exist"
        ) from None
    data = result.data or b""
    if hashlib.sha256(data).hexdigest() != ref.sha:
        raise BundleError(f"{where}: stored manifests do not match their digest {ref.sha[:12]}…")
    try:
        manifests = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BundleError(f"{where}: stored manifests are not JSON: {exc}") from None
    if not isinstance(manifests, list):
        raise BundleError(f"{where}: stored manifests are not a JSON array")
    return manifests


async def store_manifests(
    js: JetStreamContext, cluster: str, bundle: str, revision: str, manifests: list[Any]
) -> ObjectStoreRef:
    data = orjson.dumps(manifests)
    sha = hashlib.sha256(data).hexdigest()
    try:
        store = await js.object_store(OBJECT_STORE_BUCKET)
    except BucketNotFoundError:
        store = await js.create_object_store(OBJECT_STORE_BUCKET)
    name = f"{cluster}/{bundle}/{sha}"
    await store.put(name, data)
    return ObjectStoreRef(
        bucket=OBJECT_STORE_BUCKET, name=name, sha=sha, size=len(data), count=len(manifests)
    )
