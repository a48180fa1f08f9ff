"""The cluster registry's pure parts: fleet membership, and how the live view folds entries."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg

from schemas.fleet import ClusterRecord
from services.clusters.registry import KV_PREFIX, RegistryView, labels_in, members

RECORDS = {
    "canary": ClusterRecord(name="canary", labels={"env": "canary", "region": "eu"}),
    "prod-a": ClusterRecord(name="prod-a", labels={"env": "prod", "region": "eu"}),
    "prod-b": ClusterRecord(name="prod-b", labels={"env": "prod"}),
}


@pytest.mark.parametrize(
    ("selector", "named", "expected"),
    [
        ("", [], ["canary", "prod-a", "prod-b"]),
        ("env=prod", [], ["prod-a", "prod-b"]),
        ("env!=prod", [], ["canary"]),
        ("region", [], ["canary", "prod-a"]),
        ("!region", [], ["prod-b"]),
        ("env in (canary,prod),region=eu", [], ["canary", "prod-a"]),
        ("", ["prod-b", "canary"], ["canary", "prod-b"]),
        ("env=prod", ["canary", "prod-a"], ["prod-a"]),
        ("", ["gone"], []),
    ],
)
def test_members_are_the_registered_clusters_the_selector_and_names_admit(
    selector: str, named: list[str], expected: list[str]
) -> None:
    assert sorted(members(RECORDS, selector, named)) == expected


def entry(name: str, data: bytes, **headers: str) -> Any:
    return Msg(_client=None, subject=KV_PREFIX + name, data=data, headers=headers or None)  # type: ignore[arg-type]


def test_an_unreadable_entry_is_not_a_removal_nor_its_last_labels() -> None:
    """A garbled registry write must not prune a cluster's fleet bundles (not ``removed``), nor
    add it to fleets by labels it may no longer have: its labels are unknown, so it is in no
    ``records`` (issue 41 item 9); only a delete (``clusters remove``) removes it."""
    view = RegistryView(js=None)  # type: ignore[arg-type]
    view.observe(entry("prod-a", msgspec.json.encode(RECORDS["prod-a"])))
    view.observe(entry("prod-a", b"{not json"))
    assert "prod-a" not in view.records
    assert view.unreadable == {"prod-a"}
    assert view.removed == set()
    assert members(view.records, "env!=canary", []) == {}
    view.observe(entry("new", b"[]"))
    assert "new" not in view.records
    view.observe(entry("prod-a", msgspec.json.encode(RECORDS["prod-a"])))
    assert view.records["prod-a"].labels == {"env": "prod", "region": "eu"}
    assert view.unreadable == {"new"}
    view.observe(entry("prod-a", b"", **{"KV-Operation": "DEL"}))
    assert "prod-a" not in view.records
    assert view.removed == {"prod-a"}


@pytest.mark.parametrize(
    ("data", "headers", "labels"),
    [
        pytest.param(
            msgspec.json.encode(RECORDS["canary"]), {}, RECORDS["canary"].labels, id="readable"
        ),
        pytest.param(msgspec.json.encode(ClusterRecord(name="bare")), {}, {}, id="known-no-labels"),
        pytest.param(b'{"name": "x", "labels": {"env": 5}}', {}, None, id="labels-do-not-decode"),
        pytest.param(b"{not json", {}, None, id="not-json"),
        pytest.param(b"", {"KV-Operation": "DEL"}, None, id="removed"),
        pytest.param(b"", {"KV-Operation": "PURGE"}, None, id="purged"),
    ],
)
def test_labels_in_an_entry_are_unknown_unless_it_can_be_read(
    data: bytes, headers: dict[str, str], labels: dict[str, str] | None
) -> None:
    """The planner's view of its cluster's labels: None (unknown), never ``{}``, when the entry
    is gone or unreadable, so ``env!=prod`` does not admit it."""
    assert labels_in(entry("x", data, **headers)) == labels
