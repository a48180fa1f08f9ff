"""kstatus-style health from a live object's status."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.messages import Health
from services.core.health import health

H = Health


def obj(
    api: str,
    kind: str,
    *,
    spec: Any = None,
    status: Any = None,
    gen: int = 1,
    deleting: bool = False,
) -> dict[str, Any]:
    o: dict[str, Any] = {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "x", "generation": gen},
    }
    if deleting:
        o["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if spec is not None:
        o["spec"] = spec
    if status is not None:
        o["status"] = status
    return o


def dep(status: Any, replicas: int = 2, gen: int = 1) -> dict[str, Any]:
    return obj("apps/v1", "Deployment", spec={"replicas": replicas}, status=status, gen=gen)


FULL = {
    "observedGeneration": 1,
    "replicas": 2,
    "updatedReplicas": 2,
    "readyReplicas": 2,
    "availableReplicas": 2,
}

CASES = [
    ("configmap-is-ready-when-it-exists", obj("v1", "ConfigMap"), H.READY, ""),
    ("clusterrole-is-ready", obj("rbac.authorization.k8s.io/v1", "ClusterRole"), H.READY, ""),
    (
        "terminating-is-in-progress",
        obj("v1", "ConfigMap", deleting=True),
        H.IN_PROGRESS,
        "terminating",
    ),
    ("deployment-without-status", dep(None), H.IN_PROGRESS, "no status"),
    ("deployment-rolled-out", dep(FULL), H.READY, ""),
    ("deployment-generation-not-observed", dep(FULL, gen=2), H.IN_PROGRESS, "generation 2"),
    ("deployment-not-all-ready", dep({**FULL, "readyReplicas": 1}), H.IN_PROGRESS, "ready: 1/2"),
    ("deployment-old-replicas", dep({**FULL, "replicas": 3}), H.IN_PROGRESS, "old replicas"),
    (
        "deployment-deadline-exceeded",
        dep(
            {
                **FULL,
                "conditions": [
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": "too slow",
                    }
                ],
            }
        ),
        H.FAILED,
        "too slow",
    ),
    (
        "deployment-default-one-replica",
        obj(
            "apps/v1",
            "Deployment",
            spec={},
            status={
                **FULL,
                "replicas": 1,
                "updatedReplicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
            },
        ),
        H.READY,
        "",
    ),
    (
        "statefulset-revision-rolling",
        obj(
            "apps/v1",
            "StatefulSet",
            spec={"replicas": 1},
            status={
                "readyReplicas": 1,
                "updatedReplicas": 1,
                "currentRevision": "a",
                "updateRevision": "b",
            },
        ),
        H.IN_PROGRESS,
        "rolling",
    ),
    (
        "daemonset-ready",
        obj(
            "apps/v1",
            "DaemonSet",
            status={
                "desiredNumberScheduled": 3,
                "updatedNumberScheduled": 3,
                "numberAvailable": 3,
                "numberReady": 3,
            },
        ),
        H.READY,
        "",
    ),
    (
        "job-complete",
        obj("batch/v1", "Job", status={"conditions": [{"type": "Complete", "status": "True"}]}),
        H.READY,
        "",
    ),
    (
        "job-failed",
        obj(
            "batch/v1",
            "Job",
            status={
                "conditions": [
                    {"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}
                ]
            },
        ),
        H.FAILED,
        "BackoffLimit",
    ),
    (
        "pod-running-ready",
        obj(
            "v1",
            "Pod",
            status={"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        ),
        H.READY,
        "",
    ),
    (
        "pod-failed",
        obj("v1", "Pod", status={"phase": "Failed", "reason": "Evicted"}),
        H.FAILED,
        "Evicted",
    ),
    (
        "pvc-pending",
        obj("v1", "PersistentVolumeClaim", status={"phase": "Pending"}),
        H.IN_PROGRESS,
        "Pending",
    ),
    ("namespace-active", obj("v1", "Namespace", status={"phase": "Active"}), H.READY, ""),
    (
        "namespace-terminating",
        obj("v1", "Namespace", status={"phase": "Terminating"}),
        H.IN_PROGRESS,
        "Terminating",
    ),
    (
        "crd-established",
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            status={"conditions": [{"type": "Established", "status": "True"}]},
        ),
        H.READY,
        "",
    ),
    (
        "crd-names-rejected",
        obj(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            status={
                "conditions": [{"type": "NamesAccepted", "status": "False", "reason": "Conflict"}]
            },
        ),
        H.FAILED,
        "Conflict",
    ),
    (
        "crd-pending",
        obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", status={}),
        H.IN_PROGRESS,
        "no status",
    ),
    ("clusterip-service", obj("v1", "Service", spec={"type": "ClusterIP"}, status={}), H.READY, ""),
    (
        "loadbalancer-without-address",
        obj("v1", "Service", spec={"type": "LoadBalancer"}, status={"loadBalancer": {}}),
        H.IN_PROGRESS,
        "address",
    ),
    (
        "custom-resource-ready-condition",
        obj("x.io/v1", "Thing", status={"conditions": [{"type": "Ready", "status": "True"}]}),
        H.READY,
        "",
    ),
    (
        "custom-resource-not-ready",
        obj(
            "x.io/v1",
            "Thing",
            status={
                "conditions": [{"type": "Ready", "status": "False", "message": "waiting for db"}]
            },
        ),
        H.IN_PROGRESS,
        "waiting for db",
    ),
    (
        "custom-resource-stalled",
        obj(
            "x.io/v1",
            "Thing",
            status={"conditions": [{"type": "Stalled", "status": "True", "reason": "BadConfig"}]},
        ),
        H.FAILED,
        "BadConfig",
    ),
    (
        "custom-resource-reconciling",
        obj("x.io/v1", "Thing", status={"conditions": [{"type": "Reconciling", "status": "True"}]}),
        H.IN_PROGRESS,
        "reconciling",
    ),
    (
        "malformed-status-is-tolerated",
        obj("x.io/v1", "Thing", status={"conditions": "nope"}),
        H.READY,
        "",
    ),
    (
        "malformed-replicas-are-tolerated",
        dep({**FULL, "readyReplicas": "2"}),
        H.IN_PROGRESS,
        "ready: 0/2",
    ),
]


@pytest.mark.parametrize(("case", "o", "want", "why"), CASES, ids=[c[0] for c in CASES])
def test_health(case: str, o: dict[str, Any], want: Health, why: str) -> None:
    got, message = health(o)
    assert got is want
    assert why in message
    if want is H.READY:
        assert message == ""
