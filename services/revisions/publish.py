"""Publishing a bundle revision, and reading and writing its manifests, inline or through the
Object Store.

``publish_bundle`` is the one way a revision reaches ``driftbus.bundle.<cluster>.<bundle>``:
``driftbus publish``, ``driftbus source``, ``driftbus up``, the planner's rollback and the test
harness all call it.
A bundle message over ``INLINE_LIMIT`` carries an ``ObjectStoreRef`` instead of its manifests;
the stored object is a JSON array whose SHA-256 is checked on read, so a dangling or tampered
reference is an error naming the bundle, never a silently empty bundle. Anyone who may publish a
bundle may write to the Object Store, so its size is checked before a fetch and the fetch stops
at the limit (``bus.read_object``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, overload

import msgspec
import orjson

from schemas.codec import WireError, decode, encode
from schemas.messages import Bundle, BundleOptions, ObjectStoreRef
from schemas.subjects import bundle_subject
from services.common import bus, telemetry
from services.common.bus import BUNDLES, OBJECT_STORE_BUCKET, Follower, ensure_streams
from services.core.manifest import (
    BUNDLE_LIMIT_SETTING,
    bundle_kinds,
    check_bundle_name,
    check_not_empty,
)

__all__ = [
    "INLINE_LIMIT",
    "BundleError",
    "StoredError",
    "StoredManifests",
    "StoredReader",
    "load_manifests",
    "publish_bundle",
    "read_stored",
    "store_manifests",
]

INLINE_LIMIT = 768 * 1024
"""A bundle message encoding to more bytes than this carries its manifests in the Object Store:
below NATS's default 1 MiB max payload, with room for headers."""


class BundleError(ValueError):
    """A bundle's manifests cannot be read; the message names the bundle and the reason."""


class StoredError(BundleError):
    """Stored manifests cannot be read; the message names the reference, not a bundle
    (``read_stored``: what every bundle naming the reference would be told, after its name)."""


StoredReader = Callable[[ObjectStoreRef], Awaitable["StoredManifests"]]
"""Reads the manifests a reference names (``read_stored``, or a cache in front of it)."""


async def load_manifests(
    js: bus.JetStream,
    bundle: Bundle,
    *,
    limit: int | None = None,
    stored: StoredReader | None = None,
) -> Sequence[Any]:
    """The manifests of ``bundle`` (raw; validation is the caller's): a stored bundle's are
    decoded one by one as they are read (``StoredManifests``). The one way anything reads a
    bundle's stored manifests (planner, watcher, status page): read chunk by chunk within
    ``limit`` bytes (default: the process's ``--bundle-max-bytes``), refused before any fetch
    when the reference declares more (``bus.read_object``). ``stored`` reads the reference
    instead of ``read_stored`` (the planner's cache, shared by its clusters); what it raises
    is said to be this bundle's."""
    ref = bundle.manifests_ref
    if ref is None:
        return list(bundle.manifests)
    where = f"bundle {bundle.cluster}/{bundle.bundle}@{bundle.revision}"
    try:
        found = await (read_stored(js, ref, limit=limit) if stored is None else stored(ref))
    except StoredError as exc:
        raise BundleError(f"{where}: {exc}") from None
    return found.named(where)


async def read_stored(
    js: bus.JetStream, ref: ObjectStoreRef, *, limit: int | None = None
) -> StoredManifests:
    """The manifests ``ref`` names, whichever bundle names it: the same for every bundle (its
    SHA-256 is checked), so it may be shared (``StoredManifests.named`` says whose they are).
    StoredError when they cannot be read (outside the bucket, missing, too big, corrupt, not
    a JSON array); a failure to reach NATS is raised as it is."""
    if ref.bucket != OBJECT_STORE_BUCKET:
        raise StoredError(
            f"object store reference {ref.bucket}/{ref.name} is outside the "
            f"{OBJECT_STORE_BUCKET} bucket, the only one bundles are read from"
        )
    limit = bus.objects.limits().bundle_max_bytes if limit is None else limit
    try:
        data = await bus.read_object(
            js, ref.bucket, ref.name, limit=limit, ref_size=ref.size, ref_sha256=ref.sha
        )
    except bus.ObjectCorrupt as exc:
        raise StoredError(
            f"stored manifests do not match their digest {ref.sha[:12]}…: {exc}"
        ) from None
    except bus.ObjectError as exc:
        raise StoredError(str(exc)) from None
    return StoredManifests(_elements(data))


def stored_manifests(data: bytes | bytearray, where: str) -> StoredManifests:
    """The manifests of the stored bytes ``data`` (a JSON array), each decoded as it is read;
    BundleError naming ``where`` for anything else (pure)."""
    try:
        return StoredManifests(_elements(data), where)
    except StoredError as exc:
        raise BundleError(f"{where}: {exc}") from None


def _elements(data: bytes | bytearray) -> list[msgspec.Raw]:
    """The undecoded elements of the JSON array ``data``; StoredError for anything else."""
    try:
        return msgspec.json.decode(data, type=list[msgspec.Raw])
    except msgspec.ValidationError:
        raise StoredError("stored manifests are not a JSON array") from None
    except msgspec.DecodeError as exc:
        raise StoredError(f"stored manifests are not JSON: {exc}") from None
    except RecursionError:
        raise StoredError("stored manifests are nested too deep to read") from None


class StoredManifests(Sequence[Any]):
    """The manifests of a stored bundle, each decoded only when it is read.

    A big bundle decoded whole is every object as Python dicts at once (100,000 objects: about
    200 MiB beside the 50 MB of JSON), and the allocator keeps most of that memory after the
    dicts are freed. Kept as the undecoded JSON of each element (``msgspec.Raw``: a view of the
    stored bytes, checked to be JSON), a pass over the bundle holds one object at a time."""

    def __init__(self, elements: list[msgspec.Raw], where: str = "stored manifests") -> None:
        self._elements = elements
        self._where = where

    def named(self, where: str) -> StoredManifests:
        """The same manifests (nothing copied), their errors naming ``where``: one stored
        revision read once and taken by many bundles, each told of its own."""
        return StoredManifests(self._elements, where)

    def __len__(self) -> int:
        return len(self._elements)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._element(e) for e in self._elements[i]]
        return self._element(self._elements[i])

    def __iter__(self) -> Iterator[Any]:
        for e in self._elements:
            yield self._element(e)

    def _element(self, raw: msgspec.Raw) -> Any:
        """One stored manifest, decoded; BundleError (what every reader catches) when orjson,
        stricter than the first check (UTF-8, 1,024 levels), cannot read it."""
        try:
            return orjson.loads(memoryview(raw))
        except orjson.JSONDecodeError as exc:
            raise BundleError(
                f"{self._where}: a stored manifest is not readable JSON: {exc}"
            ) from None


async def store_manifests(
    js: bus.JetStream, cluster: str, bundle: str, revision: str, manifests: list[Any]
) -> ObjectStoreRef:
    """Store ``manifests`` in the Object Store; BundleError when they are over the bundle limit
    (``--bundle-max-bytes``: every reader would refuse them) or the bucket is full."""
    data = orjson.dumps(manifests)
    limit = bus.objects.limits().bundle_max_bytes
    if len(data) > limit:
        raise BundleError(
            f"bundle {cluster}/{bundle}@{revision}: its manifests are {len(data):,} bytes of "
            f"JSON, over the {limit:,}-byte bundle limit ({BUNDLE_LIMIT_SETTING})"
        )
    sha = hashlib.sha256(data).hexdigest()
    name = f"{cluster}/{bundle}/{sha}"
    try:
        try:
            await bus.put_object(js, OBJECT_STORE_BUCKET, name, data)
        except bus.ObjectMissing:  # the planner makes it; a test bus may have no planner yet
            await bus.ensure_object_store(js)
            await bus.put_object(js, OBJECT_STORE_BUCKET, name, data)
    except bus.ObjectError as exc:
        raise BundleError(
            f"bundle {cluster}/{bundle}@{revision}: its {len(data):,} bytes of manifests "
            f"cannot be stored: {exc}"
        ) from None
    return ObjectStoreRef(
        bucket=OBJECT_STORE_BUCKET, name=name, sha=sha, size=len(data), count=len(manifests)
    )


async def publish_bundle(
    js: bus.JetStream,
    *,
    cluster: str,
    bundle: str,
    revision: str,
    manifests: list[dict[str, Any]],
    options: BundleOptions,
    source: str = "",
    manage_streams: bool = False,
    within: float = 30.0,
    delete: bool = False,
    stored: ObjectStoreRef | None = None,
    kinds: list[str] | None = None,
    published_at: dt.datetime | None = None,
    fleet: bool = False,
    rollback_of: str = "",
    msg_id: str | None = None,
    streams_known: bool = False,
    fencing_token: int = 0,
    expected_last_seq: int | None = None,
) -> Bundle:
    """Publish ``manifests`` as ``revision`` of ``bundle`` for ``cluster``; the message sent.

    An empty revision is refused unless ``options.allow_empty`` (``check_not_empty``: it prunes
    every object of the bundle; the CLI refuses earlier, naming the path; this guards every
    caller). The streams are waited for up to ``within`` seconds (the planner creates them),
    created when ``manage_streams`` (a test bus with no planner yet), or not asked for when
    ``streams_known`` (the planner's rollback: it made them). The message names its kinds
    (``Bundle.kinds``), carries the current trace (``telemetry.inject``), and its
    ``Nats-Msg-Id`` is unique per publish: publishing the same revision again is a new message.
    ``delete``: the revision deletes the bundle (``Bundle.delete``; no manifests).

    A fleet's rollout places a revision whose manifests are stored once for every cluster:
    ``stored`` (with its ``kinds``) instead of ``manifests``, the placement's own
    ``published_at`` (what the rollout's gate matches the status against), ``msg_id`` (a
    placement repeated by a driver that took over is deduplicated) and the driver's lease
    ``fencing_token`` (a deposed driver's placement is refused by the planner). A rollback
    republishes a revision from the bundle's history as it was (its ``stored`` manifests and
    ``kinds``) with ``rollback_of`` set. ``expected_last_seq``: published only if the bundle's
    subject still ends at that stream sequence (an approval of the revision in force, not of
    one a newer publish replaced meanwhile); JetStream refuses it otherwise (``bus.ApiError``,
    ``COMPARE_REFUSED``)."""
    check_bundle_name(bundle)
    if delete and (manifests or stored):
        raise ValueError(f"a deletion of {bundle} carries no manifests")
    if stored is not None and manifests:
        raise ValueError(f"{bundle}: manifests inline or stored, not both")
    objects = len(manifests) or (stored.count if stored is not None else 0)
    check_not_empty(bundle, objects, allow_empty=options.allow_empty, delete=delete)
    if not streams_known:
        await ensure_streams(js, manage=manage_streams, within=within)
    msg = Bundle(
        cluster=cluster,
        bundle=bundle,
        revision=revision,
        options=options,
        manifests=list(manifests),
        manifests_ref=stored,
        published_at=published_at or dt.datetime.now(dt.UTC),
        source=source,
        kinds=bundle_kinds(manifests) if kinds is None else kinds,
        delete=delete,
        fleet=fleet,
        rollback_of=rollback_of,
        fencing_token=fencing_token,
    )
    data = encode(msg)
    if stored is None and len(data) > INLINE_LIMIT:
        ref = await store_manifests(js, cluster, bundle, revision, msg.manifests)
        msg = msgspec.structs.replace(msg, manifests=[], manifests_ref=ref)
        data = encode(msg)
    headers = {"Nats-Msg-Id": msg_id or f"{cluster}/{bundle}@{revision}/{time.time_ns()}"}
    if expected_last_seq is not None:
        headers["Nats-Expected-Last-Subject-Sequence"] = str(expected_last_seq)
    await bus.publish(js, bundle_subject(cluster, bundle), data, headers=telemetry.inject(headers))
    return msg


async def revisions(js: bus.JetStream, cluster: str, bundle: str) -> list[Bundle]:
    """The bundle's revisions on the bus, oldest first (the BUNDLES stream keeps the last few;
    an undecodable message is skipped; none before the stream exists)."""
    out: list[Bundle] = []
    follower = Follower(js, BUNDLES, bundle_subject(cluster, bundle), history=True)
    try:
        async with asyncio.timeout(30):
            async for m in follower.snapshot():
                with contextlib.suppress(WireError):
                    out.append(decode(m.data, Bundle))
    except bus.StreamMissing:
        return []
    return out
