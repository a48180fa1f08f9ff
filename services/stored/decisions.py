"""The decision records of one object, or of every object of a name, as the DECISIONS stream
holds them (``driftbus why``, the status page's object detail).

Planners send records together (issue 44): one ``DecisionRecords`` per shelf and moment on
``driftbus.decision.<c>.batch.<shelf>.<id>``, the shelf a hex digit of the object's namespace
and name (``schemas.subjects.decision_shelf``). Planners before it sent one record per object on
``driftbus.decision.<c>.<key>``, and those stay until the stream's age limit. A reader takes
both: the object's own subject, and the one shelf its name is on (a sixteenth of the cluster's
log), each message once, in the stream's order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from schemas.codec import WireError, decision_records
from schemas.decision import DecisionRecord
from schemas.subjects import (
    ObjectKey,
    decision_shelf,
    decision_shelf_filter,
    decisions_named_filter,
    object_subject,
)
from services.common import bus


async def history(js: bus.JetStream, cluster: str, key: ObjectKey) -> list[DecisionRecord]:
    """Every decision about one object, oldest first (the DECISIONS stream keeps history)."""
    found = await _read(
        js,
        cluster,
        object_subject("decision", cluster, key),
        key.namespace,
        key.name,
        lambda r: r.key == key,
    )
    return [r for _, r in found]


async def named(
    js: bus.JetStream, cluster: str, namespace: str, name: str
) -> dict[ObjectKey, list[DecisionRecord]]:
    """Every object of ``cluster`` called ``namespace/name``, of any group and kind, with a
    decision on the bus, in the order first decided, each with its decisions oldest first: one
    read of the name's shelf answers both questions ``why`` asks (which object, and what was
    decided about it)."""
    found = await _read(
        js,
        cluster,
        decisions_named_filter(cluster, namespace, name),
        namespace,
        name,
        lambda r: r.key.namespace == namespace and r.key.name == name,
    )
    by_key: dict[ObjectKey, list[DecisionRecord]] = {}
    for _, r in found:
        by_key.setdefault(r.key, []).append(r)
    return by_key


async def _read(
    js: bus.JetStream,
    cluster: str,
    alone: str,
    namespace: str,
    name: str,
    wanted: Callable[[DecisionRecord], bool],
) -> list[tuple[int, DecisionRecord]]:
    """The wanted records of the messages on ``alone`` (one record each) and on the name's
    shelf, by stream sequence (a message's records in their order)."""
    found: list[tuple[int, DecisionRecord]] = []
    for subject in (alone, decision_shelf_filter(cluster, decision_shelf(namespace, name))):
        with contextlib.suppress(bus.StreamMissing):
            async for m in bus.Follower(js, bus.DECISIONS, subject, history=True).snapshot():
                try:
                    records = decision_records(m.subject, m.data)
                except WireError:
                    continue
                seq = bus.stream_sequence(m)
                found.extend((seq, r) for r in records if wanted(r))
    found.sort(key=lambda f: f[0])  # stable: a message's records keep their order
    return found
