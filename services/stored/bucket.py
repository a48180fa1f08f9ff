"""A ``Document[T]`` kept in a KV bucket under a key: put, read, and followed live keeping its
last good value (every call through ``services.common.bus``).

A setting is state on the bus, not a file each process reads: a change reaches every process at
once and needs no restart, and the bucket keeps earlier versions for an audit. What a reader
holds when the latest version is unusable is the setting's choice: the sync windows keep the
last good one (a deny window is never dropped for a typo: ``last_good``, ``Following``); the
tenant policy and a notifications configuration fail closed (``value_of`` raises, the caller
holds nothing).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final, Generic, TypeVar

import msgspec

from services.common import bus
from services.stored.document import Document, Good

T = TypeVar("T", bound=msgspec.Struct)

_REMOVED: Final = ("DEL", "PURGE")


class Unreadable(RuntimeError):
    """The bus did not say what is stored (it refused, or did not answer: a refused read times
    out in nats-py)."""


@dataclasses.dataclass(frozen=True)
class Kept(Generic[T]):
    """Where a document is kept: its bucket and key, and how the bucket is made."""

    document: Document[T]
    bucket: str
    key: str
    ensure: Callable[[bus.JetStream], Awaitable[None]]
    """Makes the bucket if it is not there (``bus.ensure_config_buckets``, …)."""

    @property
    def stream(self) -> str:
        return f"KV_{self.bucket}"

    @property
    def subject(self) -> str:
        """The subject the entry is stored under (what a follower follows)."""
        return f"$KV.{self.bucket}.{self.key}"

    async def put(self, js: bus.JetStream, value: T) -> int:
        """Store ``value`` as the one in force; its revision (the KV sequence)."""
        await self.ensure(js)
        return await bus.kv_put(js, self.bucket, self.key, self.document.dump(value))

    async def stored(self, js: bus.JetStream) -> bytes | None:
        """The bytes in force (None: none stored, or no bucket yet); Unreadable if the bus
        does not say."""
        try:
            entry = await bus.kv_get(js, self.bucket, self.key)
        except bus.BucketMissing:
            return None
        except (bus.NatsTimeout, bus.NatsError) as exc:
            raise Unreadable(
                f"cannot read {self.key} in the {self.bucket} bucket ({type(exc).__name__}: "
                f"{exc}); may this NATS identity read it?"
            ) from None
        return None if entry is None else entry.value

    async def read(self, js: bus.JetStream) -> T:
        """The document in force (none stored: the empty one); the document's error if it is
        unusable, Unreadable if the bus does not say."""
        return self.document.decode(await self.stored(js) or b"")

    async def last_good(self, js: bus.JetStream) -> Good[T]:
        """What a follower of every stored version holds now: the last usable one, and why
        the latest is unusable."""
        if await self.stored(js) is None:
            return Good(self.document.kind())
        follower = bus.Follower(js, self.stream, self.subject, history=True)
        return self.document.last_good([m.data or b"" async for m in follower.snapshot()])

    def value_of(self, msg: bus.Message) -> T:
        """The document a message of the bucket's stream carries (a removal: the empty one);
        the document's error if it is unusable."""
        return self.document.decode(b"" if removed(msg) else msg.data or b"")

    def following(self, js: bus.JetStream) -> Following[T]:
        return Following(self, js)


class Following(Generic[T]):
    """Every stored version of a document, in order, as the last good value it leaves: an
    unusable version keeps the value before it and says why (``Good.problem``).
    ``caught_up`` is set once every version stored when following began was read."""

    def __init__(self, kept: Kept[T], js: bus.JetStream) -> None:
        self._kept = kept
        self._follower = bus.Follower(js, kept.stream, kept.subject, history=True)
        self.caught_up: asyncio.Event = self._follower.caught_up
        self.good: Good[T] = Good(kept.document.kind())

    async def versions(self) -> AsyncIterator[Good[T]]:
        """What is held after each stored version, as it is stored."""
        async for msg in self._follower.messages():
            data = b"" if removed(msg) else msg.data or b""
            self.good = self._kept.document.after(self.good, data)
            yield self.good


def removed(msg: bus.Message) -> bool:
    """Whether a message of a KV stream is a removal (deleted or purged)."""
    return (msg.headers or {}).get("KV-Operation") in _REMOVED
