"""Key-value buckets as the services use them (DESIGN §12: every NATS call goes through
``services/common/bus``): an entry and its revision, create-if-absent, compare-and-set update,
put, delete, keys. (The NATS types callers name are in ``natstypes``.)

Two doors to the same calls. By the bucket's name (``kv_*``): the bucket is looked up on each
call, for one-off reads and writes. On a bucket held open (``bucket``, then ``*_entry``): for a
writer that writes every few seconds (the planner's heartbeat and claims), one lookup in all.
A bucket that does not exist is ``BucketMissing`` either way.

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
from nats.js.kv import KeyValue


class BucketMissing(LookupError):
    """The bucket does not exist (yet: the planner makes the buckets)."""


@dataclasses.dataclass(frozen=True)
class KvEntry:
    revision: int
    value: bytes


async def bucket(js: JetStreamContext, name: str) -> KeyValue:
    """The bucket ``name``, to hold open (its lookup is a request to the server)."""
    try:
        return await js.key_value(name)
    except BucketNotFoundError:
        raise BucketMissing(f"the {name} bucket does not exist yet") from None


async def read_entry(kv: KeyValue, key: str) -> KvEntry | None:
    """The entry of ``key`` in a held bucket (None: absent or deleted)."""
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:  # a deleted or purged key too (KeyDeletedError is one)
        return None
    return KvEntry(int(entry.revision or 0), entry.value or b"")


async def put_entry(kv: KeyValue, key: str, value: bytes) -> int:
    """Write ``value`` whatever ``key`` holds; its new revision."""
    return int(await kv.put(key, value))


async def create_entry(kv: KeyValue, key: str, value: bytes) -> int | None:
    """Create ``key`` with ``value``; its revision, or None when it exists already."""
    try:
        return int(await kv.create(key, value))
    except KeyWrongLastSequenceError:
        return None


async def update_entry(kv: KeyValue, key: str, value: bytes, *, last: int) -> int | None:
    """Write ``value`` if ``key`` is still at revision ``last``; the new revision, or None when
    another writer came first."""
    try:
        return int(await kv.update(key, value, last=last))
    except KeyWrongLastSequenceError:
        return None


async def delete_entry(kv: KeyValue, key: str, *, last: int | None = None) -> None:
    """Delete ``key`` (a deletion marker stays: followers see it was removed); with ``last``,
    only while it is at that revision (else JetStream refuses: ``ApiError``)."""
    await kv.delete(key, last=last)


async def kv_get(js: JetStreamContext, bucket_name: str, key: str) -> KvEntry | None:
    """The entry of ``key`` (None: absent or deleted)."""
    return await read_entry(await bucket(js, bucket_name), key)


async def kv_put(js: JetStreamContext, bucket_name: str, key: str, value: bytes) -> int:
    """Write ``value`` whatever ``key`` holds; its new revision."""
    return await put_entry(await bucket(js, bucket_name), key, value)


async def kv_create(js: JetStreamContext, bucket_name: str, key: str, value: bytes) -> int | None:
    """Create ``key`` with ``value``; its revision, or None when it exists already."""
    return await create_entry(await bucket(js, bucket_name), key, value)


async def kv_update(
    js: JetStreamContext, bucket_name: str, key: str, value: bytes, *, last: int
) -> int | None:
    """Write ``value`` if ``key`` is still at revision ``last``; the new revision, or None when
    another writer came first."""
    return await update_entry(await bucket(js, bucket_name), key, value, last=last)


async def kv_delete(js: JetStreamContext, bucket_name: str, key: str) -> None:
    """Delete ``key`` (a deletion marker stays: followers see it was removed)."""
    await delete_entry(await bucket(js, bucket_name), key)


async def kv_keys(js: JetStreamContext, bucket_name: str) -> list[str]:
    """Every key of the bucket ([] when it has none)."""
    kv = await bucket(js, bucket_name)
    try:
        return list(await kv.keys())
    except NoKeysError:
        return []
