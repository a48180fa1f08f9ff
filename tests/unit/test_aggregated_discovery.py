"""Reading aggregated discovery (services/kube/discovery.py: ``aggregated_scopes``)."""

from __future__ import annotations

from typing import Any

import pytest

from services.kube.discovery import aggregated_scopes


def group(name: str, *versions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "versions": [{"version": f"v{i + 1}", "resources": rs} for i, rs in enumerate(versions)],
    }


def res(kind: str, scope: str, plural: str = "") -> dict[str, Any]:
    return {
        "resource": plural or kind.lower() + "s",
        "responseKind": {"group": "", "version": "", "kind": kind},
        "scope": scope,
    }


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            {
                "kind": "APIGroupDiscoveryList",
                "items": [
                    group("apps", [res("Deployment", "Namespaced")]),
                    group("x.io", [res("Widget", "Namespaced"), res("Tenant", "Cluster")]),
                ],
            },
            {("apps", "Deployment"): True, ("x.io", "Widget"): True, ("x.io", "Tenant"): False},
            id="scopes-by-group-and-kind",
        ),
        pytest.param(
            {
                "kind": "APIGroupDiscoveryList",
                "items": [group("x.io", [res("Widget", "Cluster")], [res("Widget", "Namespaced")])],
            },
            {("x.io", "Widget"): False},
            id="the-preferred-first-version-wins",
        ),
        pytest.param(
            {"kind": "APIGroupList", "groups": [{"name": "apps"}]},
            {},
            id="a-server-without-aggregated-discovery-tells-nothing",
        ),
        pytest.param(
            {
                "kind": "APIGroupDiscoveryList",
                "items": [
                    {"metadata": {}, "versions": None},
                    group(
                        "x.io", [{"resource": "a"}, res("B", "Sideways"), {"responseKind": None}]
                    ),
                ],
            },
            {},
            id="malformed-entries-are-skipped",
        ),
    ],
)
def test_aggregated_scopes(doc: dict[str, Any], expected: dict[tuple[str, str], bool]) -> None:
    assert aggregated_scopes(doc) == expected
