"""The checks the CLI and the services share exist once: an empty revision is refused by one rule
with one message wherever it is caught, and ``driftbus plan`` takes an object in with the
planner's own step (``revision.checked_object``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from schemas.messages import Bundle, BundleOptions, IgnoreRule
from services.core.manifest import ManifestError, check_not_empty
from services.core.scope import Scopes, group_kind
from services.core.sha import manifest_sha
from services.inputs import load
from services.inputs.documents import Loaded
from services.planner.rule.revision import checked_object, checked_revision
from services.revisions.publish import publish_bundle


def _cm(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


@pytest.mark.parametrize(
    ("objects", "allow_empty", "delete", "refused"),
    [
        pytest.param(0, False, False, True, id="empty-is-refused"),
        pytest.param(0, True, False, False, id="empty-with-allow-empty-passes"),
        pytest.param(0, False, True, False, id="empty-deletion-passes"),
        pytest.param(2, False, False, False, id="objects-pass"),
    ],
)
def test_one_rule_refuses_an_empty_revision(
    objects: int, allow_empty: bool, delete: bool, refused: bool
) -> None:
    if refused:
        with pytest.raises(ManifestError, match="empty revision"):
            check_not_empty("b", objects, allow_empty=allow_empty, delete=delete)
    else:
        check_not_empty("b", objects, allow_empty=allow_empty, delete=delete)


def _refusals() -> dict[str, str]:
    """The refusal of an empty revision of bundle ``nothing`` from the CLI's check, from
    ``publish_bundle`` and from the planner."""
    out: dict[str, str] = {}
    with pytest.raises(load.InputError) as cli:
        load.require_objects(Loaded([], where="deploy/"), "nothing", "publish")
    out["cli"] = str(cli.value)
    with pytest.raises(ValueError, match="empty revision") as published:  # before the bus
        asyncio.run(
            publish_bundle(
                None,  # type: ignore[arg-type]
                cluster="c",
                bundle="nothing",
                revision="r1",
                manifests=[],
                options=BundleOptions(),
            )
        )
    out["publish_bundle"] = str(published.value)
    with pytest.raises(ManifestError) as planner:
        checked_revision(Bundle(cluster="c", bundle="nothing", revision="r1"), [], Scopes())
    out["planner"] = str(planner.value)
    return out


def test_the_cli_publish_bundle_and_the_planner_give_one_message() -> None:
    said = _refusals()
    assert said["publish_bundle"] == said["planner"]
    assert said["cli"].endswith(said["planner"])
    assert said["cli"].startswith("deploy/: nothing to publish: ")
    for text in said.values():
        assert "would prune every object of bundle nothing" in text
        assert "allow-empty" in text


def test_plan_takes_an_object_in_as_the_planner_does() -> None:
    bundle = Bundle(
        cluster="c",
        bundle="team-a/web",
        revision="r1",
        manifests=[_cm("a")],
        options=BundleOptions(
            namespace="apps", ignore=[IgnoreRule(kind="ConfigMap", pointers=["/data/k"])]
        ),
    )
    key, manifest = checked_object(bundle, _cm("a"), Scopes(), "manifests[0]")
    [((_, taken_key), _, sha)] = checked_revision(bundle, bundle.manifests, Scopes())
    assert key == taken_key
    assert key.namespace == "apps"
    assert manifest_sha(manifest) == sha
    assert "k" not in manifest.get("data", {})
    assert manifest["metadata"]["labels"]["driftbus.dev/tenant"] == "team-a"


def test_checked_object_refuses_what_the_planner_refuses() -> None:
    bundle = Bundle(cluster="c", bundle="b", revision="r1")
    with pytest.raises(ManifestError, match=r"^manifests\[3\]: a manifest must be an object"):
        checked_object(bundle, "x", Scopes(), "manifests[3]")
    with pytest.raises(ManifestError, match=r"^ConfigMap/a: ConfigMap is namespaced"):
        checked_object(bundle, _cm("a"), Scopes(), "manifests[3]")


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(_cm("a"), ("", "ConfigMap"), id="core-group"),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment"}, ("apps", "Deployment"), id="group"
        ),
        pytest.param({"kind": "ConfigMap"}, None, id="no-api-version"),
        pytest.param({"apiVersion": 1, "kind": "ConfigMap"}, None, id="api-version-not-a-string"),
    ],
)
def test_group_kind_is_what_scopes_are_looked_up_by(
    obj: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    assert group_kind(obj) == expected


def test_require_namespaces_leaves_kinds_of_unknown_scope_to_the_planner(tmp_path: Path) -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    loaded = Loaded([load.Manifest(widget, "w.yaml")], where=str(tmp_path))
    load.require_namespaces(loaded, "")
    loaded = Loaded([load.Manifest(_cm("a"), "a.yaml")], where=str(tmp_path))
    with pytest.raises(load.InputError, match=r"^a\.yaml: ConfigMap/a: ConfigMap is namespaced"):
        load.require_namespaces(loaded, "")
