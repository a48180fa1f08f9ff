"""Publish a fact to a compacted stream only if it is newer than the one the stream keeps.

SERVER and APPLIED keep one message per object (``max_msgs_per_subject=1``): the last
*published*, not the newest. With two watchers active-active, the lagging one's stale fact could
land after the fresh one and be the survivor a restarted planner believes (it would see a drift
that was already corrected as not there). Two appliers finishing out of order do the same to
APPLIED. So a fact is published with ``Nats-Expected-Last-Subject-Sequence`` set to the sequence
of the message it was compared with: if anyone published on the subject meanwhile, JetStream
refuses it, the last message is read again and compared again. A fact older than the survivor
is dropped, and the caller learns what the stream holds instead.

A retry of a publish that did land is either refused as a wrong sequence (a single server
checks the sequence before ``Nats-Msg-Id`` deduplication) or acknowledged as a duplicate (a
clustered stream deduplicates first). Either way the survivor is read again: our own message id
there counts as landed, a newer fact than ours as not.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from services.common import bus
from services.common.bus import COMPARE_REFUSED, BusError, Publisher, last_message

EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
MAX_RACES = 20
"""Rounds of compare-and-publish before giving up: each lost round means another writer landed
a message on the same subject in between (or a lagging replica answered the read), which cannot
go on for the ~15 s the backoff between rounds adds up to."""


@dataclasses.dataclass(frozen=True, slots=True)
class Survivor:
    """What the stream keeps for the subject after ``publish_newest``."""

    seq: int
    """its stream sequence (0: nothing; the next compare expects an empty subject; -1: not
    known, a batched publish landed)"""
    landed: bool
    """ours landed (or already had); otherwise ``data`` is the newer fact that stays"""
    data: bytes


async def publish_newest(
    pub: Publisher,
    js: bus.JetStream,
    stream: str,
    subject: str,
    data: bytes,
    *,
    msg_id: str,
    supersedes: Callable[[bytes], bool],
    last_seq: int | None = None,
    batched: bool = False,
) -> Survivor:
    """Publish ``data`` unless the subject's last message is newer.

    ``supersedes(other)`` says whether our fact is newer than ``other`` (a message's payload).
    ``last_seq`` is the sequence of the last message the caller knows on the subject (0: none);
    when ``None`` the last message is read first. ``batched``: the publish goes in the stream's
    fast batch (a refusal still comes back, from the one-by-one retry of what the batch did not
    confirm); the survivor's sequence is then unknown (-1), and a repeat of ours counts as
    landed: for a caller that only needs its fact to land if it is the newest (an applier).
    """
    expected = last_seq
    backoff = 0.01
    for _ in range(MAX_RACES):
        if expected is None:
            # a direct get may be answered by a replica that lags a moment behind the leader
            # (R3 streams): then the compare fails again and we read again, a little later
            last = await pub.retrying(
                f"reading the last message of {subject}",
                lambda: last_message(js, stream, subject),
            )
            if last is None:
                expected = 0
            else:
                seq = int(last.seq or 0)
                ours = (last.headers or {}).get("Nats-Msg-Id") == msg_id
                if ours or not supersedes(last.data or b""):
                    return Survivor(seq, ours, last.data or b"")
                expected = seq
        headers = {EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected)}
        if batched:
            try:
                await (
                    await pub.publish_batched(stream, subject, data, msg_id=msg_id, headers=headers)
                )
                return Survivor(-1, True, data)
            except bus.ApiError as exc:
                if exc.err_code not in COMPARE_REFUSED:
                    raise
            expected = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            continue
        task = await pub.publish(subject, data, msg_id=msg_id, headers=headers)
        ack: bus.PublishAck | None
        try:
            ack = await task
        except bus.ApiError as exc:
            if exc.err_code not in COMPARE_REFUSED:
                raise
            ack = None
        if ack is not None and not ack.duplicate:
            return Survivor(int(ack.seq), True, data)
        # Refused (someone else published on the subject), or a duplicate of ours that landed
        # earlier and may have been replaced since: read the survivor and compare again.
        expected = None
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 1.0)
    raise BusError(f"publish to {subject}: lost {MAX_RACES} races with other writers in a row")
