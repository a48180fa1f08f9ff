"""The watcher's facts: what it publishes about a live object, and when it stays silent."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.messages import Health, ServerEvent
from schemas.subjects import ObjectKey, batch_subject, parse_subject
from services.core.sha import object_sha
from services.stored import facts as stored_facts
from services.watcher.facts import Seen, change, tombstone


def _cm(rv: str = "10", data: str = "x", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "a",
            "namespace": "n",
            "resourceVersion": rv,
            "labels": {"driftbus.dev/bundle": "b"},
            "annotations": annotations,
        },
        "data": {"k": data},
    }


def _seen_of(obj: dict[str, Any], **changes: Any) -> Seen:
    fields: dict[str, Any] = {
        "sha": object_sha(obj),
        "health": Health.READY,
        "rv": int(obj["metadata"]["resourceVersion"]),
    }
    fields.update(changes)
    return Seen(**fields)


@pytest.mark.parametrize(
    ("obj", "seen", "published"),
    [
        (_cm(), None, True),
        (_cm(), _seen_of(_cm()), False),
        (_cm(rv="11"), _seen_of(_cm()), False),  # same content at a later rv: nothing new
        (_cm(rv="11", data="y"), _seen_of(_cm()), True),
        (_cm(rv="9", data="y"), _seen_of(_cm()), False),  # older than what SERVER holds
        (_cm(), _seen_of(_cm(), health=Health.IN_PROGRESS), True),
        (_cm(**{"driftbus.dev/prune": "disabled"}), _seen_of(_cm()), True),  # keep changed
        (_cm(rv="11"), _seen_of(_cm(), sha=None), True),  # was a tombstone
        (_cm(rv="11"), _seen_of(_cm(), why="an older reason"), True),  # the reason changed
    ],
    ids=["new", "same", "same-later-rv", "changed", "older", "health", "keep", "back", "reason"],
)
def test_change(obj: dict[str, Any], seen: Seen | None, published: bool) -> None:
    key, ch = change(obj, seen, "c", "w1")
    assert key == ObjectKey.of(obj)
    assert (ch is not None) == published
    if ch is not None:
        new_seen, ev = ch
        assert ev.server_sha == object_sha(obj).hex()
        assert new_seen.sha == object_sha(obj)
        assert (ev.bundle, ev.watcher, ev.cluster) == ("b", "w1", "c")
        assert ev.keep == new_seen.keep == ("driftbus.dev/prune" in obj["metadata"]["annotations"])


def test_a_tombstone() -> None:
    key = ObjectKey.of(_cm())
    seen, ev = tombstone(key, "12", "c", "w1")
    assert (seen.sha, seen.rv, ev.deleted, ev.server_sha) == (None, 12, True, None)
    assert (ev.key, ev.resource_version, ev.cluster, ev.watcher) == (key, "12", "c", "w1")


def _fact(rv: str, *, deleted: bool = False) -> ServerEvent:
    return ServerEvent(
        cluster="c",
        key=ObjectKey.of(_cm()),
        resource_version=rv,
        server_sha=None if deleted else "0" * 64,
        deleted=deleted,
    )


@pytest.mark.parametrize(
    ("held", "then", "kept"),
    [
        (None, "12", "12"),
        ("11", "12", "12"),
        ("12", "12", "12"),
        ("13", "12", "13"),
        ("", "12", "12"),
    ],
    ids=["first", "newer", "same-rv-later-wins", "older-ignored", "unreadable-held"],
)
def test_a_reader_keeps_each_objects_newest_fact(held: str | None, then: str, kept: str) -> None:
    """Active-active watchers publish batches out of order: the newer resourceVersion wins,
    as in the planner's rule (what ``newer_than`` decided before each publish)."""
    into = {} if held is None else {ObjectKey.of(_cm()): _fact(held)}
    stored_facts.fold(into, _fact(then, deleted=True))
    assert into[ObjectKey.of(_cm())].resource_version == kept


def test_the_same_object_at_the_same_rv_in_two_clusters_is_two_facts() -> None:
    """Each batch has a subject of its own (the stream keeps the last per subject), naming
    its cluster: a second cluster's facts are never taken for a duplicate of the first's."""
    a = batch_subject("server", "east", "id1")
    b = batch_subject("server", "west", "id1")
    assert a != b
    assert parse_subject(a).cluster == "east"
    assert parse_subject(b).cluster == "west"
