"""Which overdue intents are lost: one look at the cluster for all of them.

An intent that got no word for ``intent_timeout`` may be lost (its publish never landed, a
dedup-window collision, a crash between ack and fact, a queue restored from an old backup) and
must be sent again, or the object's healing stays silent for good. It is not lost while it is
still queued (a batch's intents wait together; an applier holds a batch until each has its
fact), nor when its fact is on the bus and the planner's followers have not delivered it yet:
an applier publishes its report *before* it acks, and the ack takes the intent off the queue
at once.

A round looks once for every overdue object (``look``): the subjects of the cluster's queued
intents (one stream-info request, ``intent_batches.queued_subjects``), then the unread tail of
its facts (a few direct gets past what the planner folded; read after the queue, so a fact
whose intent just left it is always seen). Asked object by object, as before, a round over the
87,348 overdue objects of a planner that had just claimed its cluster again took minutes of
NATS requests and began again as soon as it ended (the `memory` benchmark of 2026-11-30).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Collection, Mapping

from schemas.codec import WireError, applied_events, decode
from schemas.messages import OutcomeEvent
from schemas.subjects import cluster_filter
from schemas.tokens import ObjectKey
from services.common import bus
from services.planner.shell.intent_batches import queued_subjects

log = logging.getLogger("driftbus.planner")

UNREAD_TAIL = 64
"""Messages of each fact stream read past what the planner folded; a longer tail means its
followers are behind, and the round waits for them (every overdue fact may be among them)."""


@dataclasses.dataclass(frozen=True)
class Look:
    """What one round saw of a cluster."""

    queued: frozenset[str]
    """The subjects of the cluster's queued intents (and of its batches still landing)."""
    unread: frozenset[ObjectKey] | None
    """The objects named by a fact not folded yet; None: too many to read (any may be)."""


class Verdict(enum.Enum):
    QUEUED = "queued"
    """Still queued (its batch, or itself on its subject): not lost; its clock starts again."""
    ASK = "ask"
    """An intent is queued on its own subject, maybe an older one: read it."""
    ANSWERED = "answered"
    """Not queued, but its fact waits in the planner's followers."""
    LOST = "lost"
    """Neither queued nor answered: send it again."""


def verdict(
    key: ObjectKey, batch: str | None, own_subject: str, look: Look, *, doubtful: bool = True
) -> Verdict:
    """What became of an object's overdue intent: ``batch`` the subject of the batch that
    carried it (None: sent alone), ``own_subject`` the object's intent subject; ``doubtful``:
    what waits on that subject may be an older intent (its latest one sent alone did not
    land, or nobody kept count): it is read. Otherwise the stream keeps the newest per
    subject, and the newest is the planner's latest."""
    if batch is not None and batch in look.queued:
        return Verdict.QUEUED
    if own_subject in look.queued:
        return Verdict.ASK if doubtful else Verdict.QUEUED
    if look.unread is None or key in look.unread:
        return Verdict.ANSWERED
    return Verdict.LOST


async def look(
    js: bus.JetStream,
    cluster: str,
    read_up_to: Mapping[str, int],
    landing: Collection[str] = (),
) -> Look | None:
    """The round's look at ``cluster`` (None: NATS cannot say now; ask again next round).
    ``landing``: subjects of batches sent and not yet durable, which count as queued (taken
    before the queue is read: one that lands meanwhile is in one or the other)."""
    sending = frozenset(landing)
    queued = await queued_subjects(js, cluster)
    if queued is None:
        return None
    queued |= sending
    try:
        unread = await _unread(js, cluster, read_up_to)
    except Exception as exc:  # noqa: BLE001 - NATS away: ask again next round
        log.debug("cluster %s: unread facts not read: %s", cluster, exc)
        return None
    return Look(queued, unread)


async def _unread(
    js: bus.JetStream, cluster: str, read_up_to: Mapping[str, int]
) -> frozenset[ObjectKey] | None:
    keys: set[ObjectKey] = set()
    for stream, kind in ((bus.APPLIED, "applied"), (bus.OUTCOMES, "outcome")):
        subjects = cluster_filter(kind, cluster)
        seq = read_up_to.get(stream, 0) + 1
        for _ in range(UNREAD_TAIL):
            got = await bus.next_message(js, stream, subjects, seq)
            if got is None or got.seq is None:
                break
            keys.update(_named(stream, got.subject or "", got.data or b""))
            seq = got.seq + 1
        else:
            return None
    return frozenset(keys)


def _named(stream: str, subject: str, data: bytes) -> list[ObjectKey]:
    """The objects a fact message names (none if it cannot be read: the planner reports it
    when its follower delivers it)."""
    try:
        if stream == bus.APPLIED:
            return [ap.key for ap in applied_events(subject, data)]
        return [decode(data, OutcomeEvent).key]
    except WireError:
        return []
