"""What one planner replica writes to the shards bucket (DESIGN §8): its heartbeat, its claims and
their release, each a compare-and-set on the entry's revision, and the entries of the dead.

The claim loop (``claims``) decides what to write; this module only writes and says what came of
it (the new revision, or None when another replica's write came first).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Iterable

import orjson

from services.common import bus

log = logging.getLogger("driftbus.shards")


class ShardBucket:
    """The bucket's writes for replica ``me``; ``kv`` is the bucket itself, for reads."""

    def __init__(self, *, kv: bus.Bucket, me: str, clock: Callable[[], float]) -> None:
        self.kv = kv
        self.me = me
        self._clock = clock
        self._heartbeat_rev = 0

    @classmethod
    async def open(cls, js: bus.JetStream, *, me: str, clock: Callable[[], float]) -> ShardBucket:
        """The bucket, once it exists (whoever creates the streams creates it)."""
        while True:
            try:
                return cls(kv=await bus.bucket(js, bus.SHARDS_BUCKET), me=me, clock=clock)
            except bus.BucketMissing:
                await asyncio.sleep(0.5)

    async def heartbeat(self, clusters: Iterable[str], *, ready: bool) -> float | None:
        """Rewrite our entry; returns when it was sent (None: it failed)."""
        sent = self._clock()
        value = orjson.dumps(
            {
                "planner": self.me,
                "clusters": sorted(clusters),
                "ready": ready,  # it has completed a claim round
                "at": _now_iso(),
            }
        )
        key = bus.heartbeat_key(self.me)
        try:
            if self._heartbeat_rev:
                rev = await bus.update_entry(self.kv, key, value, last=self._heartbeat_rev)
            else:
                rev = await bus.put_entry(self.kv, key, value)
        except (bus.NatsError, TimeoutError) as exc:
            log.warning("heartbeat failed: %s: %s", type(exc).__name__, exc)
            return None
        if rev is None:  # a failure of this put is raised, not logged
            log.error(
                "heartbeat entry of %s changed under us: is another replica using the same "
                "planner id? ids must be unique",
                self.me,
            )
            rev = await bus.put_entry(self.kv, key, value)
        self._heartbeat_rev = rev
        return sent

    async def claim(self, cluster: str, *, last: int | None) -> int | None:
        """Claim ``cluster``: create its entry (``last=None``: never claimed) or overwrite the
        one at revision ``last``. The new revision (our fencing token), or None: another
        replica claimed it first."""
        value = orjson.dumps({"planner": self.me, "at": _now_iso()})
        rev = await bus.take(self.kv, bus.claim_key(cluster), value, last=last)
        if rev is None:
            log.info("cluster %s: another replica claimed it first", cluster)
        return rev

    async def free(self, cluster: str, token: int) -> int | None:
        """Release our claim made at revision ``token``; the new revision, or None when the
        claim was already taken from us."""
        value = orjson.dumps({"planner": "", "released_by": self.me, "at": _now_iso()})
        return await bus.take(self.kv, bus.claim_key(cluster), value, last=token)

    async def remove_heartbeat(self, planner_id: str, revision: int) -> None:
        """Delete a dead replica's entry, unless it changed since ``revision`` (it came back)."""
        await bus.delete_entry(self.kv, bus.heartbeat_key(planner_id), last=revision)

    async def leave(self) -> None:
        """Delete our own heartbeat entry (shutting down), if we ever wrote it."""
        if self._heartbeat_rev:
            await bus.delete_entry(self.kv, bus.heartbeat_key(self.me), last=self._heartbeat_rev)


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
