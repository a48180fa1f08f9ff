"""A cluster's apply intents, sent together (issue 44: objects share messages).

Alone, each intent was a message, its acknowledgement and a delivery to an applier. Here the
apply intents the rule decides within ``LINGER`` seconds of the first are one ``IntentBatch`` on
``driftbus.intent.<cluster>.batch.<id>``, in the order decided (apply order: Namespaces first).
A batch holds at most ``MOST`` intents and ``MAX_BYTES``: small enough that a cold apply is many
batches, so every applier has work (adding appliers still scales), big enough that the messages
per object are a few hundredths.

Only an apply of an object driftbus never wrote nor saw, with nothing in flight, goes in a batch
(``sending.may_batch``): the stream cannot replace one item of a batch, so every other intent —
a delete, an update, one that supersedes an intent in flight — goes alone on the object's
subject, where the stream keeps the newest and a newer intent replaces a queued older one. An
applier that waited with a batch's intent asks that subject before acting (``applier.service``).

The planner remembers which batch carries each object's intent (``queued_in``) until the
lost-intent check asks: a batch still queued is not a lost intent. Publishing is not awaited
here, as a single intent's was not: an intent whose batch never landed is found by that check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from schemas.codec import encode
from schemas.messages import ApplyIntent, IntentBatch
from schemas.subjects import batch_subject, cluster_filter, is_batch_subject, object_subject
from services.common import bus
from services.planner.rule.entry import Slot
from services.planner.settings import PlannerSettings

log = logging.getLogger("driftbus.planner")

LINGER: Final = 0.005
"""Seconds a batch waits after its first intent for others (a burst of decisions is a few
milliseconds of the planner's time per hundred objects)."""
MOST: Final = 32
"""The most intents one batch carries: a cold apply of 1,000 objects is about 32 batches, which
four appliers of 16 slots each share evenly."""
MAX_BYTES: Final = 512 * 1024
"""The most bytes of intents one batch carries (NATS refuses a message above 1 MiB)."""


SUBJECTS_PAGE: Final = 100_000
"""The most subjects nats-server lists in one stream info (``JSMaxSubjectDetails``): a list that
long may be cut short, so it says nothing for sure."""


async def queued_subjects(js: bus.JetStream, cluster: str) -> frozenset[str] | None:
    """The subjects ``cluster``'s queued intents are on (batches' and single intents'), by one
    request whatever their number; None when NATS cannot say (away, or more than a page)."""
    try:
        subjects = await bus.stream_subjects(js, bus.INTENTS, cluster_filter("intent", cluster))
    except Exception as exc:  # noqa: BLE001 - unknown: the caller assumes the worst
        log.debug("cluster %s: intent queue not read: %s", cluster, exc)
        return None
    return None if len(subjects) >= SUBJECTS_PAGE else frozenset(subjects)


Lone = frozenset[str] | None
"""The subjects of a cluster's single intents queued (None: unknown)."""


async def queued_alone(js: bus.JetStream, cluster: str) -> Lone:
    """The subjects of ``cluster``'s single intents queued (None: unknown). Going live, an
    apply batched must not overtake an older intent of its object queued alone (a newer single
    one would replace it). Queued batches of an earlier claim do not count: their fencing
    token is older, and appliers drop them."""
    for attempt in range(1, 4):  # unknown, every intent of the go-live goes alone: ask again
        if (queued := await queued_subjects(js, cluster)) is not None:
            return alone(queued)
        if attempt < 3:
            await asyncio.sleep(attempt)
    return None


def none_alone(slot: Slot, lone: Lone) -> bool:
    """Whether no single intent of the object is queued (``lone``: ``queued_alone``'s)."""
    return lone is not None and not (lone and object_subject("intent", *slot) in lone)


def alone(subjects: frozenset[str]) -> frozenset[str]:
    """The subjects of single intents among ``subjects`` (an object's own, not a batch's)."""
    return frozenset(s for s in subjects if not is_batch_subject(s))


class IntentBatches:
    """Collects one cluster's apply intents into batches (module doc)."""

    def __init__(
        self,
        publisher: bus.Publisher,
        *,
        cluster: str,
        planner_id: str,
        linger: float = LINGER,
        most: int = MOST,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.pub = publisher
        self.cluster = cluster
        self.planner_id = planner_id
        self.linger = linger
        self.most = max(1, most)
        self.max_bytes = max_bytes
        self.sent = 0
        """Batches published."""
        self.queued_in: dict[Slot, str] = {}
        """The subject of the batch that carries each object's latest batched intent."""
        self.landing: set[str] = set()
        """Subjects of the batches sent and not yet durable: not on the queue, not lost."""
        self.doubtful: set[Slot] = set()
        """Objects whose latest intent sent alone did not land: what is queued on their subject
        may be an older one (the lost-intent check reads it). Any other's is its latest."""
        self._waiting: list[tuple[Slot, ApplyIntent, dict[str, str], int]] = []
        self._bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self.before_send: Callable[[], Awaitable[None]] = _nothing
        """Awaited as a batch is sent, before it is published: the decision records of its
        intents go on the bus first (publish order is wire order)."""

    @classmethod
    def configured(
        cls, publisher: bus.Publisher, cluster: str, settings: PlannerSettings
    ) -> IntentBatches | None:
        """The cluster's batches as ``--batch-intents`` says (1: none, every intent alone)."""
        if settings.batch_intents <= 1:
            return None
        return cls(
            publisher, cluster=cluster, planner_id=settings.planner_id, most=settings.batch_intents
        )

    def add(self, slot: Slot, intent: ApplyIntent, size: int, trace: dict[str, str]) -> None:
        """Send ``intent`` (about ``size`` bytes encoded) in the next batch."""
        if self._waiting and self._bytes + size > self.max_bytes:
            self.flush()
        self._waiting.append((slot, intent, trace, size))
        self._bytes += size
        if len(self._waiting) >= self.most:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.linger, self.flush)

    def withdraw(self, slot: Slot) -> None:
        """Take the object's intent out of the batch not sent yet: a newer one replaces it."""
        if any(w[0] == slot for w in self._waiting):
            self._waiting = [w for w in self._waiting if w[0] != slot]
            self._bytes = sum(w[3] for w in self._waiting)
        self.queued_in.pop(slot, None)

    def forget(self, slot: Slot) -> None:
        """The object's batched intent is settled (or superseded): nothing to look up."""
        self.queued_in.pop(slot, None)
        self.doubtful.discard(slot)

    def sent_alone(self, slot: Slot, durable: asyncio.Future[Any]) -> None:
        """An intent of the object went alone on its subject; ``durable`` resolves once it
        landed (or raises: then an older one may be what waits there)."""

        def landed(task: asyncio.Future[Any]) -> None:
            if task.cancelled() or task.exception() is not None:
                self.doubtful.add(slot)
            else:
                self.doubtful.discard(slot)

        durable.add_done_callback(landed)

    def flush(self) -> None:
        """Publish what waits, now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._waiting, self._bytes = self._waiting, [], 0
        if not batch:
            return
        subject = batch_subject("intent", self.cluster, bus.unique_id())
        for slot, *_ in batch:
            self.queued_in[slot] = subject
        message = IntentBatch(
            cluster=self.cluster,
            intents=[w[1] for w in batch],
            traces=[w[2] for w in batch] if any(w[2] for w in batch) else [],
            planner=self.planner_id,
        )
        self.landing.add(subject)
        task = asyncio.create_task(self._send(subject, encode(message)), name="intent batch")
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, subject: str, data: bytes) -> None:
        try:
            await self.before_send()
            # a new subject per batch, and its Nats-Msg-Id: a retry across a reconnect lands once
            # in the INTENTS fast batch: after the records its ``before_send`` published
            await (await self.pub.publish_batched(bus.INTENTS, subject, data, msg_id=subject))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the lost-intent check sends its intents again
            log.warning("cluster %s: an intent batch was not published: %s", self.cluster, exc)
            return
        finally:
            self.landing.discard(subject)
        self.sent += 1

    async def drain(self) -> None:
        """Publish what waits and wait for it (a planner stopping, a test)."""
        self.flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


async def _nothing() -> None:
    return None
