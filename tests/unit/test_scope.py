"""Scopes of kinds, and the stray namespace dropped from cluster-scoped manifests."""

from __future__ import annotations

import copy
import re
from types import MappingProxyType
from typing import Any

import pytest

from schemas.subjects import ObjectKey
from services.core.manifest import ManifestError
from services.core.scope import BUILTIN, Scopes, UnknownScope, normalise
from services.core.sha import object_sha


def obj(api: str, kind: str, namespace: str | None = "team-a", **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "x", **meta}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": metadata, "spec": {"a": 1}}


def crd(group: str, kind: str, scope: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.lower()}s.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": f"{kind.lower()}s"},
            "scope": scope,
        },
    }


RBAC = "rbac.authorization.k8s.io/v1"
LEARNED = (
    crd("example.com", "Tenant", "Cluster"),
    crd("example.com", "Widget", "Namespaced"),
)

# (id, object, namespace it has afterwards or None for none at all)
NORMALISE = [
    ("clusterrole-with-stray-namespace-loses-it", obj(RBAC, "ClusterRole"), None),
    ("clusterrolebinding-with-stray-namespace-loses-it", obj(RBAC, "ClusterRoleBinding"), None),
    ("namespace-with-stray-namespace-loses-it", obj("v1", "Namespace"), None),
    (
        "crd-with-stray-namespace-loses-it",
        obj("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        None,
    ),
    ("empty-namespace-on-cluster-scoped-kind-is-dropped", obj(RBAC, "ClusterRole", ""), None),
    ("clusterrole-without-namespace-is-unchanged", obj(RBAC, "ClusterRole", None), None),
    ("configmap-keeps-its-namespace", obj("v1", "ConfigMap"), "team-a"),
    ("role-keeps-its-namespace", obj(RBAC, "Role"), "team-a"),
    ("event-of-events-group-keeps-its-namespace", obj("events.k8s.io/v1", "Event"), "team-a"),
    ("unknown-kind-is-untouched", obj("example.com/v1", "Gadget"), "team-a"),
    (
        "builtin-kind-name-in-another-group-is-unknown",
        obj("example.com/v1", "ClusterRole"),
        "team-a",
    ),
    ("crd-learned-cluster-scoped-kind-loses-it", obj("example.com/v1", "Tenant"), None),
    ("crd-learned-namespaced-kind-keeps-it", obj("example.com/v1", "Widget"), "team-a"),
    ("learned-kind-in-another-version-too", obj("example.com/v2beta1", "Tenant"), None),
    (
        "missing-api-version-is-untouched",
        {"kind": "ClusterRole", "metadata": {"name": "x", "namespace": "team-a"}},
        "team-a",
    ),
    (
        "metadata-not-a-map-is-untouched",
        {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": "x"},
        None,
    ),
]


# (id, object, the bundle's default namespace, namespace afterwards | error it raises)
DEFAULTING = [
    ("namespaced-without-one-gets-the-default", obj("v1", "ConfigMap", None), "web", "web"),
    ("empty-namespace-counts-as-none", obj("v1", "ConfigMap", ""), "web", "web"),
    ("one-naming-a-namespace-keeps-it", obj("v1", "ConfigMap", "team-a"), "web", "team-a"),
    ("cluster-scoped-never-gets-one", obj(RBAC, "ClusterRole", None), "web", None),
    ("cluster-scoped-loses-a-stray-one-too", obj(RBAC, "ClusterRole"), "web", None),
    ("crd-learned-namespaced-kind-gets-it", obj("example.com/v1", "Widget", None), "web", "web"),
    ("crd-learned-cluster-kind-does-not", obj("example.com/v1", "Tenant", None), "web", None),
    (
        "namespaced-without-one-and-no-default-is-refused",
        obj("apps/v1", "Deployment", None),
        "",
        "Deployment/x: Deployment is namespaced but has no metadata.namespace and the bundle "
        "has no default namespace",
    ),
    (
        "unknown-scope-with-a-default-is-refused-not-guessed",
        obj("example.com/v1", "Gadget", None),
        "web",
        "cannot tell whether kind Gadget (example.com) is namespaced",
    ),
    (
        "unknown-scope-without-a-default-is-left-alone",
        obj("example.com/v1", "Gadget", None),
        "",
        None,
    ),
]


@pytest.mark.parametrize(
    ("manifest", "default", "expected"),
    [c[1:] for c in DEFAULTING],
    ids=[c[0] for c in DEFAULTING],
)
def test_default_namespace(manifest: dict[str, Any], default: str, expected: str | None) -> None:
    scopes = Scopes()
    for c in LEARNED:
        scopes.learn_crd(c)
    before = copy.deepcopy(manifest)
    if expected is not None and " " in expected:
        with pytest.raises(ManifestError, match=re.escape(expected)):
            normalise(manifest, scopes, default)
        return
    out = normalise(manifest, scopes, default)
    assert manifest == before, "the input was modified"
    assert out["metadata"].get("namespace") == expected
    assert ObjectKey.of(out).namespace == (expected or "")


@pytest.mark.parametrize(
    ("manifest", "namespace"), [c[1:] for c in NORMALISE], ids=[c[0] for c in NORMALISE]
)
def test_normalise(manifest: dict[str, Any], namespace: str | None) -> None:
    scopes = Scopes()
    for c in LEARNED:
        scopes.learn_crd(c)
    before = copy.deepcopy(manifest)

    out = normalise(manifest, scopes)

    assert manifest == before, "the input was modified"
    expected = copy.deepcopy(before)
    if namespace is None and isinstance(expected["metadata"], dict):
        expected["metadata"].pop("namespace", None)
    assert out == expected
    assert isinstance(out["metadata"], str) or out["metadata"].get("namespace") == namespace


def test_stray_namespace_copy_leaves_input_and_its_metadata_untouched() -> None:
    manifest = obj(RBAC, "ClusterRole", labels={"app": "x"})
    before = copy.deepcopy(manifest)

    out = normalise(manifest, Scopes())

    assert manifest == before
    assert out is not manifest
    assert out["metadata"] is not manifest["metadata"]
    assert out["metadata"] == {"name": "x", "labels": {"app": "x"}}


def test_untouched_object_is_returned_as_is() -> None:
    manifest = obj("v1", "ConfigMap")
    assert normalise(manifest, Scopes()) is manifest


def test_mapping_input_comes_back_as_a_dict() -> None:
    out = normalise(MappingProxyType(obj("v1", "ConfigMap")), Scopes())
    assert type(out) is dict
    assert out["metadata"]["namespace"] == "team-a"


def test_normalised_manifest_keys_and_hashes_like_the_server_object() -> None:
    """The bug this module exists for: planner and watcher must agree on key and SHA."""
    manifest = obj(RBAC, "ClusterRole")
    served = obj(RBAC, "ClusterRole", None, uid="u-1", resourceVersion="7")

    assert ObjectKey.of(manifest) != ObjectKey.of(served)
    normalised = normalise(manifest, Scopes())
    assert ObjectKey.of(normalised) == ObjectKey.of(served)
    assert str(ObjectKey.of(normalised)) == "ClusterRole.rbac.authorization.k8s.io/x"
    assert object_sha(normalised) == object_sha(served)


# (id, group, kind, expected namespaced)
SCOPES = [
    ("configmap-is-namespaced", "", "ConfigMap", True),
    ("namespace-is-cluster-scoped", "", "Namespace", False),
    ("node-is-cluster-scoped", "", "Node", False),
    ("persistentvolume-is-cluster-scoped", "", "PersistentVolume", False),
    ("persistentvolumeclaim-is-namespaced", "", "PersistentVolumeClaim", True),
    ("deployment-is-namespaced", "apps", "Deployment", True),
    ("clusterrole-is-cluster-scoped", "rbac.authorization.k8s.io", "ClusterRole", False),
    ("storageclass-is-cluster-scoped", "storage.k8s.io", "StorageClass", False),
    ("csistoragecapacity-is-namespaced", "storage.k8s.io", "CSIStorageCapacity", True),
    ("ingressclass-is-cluster-scoped", "networking.k8s.io", "IngressClass", False),
    (
        "webhook-configuration-is-cluster-scoped",
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        False,
    ),
    ("core-kind-is-not-in-apps", "apps", "ConfigMap", None),
    ("unknown-kind", "example.com", "Widget", None),
    ("kinds-are-case-sensitive", "", "configmap", None),
]


@pytest.mark.parametrize(
    ("group", "kind", "expected"), [c[1:] for c in SCOPES], ids=[c[0] for c in SCOPES]
)
def test_builtin_scope(group: str, kind: str, expected: bool | None) -> None:
    assert Scopes().namespaced(group, kind) is expected


def test_builtin_table_has_every_group_of_the_api() -> None:
    groups = {g for g, _ in BUILTIN}
    assert groups >= {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }


def test_learn_overrides_the_builtin_table_and_adds_kinds() -> None:
    scopes = Scopes()
    scopes.learn("rbac.authorization.k8s.io", "ClusterRole", True)
    scopes.learn("example.com", "Gadget", False)

    assert scopes.namespaced("rbac.authorization.k8s.io", "ClusterRole") is True
    assert scopes.namespaced("example.com", "Gadget") is False
    assert normalise(obj(RBAC, "ClusterRole"), scopes)["metadata"]["namespace"] == "team-a"
    assert "namespace" not in normalise(obj("example.com/v1", "Gadget"), scopes)["metadata"]


def test_learning_is_per_instance() -> None:
    Scopes().learn("example.com", "Gadget", False)
    assert Scopes().namespaced("example.com", "Gadget") is None
    assert BUILTIN[("rbac.authorization.k8s.io", "ClusterRole")] is False


def test_a_later_crd_replaces_the_scope() -> None:
    scopes = Scopes()
    scopes.learn_crd(crd("example.com", "Tenant", "Namespaced"))
    scopes.learn_crd(crd("example.com", "Tenant", "Cluster"))
    assert scopes.namespaced("example.com", "Tenant") is False


def _without(path: tuple[str, ...]) -> dict[str, Any]:
    c = crd("example.com", "Tenant", "Cluster")
    node = c
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]
    return c


def _with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    c = crd("example.com", "Tenant", "Cluster")
    node = c
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return c


# (id, manifest): none of these teaches anything, none raises
MALFORMED_CRDS = [
    ("not-a-crd-kind", _with(("kind",), "ConfigMap")),
    ("crd-kind-in-another-group", _with(("apiVersion",), "example.com/v1")),
    ("no-api-version", _without(("apiVersion",))),
    ("no-spec", _without(("spec",))),
    ("spec-not-a-map", _with(("spec",), ["Cluster"])),
    ("no-group", _without(("spec", "group"))),
    ("empty-group", _with(("spec", "group"), "")),
    ("group-not-a-string", _with(("spec", "group"), 7)),
    ("no-names", _without(("spec", "names"))),
    ("names-not-a-map", _with(("spec", "names"), "Tenant")),
    ("no-kind", _without(("spec", "names", "kind"))),
    ("empty-kind", _with(("spec", "names", "kind"), "")),
    ("no-scope", _without(("spec", "scope"))),
    ("scope-in-wrong-case", _with(("spec", "scope"), "cluster")),
    ("scope-not-a-string", _with(("spec", "scope"), True)),
    ("empty-manifest", {}),
]


@pytest.mark.parametrize(
    "manifest", [c[1] for c in MALFORMED_CRDS], ids=[c[0] for c in MALFORMED_CRDS]
)
def test_malformed_crd_is_ignored(manifest: dict[str, Any]) -> None:
    scopes = Scopes()
    scopes.learn_crd(manifest)
    assert scopes.namespaced("example.com", "Tenant") is None


def test_crd_of_any_apiextensions_version_is_learned() -> None:
    scopes = Scopes()
    scopes.learn_crd(_with(("apiVersion",), "apiextensions.k8s.io/v1beta1"))
    assert scopes.namespaced("example.com", "Tenant") is False


def test_learning_says_whether_it_changed_anything() -> None:
    scopes = Scopes()
    assert scopes.learn("example.com", "Gadget", True) is True
    assert scopes.learn("example.com", "Gadget", True) is False
    assert scopes.learn("example.com", "Gadget", False) is True, "discovery replaces a guess"
    assert scopes.learn("", "ConfigMap", True) is False, "built-in kinds are known already"


def test_an_unknown_scope_is_its_own_error_so_the_revision_can_wait_for_discovery() -> None:
    with pytest.raises(UnknownScope):
        normalise(obj("example.com/v1", "Gadget", None), Scopes(), "web")
    with pytest.raises(ManifestError) as info:
        normalise(obj("apps/v1", "Deployment", None), Scopes(), "")
    assert not isinstance(info.value, UnknownScope), "a missing namespace needs a new revision"


# --- a revision's own view (the planner: scope only from the cluster) -------------------------


def test_a_revisions_crd_keys_its_own_resources_and_teaches_the_cluster_view_nothing() -> None:
    cluster = Scopes()
    view = cluster.for_revision([crd("example.com", "Gadget", "Cluster")])
    assert view.namespaced("example.com", "Gadget") is False
    assert "namespace" not in normalise(obj("example.com/v1", "Gadget"), view)["metadata"]
    assert cluster.namespaced("example.com", "Gadget") is None, "nothing learned"
    with pytest.raises(TypeError):
        view.learn("example.com", "Gadget", True)


@pytest.mark.parametrize("claimed", ["Cluster", "Namespaced"])
def test_the_clusters_word_wins_over_any_crd_manifest(claimed: str) -> None:
    """A tenant's CRD claiming a kind the cluster serves with the other scope re-keys nothing:
    not the platform's objects of that kind, and not its own (no passing a cluster-scoped kind
    off as namespaced)."""
    cluster = Scopes()
    served = claimed != "Namespaced"  # the cluster says the opposite of the claim
    cluster.learn("cert-manager.io", "Certificate", served)
    view = cluster.for_revision([crd("cert-manager.io", "Certificate", claimed)])
    assert view.namespaced("cert-manager.io", "Certificate") is served
    assert cluster.namespaced("cert-manager.io", "Certificate") is served


def test_a_revision_without_new_kinds_is_keyed_with_the_cluster_view_itself() -> None:
    cluster = Scopes()
    assert cluster.for_revision([obj("v1", "ConfigMap"), {"kind": 7}, "text"]) is cluster
    assert cluster.for_revision([crd("rbac.authorization.k8s.io", "Role", "Cluster")]) is cluster
