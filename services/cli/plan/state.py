"""What the bus records of the clusters a plan is about, read once: the last fact of each stream
the planner rebuilds from (APPLIED, SERVER, OUTCOMES) per cluster and object, and the scopes each
cluster's watcher reported from its discovery (its heartbeat on MEMBERS).

One snapshot per stream, whatever the number of clusters: a plan of one cluster filters on its
subjects (``cluster_filter``); a fleet plan reads the whole family once (``family_filter``) and
sorts the messages by the subject's cluster token, dropping other clusters' before decoding.
Nothing here asks an API server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any, cast

from schemas.codec import WireError, decode
from schemas.messages import AppliedEvent, KindScope, MemberHeartbeat, OutcomeEvent, ServerEvent
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    cluster_filter,
    decode_token,
    family_filter,
    member_subject,
)
from services.common import bus
from services.planner.rule import facts

FACT_STREAMS = (
    (bus.APPLIED, "applied", AppliedEvent),
    (bus.SERVER, "server", ServerEvent),
    (bus.OUTCOMES, "outcome", OutcomeEvent),
)
"""The compacted streams a planner replays, in the order it folds them."""

ClusterFacts = dict[str, dict[ObjectKey, list[facts.Fact]]]


def _filter(family: str, clusters: Collection[str]) -> str:
    return (
        cluster_filter(family, next(iter(clusters)))
        if len(clusters) == 1
        else (family_filter(family))
    )


def _cluster_of(subject: str, tokens: dict[str, str]) -> str:
    """The cluster a per-cluster subject names (``driftbus.<family>.<cluster>.…``), decoded once
    per distinct token; "" when it cannot be read."""
    token = subject.split(".", 3)[2]
    name = tokens.get(token)
    if name is None:
        try:
            name = decode_token(token)
        except SubjectError:
            name = ""
        tokens[token] = name
    return name


async def known(js: bus.JetStream, clusters: Collection[str]) -> ClusterFacts:
    """Per cluster of ``clusters``, per object, the last fact of each stream the planner
    rebuilds from, in that order: the compacted view a planner starting now would replay. A
    stream not made yet (no planner has run on this bus) holds nothing."""
    tokens: dict[str, str] = {}
    got = [await _read(js, s, family, kind, clusters, tokens) for s, family, kind in FACT_STREAMS]
    out: ClusterFacts = {c: {} for c in clusters}
    for read in got:
        for cluster, fact in read:
            out[cluster].setdefault(fact.key, []).append(fact)
    return out


async def _read(
    js: bus.JetStream,
    stream: str,
    family: str,
    kind: type[Any],
    clusters: Collection[str],
    tokens: dict[str, str],
) -> list[tuple[str, facts.Fact]]:
    """The facts of one stream for ``clusters`` (others' dropped before decoding)."""
    wanted = set(clusters)
    out: list[tuple[str, facts.Fact]] = []

    def take(m: bus.Message) -> None:
        cluster = _cluster_of(m.subject, tokens)
        if cluster in wanted:
            with contextlib.suppress(WireError):
                out.append((cluster, cast(facts.Fact, decode(m.data, kind))))

    try:
        await bus.Follower(js, stream, _filter(family, clusters)).each(take)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
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
    tokens: dict[str, str] = {}
    try:
        async for m in bus.Follower(js, bus.MEMBERS, subject).snapshot():
            if not m.subject.endswith(".watcher") or _cluster_of(m.subject, tokens) not in out:
                continue
            with contextlib.suppress(WireError):
                beat = decode(m.data, MemberHeartbeat)
                out[beat.cluster] = list(beat.scopes)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
    return out
