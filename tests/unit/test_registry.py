"""The cluster registry's pure parts: fleet membership, and how the live view folds entries."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg

from schemas.fleet import ClusterRecord
from services.fleet.registry import KV_PREFIX, RegistryView, members

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


def test_an_unreadable_entry_is_not_a_removal() -> None:
    """A garbled registry write must not prune a cluster's fleet bundles: its last good labels
    stay; only a delete (``clusters remove``) removes it."""
    view = RegistryView(js=None)  # type: ignore[arg-type]
    view.observe(entry("prod-a", msgspec.json.encode(RECORDS["prod-a"])))
    view.observe(entry("prod-a", b"{not json"))
    assert view.records["prod-a"].labels == {"env": "prod", "region": "eu"}
    view.observe(entry("new", b"[]"))
    assert "new" not in view.records
    view.observe(entry("prod-a", b"", **{"KV-Operation": "DEL"}))
    assert "prod-a" not in view.records
