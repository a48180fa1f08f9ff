"""The bundle message names its kinds: the publisher's list, the planner's check of it."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.messages import Bundle, BundleOptions
from services.core.manifest import ManifestError, bundle_kinds
from services.core.scope import Scopes
from services.planner.rule.revision import CHECK_STEP, checked_revision, checking


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}}


DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
ROLE = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {}}


@pytest.mark.parametrize(
    ("manifests", "kinds"),
    [
        ([], []),
        ([_cm("a"), _cm("b")], ["v1/ConfigMap"]),
        (
            [ROLE, _cm("a"), DEPLOY],
            ["apps/v1/Deployment", "rbac.authorization.k8s.io/v1/ClusterRole", "v1/ConfigMap"],
        ),
        ([{"kind": "ConfigMap"}, "not an object", {"apiVersion": 1, "kind": "X"}], []),
    ],
    ids=["empty", "once-each", "sorted", "incomplete-left-out"],
)
def test_bundle_kinds(manifests: list[Any], kinds: list[str]) -> None:
    assert bundle_kinds(manifests) == kinds


def _bundle(manifests: list[Any], kinds: list[str]) -> Bundle:
    return Bundle(
        cluster="c",
        bundle="b",
        revision="r1",
        options=BundleOptions(namespace="a"),
        manifests=manifests,
        kinds=kinds,
    )


@pytest.mark.parametrize(
    ("kinds", "refused"),
    [
        (["v1/ConfigMap"], False),
        ([], False),  # an older publisher states none: the watcher reads the manifests
        (["apps/v1/Deployment"], True),  # the watcher would never watch ConfigMaps
        (["apps/v1/Deployment", "v1/ConfigMap"], True),  # one too many is a lie as well
    ],
    ids=["stated", "not-stated", "wrong", "extra"],
)
def test_a_revision_whose_kinds_differ_from_its_manifests_is_refused(
    kinds: list[str], refused: bool
) -> None:
    manifests = [_cm("x"), _cm("y")]
    if refused:
        with pytest.raises(ManifestError, match="names the kinds"):
            checked_revision(_bundle(manifests, kinds), manifests, Scopes())
    else:
        assert len(checked_revision(_bundle(manifests, kinds), manifests, Scopes())) == 2


def test_a_revision_is_checked_in_steps_with_the_same_result() -> None:
    """The planner lets its event loop run between steps (``checking``): 100,000 objects
    checked at once held it past its heartbeat timeout."""
    manifests = [_cm(f"c{i}") for i in range(2 * CHECK_STEP + 5)]
    bundle = _bundle(manifests, ["v1/ConfigMap"])
    steps = checking(bundle, manifests, Scopes())
    paused = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            value = done.value
            break
        paused += 1
    assert paused == 2
    assert value == checked_revision(bundle, manifests, Scopes())
    assert len(value) == len(manifests)
