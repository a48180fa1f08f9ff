"""Drift over the fields driftbus owns (issue 15), against the real API server's managedFields.

driftbus applies an object; then other field managers write to it the way controllers and
people do (the scale subresource as an HPA does, a merge-patch update as ``kubectl edit`` or a
controller does, a forced apply). The SHA the watcher and the applier compute
(``object_sha``, over the owned projection) must stay equal exactly when no field driftbus owns
changed, and change when one did or when its ownership moved away.

With ``DRIFTBUS_CAPTURE_OWNED=DIR`` each case also writes the objects it saw to DIR: that is how
``tests/unit/data/managed_fields/`` was captured for the unit table.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.messages import ApplyIntent
from schemas.subjects import ObjectKey
from services.applier import verbs
from services.common import binaries
from services.controlplane import servers
from services.core.ignore import owned_at, parse_rule
from services.core.owned import field_set
from services.core.sha import object_sha
from services.kube import Conflict, KubeClient
from services.planner.rule.revision import ignoring as ignored_manifest

MERGE_PATCH = "application/merge-patch+json"
LABELS = {"driftbus.dev/bundle": "owned"}


def deployment(ns: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "labels": LABELS},
        "spec": {
            **spec,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:1.27",
                            "env": [{"name": "MODE", "value": "fast"}],
                        }
                    ]
                },
            },
        },
    }


async def _patch(
    kube: KubeClient, path: str, body: dict[str, Any], manager: str, subresource: str = ""
) -> dict[str, Any]:
    return await kube.request(
        "PATCH",
        path + (f"/{subresource}" if subresource else ""),
        params={"fieldManager": manager},
        body=orjson.dumps(body),
        content_type=MERGE_PATCH,
    )


def _capture(name: str, applied: dict[str, Any], after: dict[str, Any], changed: bool) -> None:
    where = os.environ.get("DRIFTBUS_CAPTURE_OWNED")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        case = {"applied": applied, "after": after, "changed": changed}
        (Path(where) / f"{name}.json").write_bytes(orjson.dumps(case, option=orjson.OPT_INDENT_2))


Write = Callable[[KubeClient, str, str], Awaitable[dict[str, Any]]]


async def _scale(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # what an HPA does: the scale subresource, its own manager
    await _patch(kube, path, {"spec": {"replicas": 7}}, "hpa-controller", "scale")
    return await kube.request("GET", path)


async def _annotate(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # what the Deployment controller does with its revision annotation
    body = {"metadata": {"annotations": {"deployment.kubernetes.io/revision": "2"}}}
    return await _patch(kube, path, body, "kube-controller-manager")


async def _other_label(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    return await _patch(kube, path, {"metadata": {"labels": {"team": "x"}}}, "kubectl-label")


async def _extra_env(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # a second env var added by someone else's apply: driftbus owns MODE only
    body = deployment(ns)
    body["spec"] = {
        "selector": body["spec"]["selector"],
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "env": [{"name": "DEBUG", "value": "1"}]}]},
        },
    }
    body["metadata"] = {"name": "web", "namespace": ns}
    return await kube.apply(body, field_manager="sidecar-injector")


async def _same_value(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # another manager applies the very value driftbus owns: shared ownership, nothing changed
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    return await kube.apply(body, field_manager="other-applier")


async def _edit_image(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # kubectl edit of a field driftbus owns: an update moves the field's ownership away
    live = await kube.request("GET", path)
    edited = copy.deepcopy(live)
    edited["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.28"
    return await kube.request(
        "PUT",
        path,
        params={"fieldManager": "kubectl-edit"},
        body=orjson.dumps(edited),
        content_type="application/json",
    )


async def _edit_env(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    env = [{"name": "MODE", "value": "slow"}]
    body = {"spec": {"template": {"spec": {"containers": [{"name": "web", "env": env}]}}}}
    # strategic merge: containers and env are keyed by name
    return await kube.request(
        "PATCH",
        path,
        params={"fieldManager": "kubectl-patch"},
        body=orjson.dumps(body),
        content_type="application/strategic-merge-patch+json",
    )


async def _forced_apply(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minReadySeconds": 0},
    }
    # minReadySeconds is not driftbus's: force takes nothing from it, nothing changes...
    await kube.apply(body, field_manager="rival", force=True)
    # ...but forcing a field driftbus owns takes it away
    body["spec"]["template"] = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.29"}]},
    }
    return await kube.apply(body, field_manager="rival", force=True)


async def _clear_managed_fields(kube: KubeClient, path: str, ns: str) -> dict[str, Any]:
    # the documented way to reset ownership: driftbus owns nothing any more, so the whole
    # object is compared (which differs from the projection) and the next apply re-owns
    return await _patch(kube, path, {"metadata": {"managedFields": [{}]}}, "admin")


CASES: list[tuple[str, Write, bool]] = [
    ("scaled-by-hpa", _scale, False),
    ("controller-annotation", _annotate, False),
    ("someone-elses-label", _other_label, False),
    ("someone-elses-env-var", _extra_env, False),
    ("same-value-shared", _same_value, False),
    ("owned-image-edited", _edit_image, True),
    ("owned-env-patched", _edit_env, True),
    ("owned-field-forced-away", _forced_apply, True),
    ("managed-fields-cleared", _clear_managed_fields, True),
]


@pytest.mark.parametrize(("name", "write", "changed"), CASES, ids=[c[0] for c in CASES])
async def test_only_a_change_to_a_field_driftbus_owns_changes_the_sha(
    kube: KubeClient, namespace: str, name: str, write: Write, changed: bool
) -> None:
    manifest = deployment(namespace)
    res = await kube.resource_for(manifest)
    applied = await kube.apply(manifest, field_manager="driftbus")
    path = res.path(namespace, "web")
    after = await write(kube, path, namespace)
    assert after["metadata"]["resourceVersion"] != applied["metadata"]["resourceVersion"], (
        "the other manager's write did not reach the object: the case tests nothing"
    )
    _capture(name, applied, after, changed)
    assert (object_sha(after) != object_sha(applied)) is changed


async def test_twenty_scales_by_an_hpa_leave_the_sha_of_a_manifest_without_replicas(
    kube: KubeClient, namespace: str
) -> None:
    manifest = deployment(namespace)
    res = await kube.resource_for(manifest)
    applied = await kube.apply(manifest, field_manager="driftbus")
    path = res.path(namespace, "web")
    for replicas in range(2, 22):
        await _patch(kube, path, {"spec": {"replicas": replicas}}, "hpa-controller", "scale")
        assert object_sha(await kube.request("GET", path)) == object_sha(applied)
    # the manifest that does set replicas owns it: the HPA's next scale is drift
    owning = await kube.apply(
        deployment(namespace, replicas=3), field_manager="driftbus", force=True
    )
    await _patch(kube, path, {"spec": {"replicas": 9}}, "hpa-controller", "scale")
    assert object_sha(await kube.request("GET", path)) != object_sha(owning)


async def test_an_owned_field_edited_by_someone_else_conflicts_without_force(
    kube: KubeClient, namespace: str
) -> None:
    """The correction of such drift: without force the API server refuses it (driftbus reports
    Conflict, naming the other manager); with force it takes the field back."""
    manifest = deployment(namespace)
    res = await kube.resource_for(manifest)
    applied = await kube.apply(manifest, field_manager="driftbus")
    path = res.path(namespace, "web")
    await _edit_image(kube, path, namespace)
    with pytest.raises(Conflict, match="kubectl-edit"):
        await kube.apply(manifest, field_manager="driftbus")
    corrected = await kube.apply(manifest, field_manager="driftbus", force=True)
    assert object_sha(corrected) == object_sha(applied)


async def test_a_field_that_becomes_ignored_keeps_its_value_and_stops_counting(
    kube: KubeClient, namespace: str
) -> None:
    """A manifest set ``replicas: 3``; the bundle then ignores /spec/replicas (an HPA takes
    over). Applied as the planner sends it (the field removed, the annotation naming it), the
    value stays 3 — plain server-side apply would have removed it and the server defaulted it
    to 1 — driftbus no longer owns it, and the HPA's scales change no SHA."""
    manifest = deployment(namespace, replicas=3)
    key = ObjectKey.of(manifest)
    res = await kube.resource_for(manifest)
    path = res.path(namespace, "web")
    await kube.apply(manifest, field_manager="driftbus")
    rule = parse_rule("apps/Deployment:/spec/replicas")
    ignoring = ignored_manifest(manifest, [rule], key, "manifests[0]")
    assert "replicas" not in ignoring["spec"]

    def intent(m: dict[str, Any]) -> ApplyIntent:
        return ApplyIntent(
            cluster="c",
            key=key,
            bundle="owned",
            revision="r2",
            manifest_sha="0" * 64,
            manifest=m,
            reason="test",
        )

    # what plain apply would do: the control case, on a second object
    control = {
        **deployment(namespace, replicas=3),
        "metadata": {**manifest["metadata"], "name": "control"},
    }
    await kube.apply(control, field_manager="driftbus")
    control_after = await kube.apply(
        {**control, "spec": {k: v for k, v in control["spec"].items() if k != "replicas"}},
        field_manager="driftbus",
    )
    assert control_after["spec"]["replicas"] == 1  # the hazard hand_over prevents

    outcome = await verbs.apply(kube, intent(ignoring), applier_id="t")
    live = await kube.request("GET", path)
    assert live["spec"]["replicas"] == 3
    assert not owned_at(field_set(live), "/spec/replicas")
    assert outcome.applied is not None
    for replicas in (5, 8, 2):
        await _patch(kube, path, {"spec": {"replicas": replicas}}, "hpa-controller", "scale")
        assert object_sha(await kube.request("GET", path)).hex() == outcome.applied.apply_sha
    # applied again (a later revision): nothing to hand over, the HPA's value stays
    await verbs.apply(kube, intent(ignoring), applier_id="t")
    assert (await kube.request("GET", path))["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    "how", [["apply"], ["create"], ["apply", "--server-side"]], ids=["csa", "create", "ssa"]
)
async def test_an_object_kubectl_made_is_adopted_whole(
    stack: servers.Stack, kube: KubeClient, namespace: str, tmp_path: Path, how: list[str]
) -> None:
    """kubectl made the object with data a and b; the manifest has a (changed) only. Adopted,
    b is removed, a takes the manifest's value without a conflict, kubectl's annotation and
    managers are gone, and the applied SHA is the live object's."""
    made = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "adopted", "namespace": namespace},
        "data": {"a": "kubectl", "b": "left over"},
    }
    path = tmp_path / "cm.json"
    path.write_bytes(orjson.dumps(made))
    await asyncio.to_thread(
        subprocess.run,
        [
            str(binaries.require("kubectl")),
            "--kubeconfig",
            str(stack.cluster.kubeconfig),
            *how,
            "-f",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "adopted", "namespace": namespace, "labels": LABELS},
        "data": {"a": "driftbus"},
    }
    intent = ApplyIntent(
        cluster="c",
        key=ObjectKey.of(manifest),
        bundle="owned",
        revision="r1",
        manifest_sha="0" * 64,
        manifest=manifest,
        reason="test",
    )
    outcome = await verbs.apply(kube, intent, applier_id="t")
    assert outcome.applied is not None, outcome.message
    res = await kube.resource_for(manifest)
    live = await kube.get(res, "adopted", namespace)
    assert live["data"] == {"a": "driftbus"}
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (
        live["metadata"].get("annotations") or {}
    )
    managers = {(e["manager"], e["operation"]) for e in live["metadata"]["managedFields"]}
    assert managers == {("driftbus", "Apply")}
    assert object_sha(live).hex() == outcome.applied.apply_sha


async def test_an_adoption_that_loses_a_race_reads_the_object_again(
    stack: servers.Stack, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """The patch is guarded by the resourceVersion of what was read; a controller's write in
    between fails the guard, and the object is read again rather than left half adopted."""
    made = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "raced", "namespace": namespace},
        "data": {"a": "kubectl", "b": "left over"},
    }
    path = tmp_path / "cm.json"
    path.write_bytes(orjson.dumps(made))
    kubectl = str(binaries.require("kubectl"))
    kubeconfig = str(stack.cluster.kubeconfig)
    await asyncio.to_thread(
        subprocess.run, [kubectl, "--kubeconfig", kubeconfig, "create", "-f", str(path)], check=True
    )
    res = await kube.resource_for(made)
    stale = await kube.get(res, "raced", namespace)
    # another writer moves the object on (a label: not what adoption is about)
    await _patch(kube, res.path(namespace, "raced"), {"metadata": {"labels": {"x": "y"}}}, "ctl")
    manifest = {**made, "data": {"a": "driftbus"}}
    assert await verbs.adopt(kube, res, stale, manifest)
    live = await kube.get(res, "raced", namespace)
    managers = {e["manager"] for e in live["metadata"]["managedFields"]}
    assert "kubectl-create" not in managers
    assert {"driftbus", "ctl"} <= managers
