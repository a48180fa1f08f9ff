"""What the bus records of the clusters a plan is about, read once: per cluster and object,
the entry a planner starting now would rebuild from APPLIED, SERVER and OUTCOMES, and the scopes
each cluster's watcher reported from its discovery (its heartbeat on MEMBERS).

Each cluster's checkpoint first (``read_checkpoints``: one message per part, written by its
planner), then one read of each fact stream, whatever the number of clusters, from the lowest
sequence a checkpoint leaves out (the whole compacted view when a cluster has none): a plan of
one cluster filters on its subjects (``cluster_filter``), a fleet plan reads the whole family
(``family_filter``) and sorts the messages by the subject's cluster token, dropping other
clusters' and what a cluster's checkpoint already holds before decoding. Nothing here asks an
API server.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

from schemas.codec import WireError, applied_events, decode, server_events
from schemas.messages import AppliedEvent, KindScope, MemberHeartbeat, OutcomeEvent, ServerEvent
from schemas.subjects import (
    ObjectKey,
    family_filter,
    member_subject,
    object_subject,
)
from services.common import bus
from services.planner.rule import checkpoint, facts
from services.planner.rule.entry import Entry
from services.stored import checkpoints

log = logging.getLogger("driftbus.cli")

FACT_STREAMS = (
    (bus.APPLIED, "applied", AppliedEvent),
    (bus.SERVER, "server", ServerEvent),
    (bus.OUTCOMES, "outcome", OutcomeEvent),
)
"""The compacted streams a planner replays, in the order it folds them."""

BATCHED: dict[str, Callable[[str, bytes], Sequence[ServerEvent | AppliedEvent]]] = {
    "server": server_events,
    "applied": applied_events,
}
"""The fact streams whose messages may be batches (issue 44), and how each is unpacked."""

ClusterEntries = dict[str, dict[ObjectKey, Entry]]
"""Per cluster, per object, what the planner knows of it from the facts."""


async def known(
    js: bus.JetStream, clusters: Collection[str], *, checkpoints: bool = True
) -> ClusterEntries:
    """Per cluster of ``clusters``, per object, the entry a planner starting now would rebuild
    from the last fact of each stream: taken from the cluster's checkpoint, with the facts
    published since folded in, or, for a cluster with none (``checkpoints=False``: for every
    cluster), replayed from the streams. A stream not made yet (no planner has run on this
    bus) holds nothing."""
    found = await read_checkpoints(js, clusters) if checkpoints else {}
    got: dict[str, dict[ObjectKey, list[facts.Fact]]] = {c: {} for c in clusters}
    for s, family, kind in FACT_STREAMS:
        last = await _read(js, s, family, kind, clusters, found)
        for told in last.values():
            for cluster, fact in told:
                got[cluster].setdefault(fact.key, []).append(fact)
    out: ClusterEntries = {}
    for cluster, by_key in got.items():
        mine = found.get(cluster)
        entries = dict(mine.entries) if mine is not None else {}
        for key, tail in by_key.items():
            entry = entries.get(key) or Entry(key)
            for fact in tail:
                entry = facts.fold(entry, fact)
            entries[key] = checkpoint.said(entry) if mine is not None else entry
        out[cluster] = entries
    return out


async def read_checkpoints(
    js: bus.JetStream, clusters: Collection[str]
) -> dict[str, checkpoint.Checkpoint]:
    """The whole, current checkpoints of ``clusters`` (``rule.checkpoint.assemble``). One
    that claims more of a fact stream than the stream holds (the streams made anew, the
    checkpoints kept) is not used: facts after it would be missed."""
    wanted = set(clusters)
    parts = await checkpoints.parts(js, clusters)
    good, unusable = checkpoint.assemble(parts)
    for cluster, why in unusable.items():
        log.info("cluster %s: checkpoint not used (%s); reading its facts", cluster, why)
    if not good:
        return good
    held = {family: await _last_seq(js, s) for s, family, _ in FACT_STREAMS}
    return {
        c: cp
        for c, cp in good.items()
        if c in wanted and all(cp.read_up_to.get(f, 0) <= held[f] for f in held)
    }


async def _last_seq(js: bus.JetStream, stream: str) -> int:
    try:
        return await bus.last_sequence(js, stream)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
        return 0


async def _read(
    js: bus.JetStream,
    stream: str,
    family: str,
    kind: type[Any],
    clusters: Collection[str],
    found: dict[str, checkpoint.Checkpoint],
) -> dict[str, list[tuple[str, facts.Fact]]]:
    """The facts of one stream for ``clusters`` (others' dropped before decoding), above each
    cluster's checkpoint: every message from the lowest sequence a checkpoint leaves out, or
    the compacted view when one of them has none. Per object subject, the facts to fold in
    order: the last one of a compacted subject, every one a batch carries (``BATCHED``)."""
    covered = {c: cp.read_up_to.get(family, 0) for c, cp in found.items()}
    start = checkpoint.tail_start(found, clusters, family)
    out: dict[str, list[tuple[str, facts.Fact]]] = {}

    def take(m: bus.Message) -> None:
        cluster = checkpoints.cluster_in(m.subject)
        if cluster not in wanted:
            return
        if cluster in covered and bus.stream_sequence(m) <= covered[cluster]:
            return
        with contextlib.suppress(WireError):
            unpack = BATCHED.get(family)
            if unpack is None:
                out[m.subject] = [(cluster, cast(facts.Fact, decode(m.data, kind)))]
                return
            # a batch of facts (or one object's): every one, in stream order, folded as the
            # planner's rebuild folds them (a prune's fact after the apply it undoes)
            for ev in unpack(m.subject, m.data):
                out.setdefault(object_subject(family, cluster, ev.key), []).append((cluster, ev))

    wanted = set(clusters)
    await checkpoints.each_above(js, stream, checkpoints.subjects(family, clusters), start, take)
    return out


async def learned_scopes(
    js: bus.JetStream, clusters: Collection[str]
) -> dict[str, list[KindScope]]:
    """Per cluster, the scopes of the custom kinds its watcher serves, as its last heartbeat
    reported them (what its planner learns them from); a cluster with no watcher heard has
    none (built-in kinds and the bundle's own CRDs still key its objects)."""
    out: dict[str, list[KindScope]] = {c: [] for c in clusters}
    subject = (
        member_subject(next(iter(clusters)), "watcher")
        if len(clusters) == 1
        else family_filter("member")
    )
    try:
        async for m in bus.Follower(js, bus.MEMBERS, subject).snapshot():
            if not m.subject.endswith(".watcher") or checkpoints.cluster_in(m.subject) not in out:
                continue
            with contextlib.suppress(WireError):
                beat = decode(m.data, MemberHeartbeat)
                out[beat.cluster] = list(beat.scopes)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
    return out
