"""The checkpoint parts of some clusters, as CHECKPOINTS holds them now (the last of each part):
what ``driftbus plan`` and ``facts`` assemble (``schemas.checkpoint.whole``). A planner
taking one cluster reads its parts by direct gets instead (``planner.shell.inbox``)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Collection

from schemas.checkpoint import CheckpointError, CheckpointPart, decode_part
from schemas.subjects import SubjectError, cluster_filter, decode_token, family_filter
from services.common import bus


def subjects(family: str, clusters: Collection[str] | None) -> str:
    """One cluster's subjects of ``family``, or every cluster's (a fleet, or all)."""
    if clusters is not None and len(clusters) == 1:
        return cluster_filter(family, next(iter(clusters)))
    return family_filter(family)


@functools.lru_cache(maxsize=65536)
def cluster_of(subject_token: str) -> str:
    """The cluster a subject's third token names ("" when it cannot be read)."""
    with contextlib.suppress(SubjectError):
        return decode_token(subject_token)
    return ""


def cluster_in(subject: str) -> str:
    """The cluster of a per-cluster subject (``driftbus.<family>.<cluster>.…``)."""
    parts = subject.split(".", 3)
    return cluster_of(parts[2]) if len(parts) > 2 else ""


async def each_above(
    js: bus.JetStream,
    stream: str,
    subjects: str,
    start: int,
    take: Callable[[bus.Message], None],
) -> None:
    """Hand ``take`` every message of ``stream`` on ``subjects`` from sequence ``start`` (the
    compacted view, last per subject, when ``start`` is 1: nothing is covered); nothing before
    the stream exists. What a reader of a checkpoint's tail reads."""
    follower = (
        bus.Follower(js, stream, subjects)
        if start <= 1
        else bus.Follower(js, stream, subjects, start_seq=start)
    )
    try:
        await follower.each(take)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise


async def parts(js: bus.JetStream, clusters: Collection[str] | None) -> list[CheckpointPart]:
    """The readable parts of the checkpoints of ``clusters`` (None: every cluster's); none
    before the stream exists. A part this build cannot read is left out (its checkpoint is then
    not whole)."""
    wanted = None if clusters is None else set(clusters)
    found: list[CheckpointPart] = []

    def take(m: bus.Message) -> None:
        if wanted is None or cluster_in(m.subject) in wanted:
            with contextlib.suppress(CheckpointError):
                found.append(decode_part(m.data))

    try:
        await bus.Follower(js, bus.CHECKPOINTS, subjects("checkpoint", clusters)).each(take)
    except bus.StreamMissing as exc:
        if exc.err_code != bus.STREAM_NOT_FOUND:
            raise
    return found
