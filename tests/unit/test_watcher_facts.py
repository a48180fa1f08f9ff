"""The watcher's facts: what it publishes about a live object, and when it stays silent."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.codec import encode
from schemas.messages import Health, ServerEvent
from schemas.subjects import ObjectKey
from services.core.sha import object_sha
from services.watcher.facts import Seen, change, fact_id, newer_than, tombstone


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


def test_a_tombstone_and_the_fact_ids() -> None:
    key = ObjectKey.of(_cm())
    seen, ev = tombstone(key, "12", "c", "w1")
    assert (seen.sha, seen.rv, ev.deleted, ev.server_sha) == (None, 12, True, None)
    _, (_, live) = change(_cm(rv="12"), None, "c", "w1")  # type: ignore[misc]
    # the same object at the same rv is one fact, and its tombstone another
    assert fact_id(ev) == fact_id(live) + "-"
    assert fact_id(live) != fact_id(change(_cm(rv="13"), None, "c", "w1")[1][1])  # type: ignore[index]


@pytest.mark.parametrize(
    ("rv", "other", "newer"),
    [(12, "11", True), (12, "12", False), (12, "13", False), (12, None, True)],
    ids=["newer", "same", "older", "unreadable"],
)
def test_newer_than(rv: int, other: str | None, newer: bool) -> None:
    data = (
        b"not a server event"
        if other is None
        else encode(
            ServerEvent(
                cluster="c",
                key=ObjectKey.of(_cm()),
                resource_version=other,
                server_sha=None,
                deleted=True,
            )
        )
    )
    assert newer_than(rv)(data) is newer


def test_the_same_object_at_the_same_rv_in_two_clusters_is_two_facts() -> None:
    _, (_, a) = change(_cm(rv="12"), None, "east", "w1")  # type: ignore[misc]
    _, (_, b) = change(_cm(rv="12"), None, "west", "w1")  # type: ignore[misc]
    assert fact_id(a) != fact_id(b)
