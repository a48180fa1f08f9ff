"""Desired manifests as driftbus handles them: ownership, validation, apply order.

The ownership label is added *before* hashing, so manifestSHA covers it (DESIGN §2), and it is
what the watcher selects on and what prune checks. Only the bundle name goes into it — a
revision label would change every object's SHA on every revision and re-apply everything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from schemas.subjects import ObjectKey, SubjectError, join_bundle, split_bundle
from schemas.tenants import DNS_LABEL

OWNER_LABEL: Final = "driftbus.dev/bundle"
TENANT_LABEL: Final = "driftbus.dev/tenant"
"""Next to ``OWNER_LABEL`` on the objects of a tenant's bundle (a label value holds no ``/``)."""
FIELD_MANAGER: Final = "driftbus"
PRUNE_ANNOTATION: Final = "driftbus.dev/prune"
"""``driftbus.dev/prune: disabled`` on an object (manifest or live) keeps it when it leaves its
bundle (as Flux's ``kustomize.toolkit.fluxcd.io/prune: disabled``, Argo CD's ``Prune=false``)."""
# A label value: ≤ 63 characters, alphanumerics with - _ . inside.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
TENANT_NAME = re.compile(DNS_LABEL)
"""A tenant's name: a DNS label (it also names the tenant's NATS user and subject token)."""


MAX_MANIFEST_BYTES: Final = 1_000_000
"""One object's JSON must fit one NATS message (1 MiB by default) with its intent envelope;
the API server refuses objects near this size anyway (etcd's request limit is 1.5 MiB)."""
DEFAULT_BUNDLE_MAX_BYTES: Final = 64 * 1024 * 1024
"""The stored manifests of one bundle (their JSON): 100 times the largest install set of the
corpus (argo-cd, 59 objects: 633,660 bytes of JSON), and a 100,000-object bundle fits. Read by
the loader before anything is sent and by the Object Store when a bundle is stored."""
BUNDLE_LIMIT_SETTING: Final = "DRIFTBUS_BUNDLE_MAX_BYTES"


def rv_int(resource_version: str) -> int:
    """A resourceVersion as a number, to tell which of two states of one object is newer.
    Kubernetes calls it opaque, but every etcd-backed server hands out increasing integers
    (etcd's revision: a signed 64-bit number); anything else counts as 0 (older than every real
    state) — a string of thousands of digits too, which ``int()`` refuses and no store packs."""
    rv = resource_version
    if not (rv.isascii() and rv.isdigit()) or len(rv) > len(str(_INT64_MAX)):
        return 0
    n = int(rv)
    return n if n <= _INT64_MAX else 0


_INT64_MAX: Final = 2**63 - 1


class ManifestError(ValueError):
    """A manifest or bundle cannot be accepted; the message names it and says why."""


def check_size(encoded: bytes, where: str) -> bytes:
    """``encoded`` (one manifest's JSON) if it is small enough to travel as one intent."""
    if len(encoded) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{where}: {len(encoded):,} bytes as JSON, over the {MAX_MANIFEST_BYTES:,}-byte limit "
            "for one object (split it: a ConfigMap or Secret holds at most 1 MiB anyway)"
        )
    return encoded


def check_bundle_name(bundle: str) -> str:
    """``bundle`` if it is ``name`` or ``tenant/name``; ManifestError in one line otherwise."""
    tenant, name = split_bundle(bundle)
    if "/" in bundle and not TENANT_NAME.match(tenant):
        raise ManifestError(
            f"bundle {bundle!r}: the tenant {tenant!r} must be a DNS label (≤ 63 characters, "
            "lower-case letters, digits and '-', starting and ending with a letter or digit)"
        )
    if not _LABEL_VALUE.match(name):
        raise ManifestError(
            f"bundle {bundle!r}: the name {name!r} must be a valid label value (≤ 63 "
            "characters, letters, digits, '-', '_', '.', starting and ending with a letter or "
            "digit)"
        )
    return bundle


def check_not_empty(
    bundle: str, objects: int, *, allow_empty: bool, delete: bool = False, where: str = ""
) -> None:
    """ManifestError for a revision of ``bundle`` with no ``objects``, unless ``allow_empty`` or
    it is a deletion: it would prune every object the bundle has, and it is far more often a
    wrong path than a wish. The one rule, applied where each party can: the CLI before it
    sends (``load.require_objects``, naming what it read), ``publish_bundle`` for every
    publisher, and the planner (``checked_revision``) for whoever published. ``where`` says
    where it would prune (a fleet: in every cluster it reached)."""
    if objects or allow_empty or delete:
        return
    raise ManifestError(
        f"an empty revision (no objects) would prune every object of bundle {bundle}{where}; "
        "publish it with --allow-empty if that is what you want"
    )


def prune_disabled(obj: Mapping[str, Any]) -> bool:
    """Whether the object opts out of prune (its annotation says ``disabled``)."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return isinstance(annotations, Mapping) and annotations.get(PRUNE_ANNOTATION) == "disabled"


def owner_of(obj: Mapping[str, Any]) -> str:
    """The bundle (its full name) named by the object's ownership labels ("" when none)."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return ""
    name, tenant = labels.get(OWNER_LABEL), labels.get(TENANT_LABEL)
    if not isinstance(name, str) or not name:
        return ""
    return join_bundle(tenant if isinstance(tenant, str) else "", name)


def owned(obj: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """A copy of ``obj`` carrying the ownership labels of ``bundle`` (the input is not
    modified). A platform bundle's objects carry no tenant label, even if the manifest wrote
    one: which tenant owns an object is never the manifest's to say."""
    tenant, name = split_bundle(bundle)
    meta = dict(obj.get("metadata") or {})
    labels = dict(meta.get("labels") or {})
    labels[OWNER_LABEL] = name
    if tenant:
        labels[TENANT_LABEL] = tenant
    else:
        labels.pop(TENANT_LABEL, None)
    meta["labels"] = labels
    return {**obj, "metadata": meta}


def bundle_kinds(manifests: Iterable[Any]) -> list[str]:
    """``Bundle.kinds`` of ``manifests``: each ``apiVersion/Kind`` once, sorted; entries without
    both are left out (the planner refuses them with the object's position)."""
    return sorted({k for m in manifests if (k := kind_of(m)) is not None})


def kind_of(m: Any) -> str | None:
    """A manifest's ``apiVersion/Kind`` as ``bundle_kinds`` lists it; None without both."""
    if (
        isinstance(m, dict)
        and isinstance(m.get("apiVersion"), str)
        and isinstance(m.get("kind"), str)
    ):
        return f"{m['apiVersion']}/{m['kind']}"
    return None


def key_of(obj: Any, where: str) -> ObjectKey:
    """Key of one manifest; ``where`` (e.g. ``manifests[3]``) starts the error if it is broken."""
    if not isinstance(obj, Mapping):
        raise ManifestError(f"{where}: a manifest must be an object, not {type(obj).__name__}")
    try:
        key = ObjectKey.of(dict(obj))
    except SubjectError as exc:
        raise ManifestError(f"{where}: {exc}") from None
    meta = obj["metadata"]
    for field in ("labels", "annotations"):
        if not isinstance(meta.get(field) or {}, Mapping):
            raise ManifestError(f"{where}: {key}: metadata.{field} must be a map")
    return key


# The one ordering table: prerequisites first so dependents rarely wait; webhooks last so they
# cannot block the objects they would validate. Ties break by namespace and name.
_STAGES: Final[dict[tuple[str, str], int]] = {
    ("apiextensions.k8s.io", "CustomResourceDefinition"): 0,
    ("", "Namespace"): 0,
    ("", "ResourceQuota"): 1,
    ("", "LimitRange"): 1,
    ("", "ServiceAccount"): 1,
    ("rbac.authorization.k8s.io", "ClusterRole"): 1,
    ("rbac.authorization.k8s.io", "Role"): 1,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): 2,
    ("rbac.authorization.k8s.io", "RoleBinding"): 2,
    ("", "Secret"): 2,
    ("", "ConfigMap"): 2,
    ("", "PersistentVolumeClaim"): 2,
    ("", "Service"): 3,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): 9,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): 9,
}
_DEFAULT_STAGE: Final = 5


def apply_order(key: ObjectKey) -> tuple[int, str, str, str, str]:
    return (
        _STAGES.get((key.group, key.kind), _DEFAULT_STAGE),
        key.namespace,
        key.group,
        key.kind,
        key.name,
    )


def apply_order_text(key: ObjectKey) -> str:
    """``apply_order`` as one string that sorts the same (stages are one digit; NUL, which no
    name holds, parts the fields): a planner sorts 100,000 keys of these several times faster
    than of tuples, and its event loop waits for the sort."""
    stage = _STAGES.get((key.group, key.kind), _DEFAULT_STAGE)
    return f"{stage}\0{key.namespace}\0{key.group}\0{key.kind}\0{key.name}"
