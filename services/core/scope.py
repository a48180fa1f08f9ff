"""Which kinds are namespaced, and dropping the stray namespace of a cluster-scoped manifest.

The object key (DESIGN §2) includes the namespace, and cluster-scoped objects have an empty one.
Manifests do not always agree: Helm output often sets ``metadata.namespace`` on a ClusterRole or
a CRD, and kubectl (and the API server) silently ignore it. Keyed as written, such a manifest
lands under ``ClusterRole/team-a/x`` while the watcher, which sees what the server stores, keys
it ``ClusterRole/x`` — the two never meet and the object never converges. So every manifest goes
through :func:`normalise` before it is keyed or hashed.

That needs the scope of every kind before any discovery call: the planner owns no connection to
Kubernetes. The built-in kinds are a fixed table (the kinds a v1.36 kube-apiserver serves with
every API enabled; ``tests/integration/test_scope_discovery.py`` proves it against the real
server), custom kinds are learned from the cluster only: the watcher's discovery (its heartbeat
lists the scope of every custom kind it watches). A CRD *manifest* changes nothing of that: anyone
may publish one, and a revision that is refused, or a tenant's CRD claiming another's kind, must
not re-key what other bundles own. A revision's own CRDs are read for that revision alone
(:meth:`Scopes.for_revision`), for kinds the cluster has not named yet — so a bundle can carry a
CRD and its resources together — and never stored. An unknown kind is left alone:
dropping a namespace on a guess would lose a real one, and giving it the default namespace on a
guess would key it where the watcher never sees it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from services.core.manifest import ManifestError
from services.core.steps import finished

# group → kinds, one table per scope. Review kinds (TokenReview, SubjectAccessReview, …) and
# Binding are create-only, but they are served, so they are listed too: the table is exactly
# what discovery reports and the integration test compares it both ways.
_NAMESPACED: Final[dict[str, tuple[str, ...]]] = {
    "": (
        "Binding",
        "ConfigMap",
        "Endpoints",
        "Event",
        "LimitRange",
        "PersistentVolumeClaim",
        "Pod",
        "PodTemplate",
        "ReplicationController",
        "ResourceQuota",
        "Secret",
        "Service",
        "ServiceAccount",
    ),
    "apps": ("ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"),
    "authorization.k8s.io": ("LocalSubjectAccessReview",),
    "autoscaling": ("HorizontalPodAutoscaler",),
    "batch": ("CronJob", "Job"),
    "certificates.k8s.io": ("PodCertificateRequest",),
    "coordination.k8s.io": ("Lease", "LeaseCandidate"),
    "discovery.k8s.io": ("EndpointSlice",),
    "events.k8s.io": ("Event",),
    "networking.k8s.io": ("Ingress", "NetworkPolicy"),
    "policy": ("PodDisruptionBudget",),
    "rbac.authorization.k8s.io": ("Role", "RoleBinding"),
    "resource.k8s.io": ("ResourceClaim", "ResourceClaimTemplate"),
    "scheduling.k8s.io": ("PodGroup", "Workload"),
    "storage.k8s.io": ("CSIStorageCapacity",),
}

_CLUSTER_SCOPED: Final[dict[str, tuple[str, ...]]] = {
    "": ("ComponentStatus", "Namespace", "Node", "PersistentVolume"),
    "admissionregistration.k8s.io": (
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
    ),
    "apiextensions.k8s.io": ("CustomResourceDefinition",),
    "apiregistration.k8s.io": ("APIService",),
    "authentication.k8s.io": ("SelfSubjectReview", "TokenReview"),
    "authorization.k8s.io": (
        "SelfSubjectAccessReview",
        "SelfSubjectRulesReview",
        "SubjectAccessReview",
    ),
    "certificates.k8s.io": ("CertificateSigningRequest", "ClusterTrustBundle"),
    "flowcontrol.apiserver.k8s.io": ("FlowSchema", "PriorityLevelConfiguration"),
    "internal.apiserver.k8s.io": ("StorageVersion",),
    "networking.k8s.io": ("IPAddress", "IngressClass", "ServiceCIDR"),
    "node.k8s.io": ("RuntimeClass",),
    "rbac.authorization.k8s.io": ("ClusterRole", "ClusterRoleBinding"),
    "resource.k8s.io": (
        "DeviceClass",
        "DeviceTaintRule",
        "ResourcePoolStatusRequest",
        "ResourceSlice",
    ),
    "scheduling.k8s.io": ("PriorityClass",),
    "storage.k8s.io": (
        "CSIDriver",
        "CSINode",
        "StorageClass",
        "VolumeAttachment",
        "VolumeAttributesClass",
    ),
    "storagemigration.k8s.io": ("StorageVersionMigration",),
}

BUILTIN: Final[Mapping[tuple[str, str], bool]] = MappingProxyType(
    {(g, k): True for g, kinds in _NAMESPACED.items() for k in kinds}
    | {(g, k): False for g, kinds in _CLUSTER_SCOPED.items() for k in kinds}
)
"""(group, kind) → namespaced, for every kind of the built-in API of kube-apiserver v1.36."""

_CRD: Final = ("apiextensions.k8s.io", "CustomResourceDefinition")
_CRD_SCOPES: Final = {"Namespaced": True, "Cluster": False}


class UnknownScope(ManifestError):
    """An object's namespace depends on a kind whose scope nobody knows yet: the revision may
    be taken once a CRD or the watcher's discovery tells (the planner re-checks it then)."""


READ_STEP = 1024
"""Manifests ``Scopes.reading_revision`` reads between two yields."""


class Scopes:
    """Whether a (group, kind) is namespaced: the built-in table plus what has been learned."""

    def __init__(self) -> None:
        self._namespaced: dict[tuple[str, str], bool] = dict(BUILTIN)

    def namespaced(self, group: str, kind: str) -> bool | None:
        """True or False when the scope is known, None for a kind never seen."""
        return self._namespaced.get((group, kind))

    def learn(self, group: str, kind: str, namespaced: bool) -> bool:
        """Record a scope reported by discovery; it replaces whatever was known. Whether that
        changed anything."""
        changed = self._namespaced.get((group, kind)) is not namespaced
        self._namespaced[(group, kind)] = namespaced
        return changed

    def learn_crd(self, manifest: Mapping[str, Any]) -> bool:
        """Record the scope of the kind a CustomResourceDefinition manifest defines. Neither the
        planner nor ``driftbus plan`` does this (they key a revision with
        :meth:`for_revision`); the tests state with it what a CRD says."""
        found = crd_scope(manifest)
        return found is not None and self.learn(*found)

    def for_revision(self, manifests: Iterable[Any]) -> Scopes:
        """What one revision is keyed with: the scopes known from the cluster, and for kinds it
        has not named yet, what the revision's own CRDs say. Nothing is learned: this view is
        dropped with the revision (refused or taken), and the cluster's word wins over any
        manifest."""
        return finished(self.reading_revision(manifests))

    def reading_revision(self, manifests: Iterable[Any]) -> Generator[None, None, Scopes]:
        """``for_revision`` in steps of ``READ_STEP`` manifests (a planner reading 100,000 lets
        its event loop run between them)."""
        crds: list[tuple[str, str, bool]] = []
        for i, raw in enumerate(manifests):
            if i % READ_STEP == READ_STEP - 1:
                yield
            if (found := revision_crd(raw)) is not None:
                crds.append(found)
        return self.with_crds(crds)

    def with_crds(self, crds: Iterable[tuple[str, str, bool]]) -> Scopes:
        """These scopes, and for kinds they have not named, what ``crds`` (a revision's CRDs'
        (group, kind, namespaced), in order: a later one of a kind wins) say."""
        own = {(g, k): namespaced for g, k, namespaced in crds if self.namespaced(g, k) is None}
        return _RevisionScopes(self, own) if own else self


class _RevisionScopes(Scopes):
    """The cluster's scopes with one revision's own CRDs filling in kinds it has not named."""

    def __init__(self, cluster: Scopes, own: dict[tuple[str, str], bool]) -> None:
        super().__init__()
        self._cluster = cluster
        self._own = own

    def namespaced(self, group: str, kind: str) -> bool | None:
        known = self._cluster.namespaced(group, kind)
        return known if known is not None else self._own.get((group, kind))

    def learn(self, group: str, kind: str, namespaced: bool) -> bool:
        raise TypeError("a revision's view of the scopes learns nothing: learn on the cluster's")


def revision_crd(raw: Any) -> tuple[str, str, bool] | None:
    """``crd_scope`` of one element of a revision's manifests (anything: a bad element is the
    check's to refuse), its kind compared first: most elements are not CRDs."""
    if isinstance(raw, Mapping) and raw.get("kind") == "CustomResourceDefinition":
        return crd_scope(raw)
    return None


def crd_scope(manifest: Mapping[str, Any]) -> tuple[str, str, bool] | None:
    """(group, kind, namespaced) of the kind a CustomResourceDefinition manifest defines.

    Anything that is not a well-formed CRD gives None: the applier reports it when the server
    refuses it, and a kind we cannot learn stays unknown (its namespace is kept). So does a CRD
    naming a built-in kind: the API server refuses it, and believing it would re-key objects of
    that kind, or let a tenant's ClusterRoleBinding pass as namespaced.
    """
    if group_kind(manifest) != _CRD:
        return None
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        return None
    group, names, scope = spec.get("group"), spec.get("names"), spec.get("scope")
    kind = names.get("kind") if isinstance(names, Mapping) else None
    if not (isinstance(group, str) and group and isinstance(kind, str) and kind):
        return None
    namespaced = _CRD_SCOPES.get(scope) if isinstance(scope, str) else None
    if namespaced is None or (group, kind) in BUILTIN:
        return None
    return group, kind, namespaced


def normalise(obj: Mapping[str, Any], scopes: Scopes, namespace: str = "") -> dict[str, Any]:
    """``obj`` keyed as the API server will store it: a cluster-scoped kind loses a stray
    ``metadata.namespace``; a namespaced kind without one gets ``namespace``, the bundle's
    default (``kubectl apply -n``).

    The input is never modified: a change yields a shallow copy with a new metadata map;
    otherwise ``obj`` itself is returned (as a dict). Like :func:`services.core.sha.prune`, the
    result may share structure with ``obj``; do not mutate it.

    Raises ``ManifestError`` (one line naming the object) for what would otherwise fail far
    later with a bare 404: a namespaced object with no namespace and no default, and an object
    without a namespace whose kind's scope nobody knows while a default is given (guessing
    would key it where the watcher never sees it).
    """
    meta = obj.get("metadata")
    gk = group_kind(obj)
    if gk is None or not isinstance(meta, Mapping):
        return obj if isinstance(obj, dict) else dict(obj)
    namespaced = scopes.namespaced(*gk)
    if namespaced is False and "namespace" in meta:
        return {**obj, "metadata": {k: v for k, v in meta.items() if k != "namespace"}}
    if meta.get("namespace") or namespaced is False:
        return obj if isinstance(obj, dict) else dict(obj)
    what = f"{gk[1]}/{meta.get('name', '?')}"
    if namespaced is None:
        if not namespace:
            return obj if isinstance(obj, dict) else dict(obj)  # the applier will see
        raise UnknownScope(
            f"{what}: cannot tell whether kind {gk[1]} ({gk[0] or 'core'}) is namespaced, so "
            f"the default namespace {namespace} cannot be applied yet: waiting for the "
            "cluster's watcher to discover the kind (is its CustomResourceDefinition "
            "installed?), or set metadata.namespace"
        )
    if not namespace:
        raise ManifestError(
            f"{what}: {gk[1]} is namespaced but has no metadata.namespace and the bundle has no "
            "default namespace (publish with --namespace NS, as kubectl apply -n NS)"
        )
    return {**obj, "metadata": {**meta, "namespace": namespace}}


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(group, kind) of a manifest, what its scope is looked up by; None when ``apiVersion`` or
    ``kind`` is missing or not a string (such an object is left as it is, and refused when it is
    keyed)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not (isinstance(api_version, str) and api_version and isinstance(kind, str) and kind):
        return None
    return api_version.rpartition("/")[0], kind
