"""Key-value buckets as the services use them (DESIGN §12: every NATS call goes through
``services/common/bus``): an entry and its revision, create-if-absent, compare-and-set update,
put, delete, keys. (The NATS types callers name are in ``natstypes``.)

A lost compare-and-set is an answer (``None``), not an error: the caller reads again and decides.
"""

from __future__ import annotations

import dataclasses

from nats.js import JetStreamContext
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)


class BucketMissing(LookupError):
    """The bucket does not exist (yet: the planner makes the buckets)."""


@dataclasses.dataclass(frozen=True)
class KvEntry:
    revision: int
    value: bytes


async def _bucket(js: JetStreamContext, bucket: str):  # type: ignore[no-untyped-def]
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        raise BucketMissing(f"the {bucket} bucket does not exist yet") from None


async def kv_get(js: JetStreamContext, bucket: str, key: str) -> KvEntry | None:
    """The entry of ``key`` (None: absent or deleted)."""
    kv = await _bucket(js, bucket)
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return KvEntry(int(entry.revision or 0), entry.value or b"")


async def kv_create(js: JetStreamContext, bucket: str, key: str, value: bytes) -> int | None:
    """Create ``key`` with ``value``; its revision, or None when it exists already."""
    kv = await _bucket(js, bucket)
    try:
        return int(await kv.create(key, value))
    except KeyWrongLastSequenceError:
        return None


async def kv_update(
    js: JetStreamContext, bucket: str, key: str, value: bytes, *, last: int
) -> int | None:
    """Write ``value`` if ``key`` is still at revision ``last``; the new revision, or None when
    another writer came first."""
    kv = await _bucket(js, bucket)
    try:
        return int(await kv.update(key, value, last=last))
    except KeyWrongLastSequenceError:
        return None


async def kv_delete(js: JetStreamContext, bucket: str, key: str) -> None:
    """Delete ``key`` (a deletion marker stays: followers see it was removed)."""
    kv = await _bucket(js, bucket)
    await kv.delete(key)


async def kv_keys(js: JetStreamContext, bucket: str) -> list[str]:
    """Every key of the bucket ([] when it has none)."""
    kv = await _bucket(js, bucket)
    try:
        return list(await kv.keys())
    except NoKeysError:
        return []
