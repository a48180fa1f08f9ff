"""The Object Store, read chunk by chunk within a byte limit, and its bucket's limits.

Big bundles live in the Object Store and anyone who may publish a bundle may write there, so a
stored object is hostile input. nats-py's ``ObjectStore.get`` builds the whole object by repeated
concatenation, whatever its size: one 2 GiB object stalls the reader (and, replayed, every
restart). ``read_object`` instead

* checks the size the reference declares, then the size the object's metadata declares, against
  the limit before a single chunk is fetched;
* fetches the chunks one at a time (a stream message get by subject: the reader holds one chunk
  beyond what it keeps), into one buffer, refusing as soon as the bytes would pass the limit or
  the declared size — so at most ``limit`` plus one chunk is ever read;
* checks the SHA-256 of what it read against the metadata's digest and the reference's.

The bucket itself is bounded (``bucket_config``): a total size, and a per-message size that
bounds a chunk. Which limits are in force in a process is set once, from its settings, by
``connect`` (``configure``).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import math
from typing import Annotated, Final

import msgspec
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.errors import APIError, BucketNotFoundError, NotFoundError

from services.core.manifest import BUNDLE_LIMIT_SETTING, DEFAULT_BUNDLE_MAX_BYTES

MIB: Final = 1024 * 1024
DEFAULT_STORE_MAX_BYTES: Final = 4 * 1024 * MIB
"""The whole Object Store bucket: sixty-four bundles at their limit."""
CHUNK_MAX: Final = 256 * 1024
"""Largest message the bucket takes, so largest chunk (nats-py writes 128 KiB chunks)."""
MIN_AVERAGE_CHUNK: Final = 4096
"""An object in smaller chunks than this on average is refused: each chunk is one request."""
_DIGEST_PREFIX: Final = "SHA-256="


class ObjectError(ValueError):
    """A stored object cannot be used; the message names the object and the reason."""

    def __init__(self, bucket: str, name: str, reason: str) -> None:
        super().__init__(f"object store reference {bucket}/{name} {reason}")
        self.bucket = bucket
        self.name = name


class ObjectMissing(ObjectError):
    """No such object (never stored, deleted, or its chunks purged while being read)."""


class ObjectTooLarge(ObjectError):
    """The object declares, or turned out to hold, more bytes than the limit."""


class ObjectCorrupt(ObjectError):
    """The object's metadata or chunks disagree with each other or with the reference."""


class ObjectRefused(ObjectError):
    """The bucket would not store the object (full, or a chunk over its message size)."""


@dataclasses.dataclass(frozen=True)
class StoreLimits:
    bundle_max_bytes: int = DEFAULT_BUNDLE_MAX_BYTES
    """Most bytes one stored bundle may hold (read or written)."""
    store_max_bytes: int = DEFAULT_STORE_MAX_BYTES
    """Most bytes the Object Store bucket may hold (the planner creates it so)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if getattr(self, f.name) <= 0:
                raise ValueError(f"--{f.name.replace('_', '-')} must be positive")


_in_force: list[StoreLimits] = [StoreLimits()]


def configure(limits: StoreLimits) -> None:
    """Set the limits of this process (``connect`` does, from its settings)."""
    _in_force[0] = limits


def limits() -> StoreLimits:
    """The limits in force in this process."""
    return _in_force[0]


def bucket_config(bucket: str, *, replicas: int, max_bytes: int) -> js_api.StreamConfig:
    """The stream of an Object Store bucket as nats-py makes it, with its limits: ``max_bytes``
    in all, ``CHUNK_MAX`` per message; when full a put is refused (discard new), so nothing
    stored is ever dropped to make room."""
    return js_api.StreamConfig(
        name=f"OBJ_{bucket}",
        description="driftbus: manifests of bundles too big for one message",
        subjects=[f"$O.{bucket}.C.>", f"$O.{bucket}.M.>"],
        max_bytes=max_bytes,
        max_msg_size=CHUNK_MAX,
        max_consumers=-1,
        storage=js_api.StorageType.FILE,
        num_replicas=replicas,
        discard=js_api.DiscardPolicy.NEW,
        allow_rollup_hdrs=True,
        allow_direct=True,
    )


class ObjectMeta(msgspec.Struct):
    """What an object's metadata message says (the fields a reader needs)."""

    nuid: Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")]
    size: Annotated[int, msgspec.Meta(ge=0)] = 0
    chunks: Annotated[int, msgspec.Meta(ge=0)] = 0
    digest: str = ""
    deleted: bool = False
    options: dict[str, object] | None = None


async def put_object(js: JetStreamContext, bucket: str, name: str, data: bytes) -> None:
    """Store ``data`` as ``bucket/name`` (nats-py's put: 128 KiB chunks, then the metadata);
    ObjectMissing when there is no such bucket, ObjectRefused when the bucket says no."""
    try:
        store = await js.object_store(bucket)
        await store.put(name, data)
    except BucketNotFoundError:
        raise ObjectMissing(bucket, name, "cannot be stored: the bucket does not exist") from None
    except APIError as exc:  # full (discard new: nothing stored is dropped) or a chunk too big
        raise ObjectRefused(
            bucket,
            name,
            f"was refused by the bucket ({exc.description}; its size is --object-store-max-bytes)",
        ) from None


def meta_subject(bucket: str, name: str) -> str:
    return f"$O.{bucket}.M.{base64.urlsafe_b64encode(name.encode()).decode()}"


def parse_meta(bucket: str, name: str, data: bytes) -> ObjectMeta:
    """The metadata of ``bucket/name`` from its message; ObjectError when it cannot be read or
    describes an object no reader should follow (deleted, a link)."""
    try:
        meta = msgspec.json.decode(data, type=ObjectMeta)
    except msgspec.DecodeError as exc:  # ValidationError too
        raise ObjectCorrupt(bucket, name, f"has unreadable metadata: {exc}") from None
    except UnicodeDecodeError as exc:  # msgspec lets invalid UTF-8 in strings out as this
        problem = f"has unreadable metadata: invalid UTF-8: {exc}"
        raise ObjectCorrupt(bucket, name, problem) from None
    except RecursionError:  # free-form options nested thousands deep
        raise ObjectCorrupt(bucket, name, "has metadata nested too deeply to read") from None
    if meta.deleted:
        raise ObjectMissing(bucket, name, "does not exist (deleted)")
    if meta.options and meta.options.get("link"):
        raise ObjectCorrupt(bucket, name, "is a link to another object; links are not followed")
    return meta


def check_declared(
    bucket: str, name: str, *, limit: int, ref_size: int | None, meta: ObjectMeta | None = None
) -> None:
    """Refuse, before any chunk is read, what the reference or the metadata says is too big or
    inconsistent (pure)."""
    for who, size in (("declares", ref_size), ("is stored as", meta.size if meta else None)):
        if size is not None and size > limit:
            raise ObjectTooLarge(
                bucket,
                name,
                f"{who} {size:,} bytes, over the {limit:,}-byte bundle limit "
                f"({BUNDLE_LIMIT_SETTING}): refused unread",
            )
    if meta is None:
        return
    if ref_size is not None and meta.size != ref_size:
        raise ObjectCorrupt(
            bucket, name, f"is stored as {meta.size:,} bytes but the reference says {ref_size:,}"
        )
    if meta.chunks > max(1, math.ceil(meta.size / MIN_AVERAGE_CHUNK)):
        raise ObjectCorrupt(
            bucket,
            name,
            f"is stored in {meta.chunks:,} chunks for {meta.size:,} bytes "
            f"(under {MIN_AVERAGE_CHUNK:,} bytes a chunk): refused unread",
        )


def meta_digest(bucket: str, name: str, meta: ObjectMeta) -> bytes:
    """The SHA-256 the metadata declares (``SHA-256=<base64url>``)."""
    text = meta.digest
    if text[: len(_DIGEST_PREFIX)].upper() != _DIGEST_PREFIX:
        raise ObjectCorrupt(bucket, name, "has no SHA-256 digest in its metadata")
    try:
        digest = base64.urlsafe_b64decode(text[len(_DIGEST_PREFIX) :])
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ObjectCorrupt(bucket, name, "has a malformed digest in its metadata")
    return digest


async def read_object(
    js: JetStreamContext,
    bucket: str,
    name: str,
    *,
    limit: int,
    ref_size: int | None = None,
    ref_sha256: str | None = None,
) -> bytearray:
    """The bytes of ``bucket/name``, read chunk by chunk, never more than ``limit`` plus one
    chunk; ``ref_size`` / ``ref_sha256`` (hex) are what the reference declares. ObjectError
    (naming the object and why) when it is missing, too big, or not what was declared."""
    check_declared(bucket, name, limit=limit, ref_size=ref_size)
    stream = f"OBJ_{bucket}"
    try:
        raw = await js.get_last_msg(stream, meta_subject(bucket, name))
    except NotFoundError:  # no such bucket or no such object
        raise ObjectMissing(bucket, name, "does not exist") from None
    meta = parse_meta(bucket, name, raw.data or b"")
    check_declared(bucket, name, limit=limit, ref_size=ref_size, meta=meta)
    want = meta_digest(bucket, name, meta)
    buf = bytearray()
    h = hashlib.sha256()
    chunk_subject = f"$O.{bucket}.C.{meta.nuid}"
    seq, chunks = 1, 0
    while len(buf) < meta.size:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=chunk_subject, next=True)
        except NotFoundError:
            raise ObjectMissing(
                bucket, name, f"ends after {len(buf):,} of its {meta.size:,} bytes"
            ) from None
        data = msg.data or b""
        chunks += 1
        if len(buf) + len(data) > limit:
            raise ObjectTooLarge(
                bucket,
                name,
                f"holds over the {limit:,}-byte bundle limit ({BUNDLE_LIMIT_SETTING}): refused "
                f"after reading {len(buf) + len(data):,} bytes",
            )
        if len(buf) + len(data) > meta.size or chunks > meta.chunks:
            raise ObjectCorrupt(
                bucket,
                name,
                f"holds more than its declared {meta.size:,} bytes in {meta.chunks:,} chunks",
            )
        buf += data
        h.update(data)
        seq = (msg.seq or seq) + 1
    digest = h.digest()
    if digest != want or (ref_sha256 is not None and digest.hex() != ref_sha256):
        raise ObjectCorrupt(bucket, name, "holds bytes whose SHA-256 is not the declared one")
    return buf
