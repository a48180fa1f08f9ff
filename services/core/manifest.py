"""Desired manifests as driftbus handles them: ownership, validation, apply order.

The ownership label is added *before* hashing, so manifestSHA covers it (DESIGN §2), and it is
what the watcher selects on and what prune checks. Only the bundle name goes into it — a
revision label would change every object's SHA on every revision and re-apply everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from schemas.subjects import ObjectKey, SubjectError

OWNER_LABEL: Final = "driftbus.dev/bundle"
FIELD_MANAGER: Final = "driftbus"
# A label value: ≤ 63 characters, alphanumerics with - _ . inside.
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")


class ManifestError(ValueError):
    """A manifest or bundle cannot be accepted; the message names it and says why."""


def check_bundle_name(name: str) -> str:
    if not _LABEL_VALUE.match(name):
        raise ManifestError(
            f"bundle {name!r}: must be a valid label value (≤ 63 characters, letters, digits, "
            "'-', '_', '.', starting and ending with a letter or digit)"
        )
    return name


def owned(obj: Mapping[str, Any], bundle: str) -> dict[str, Any]:
    """A copy of ``obj`` carrying the ownership label (the input is not modified)."""
    meta = dict(obj.get("metadata") or {})
    labels = dict(meta.get("labels") or {})
    labels[OWNER_LABEL] = bundle
    meta["labels"] = labels
    return {**obj, "metadata": meta}


def key_of(obj: Any, where: str) -> ObjectKey:
    """Key of one manifest; ``where`` (e.g. ``manifests[3]``) starts the error if it is broken."""
    if not isinstance(obj, Mapping):
        raise ManifestError(f"{where}: a manifest must be an object, not {type(obj).__name__}")
    try:
        return ObjectKey.of(dict(obj))
    except SubjectError as exc:
        raise ManifestError(f"{where}: {exc}") from None


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
