"""Realistic objects as the watcher sees them: server-returned, with managedFields and status.

Deterministic (seeded) so every run hashes the same corpus. The mix follows what platform teams
ship: many ConfigMaps and Deployments, Services, and a few CRDs whose OpenAPI schemas are large.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

MIX = {"ConfigMap": 0.40, "Deployment": 0.30, "Service": 0.25, "CustomResourceDefinition": 0.05}


def _meta(rng: random.Random, name: str, ns: str | None, manager: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": str(uuid.UUID(int=rng.getrandbits(128))),
        "resourceVersion": str(rng.randint(1000, 10**7)),
        "generation": rng.randint(1, 20),
        "creationTimestamp": "2026-11-01T10:00:00Z",
        "labels": {
            "app.kubernetes.io/name": name,
            "driftbus.dev/bundle": "bench",
            "team": rng.choice(["payments", "search", "platform"]),
        },
        "annotations": {"driftbus.dev/revision": f"{rng.getrandbits(64):016x}"},
        "managedFields": [
            {
                "manager": manager,
                "operation": "Apply",
                "apiVersion": "v1",
                "time": "2026-11-01T10:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app.kubernetes.io/name": {}}},
                    "f:spec": {f"f:field{i}": {} for i in range(8)},
                },
            }
        ],
    }
    if ns:
        meta["namespace"] = ns
    return meta


def configmap(rng: random.Random, i: int) -> dict[str, Any]:
    data = {
        f"key-{k}": "".join(rng.choices("abcdefghij \n=", k=rng.randint(20, 400)))
        for k in range(rng.randint(2, 12))
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(rng, f"cm-{i}", f"ns-{i % 50}", "driftbus"),
        "data": data,
    }


def deployment(rng: random.Random, i: int) -> dict[str, Any]:
    containers = [
        {
            "name": f"c{c}",
            "image": f"registry.example.com/app{c}:1.{rng.randint(0, 99)}",
            "imagePullPolicy": "IfNotPresent",
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}],
            "env": [{"name": f"ENV_{e}", "value": str(rng.random())} for e in range(6)],
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "1", "memory": "512Mi"},
            },
            "readinessProbe": {
                "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                "periodSeconds": 10,
                "timeoutSeconds": 1,
                "successThreshold": 1,
                "failureThreshold": 3,
            },
        }
        for c in range(rng.randint(1, 3))
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(rng, f"web-{i}", f"ns-{i % 50}", "driftbus"),
        "spec": {
            "replicas": rng.randint(1, 5),
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app": f"web-{i}"}},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"},
            },
            "template": {
                "metadata": {"labels": {"app": f"web-{i}"}},
                "spec": {
                    "containers": containers,
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "schedulerName": "default-scheduler",
                    "securityContext": {},
                },
            },
        },
        "status": {
            "observedGeneration": 3,
            "replicas": 2,
            "readyReplicas": 2,
            "updatedReplicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "lastUpdateTime": "2026-11-01T10:00:00Z",
                    "lastTransitionTime": "2026-11-01T10:00:00Z",
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                }
            ],
        },
    }


def service(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(rng, f"svc-{i}", f"ns-{i % 50}", "driftbus"),
        "spec": {
            "selector": {"app": f"web-{i}"},
            "type": "ClusterIP",
            "clusterIP": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "clusterIPs": ["10.0.0.1"],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "sessionAffinity": "None",
            "internalTrafficPolicy": "Cluster",
            "ports": [
                {"name": f"p{p}", "port": 80 + p, "targetPort": 8080 + p, "protocol": "TCP"}
                for p in range(rng.randint(1, 3))
            ],
        },
        "status": {"loadBalancer": {}},
    }


def _schema(rng: random.Random, depth: int) -> dict[str, Any]:
    if depth == 0:
        return {
            "type": rng.choice(["string", "integer", "boolean"]),
            "description": "A field. " * rng.randint(2, 12),
        }
    return {
        "type": "object",
        "description": "An object with nested fields. " * 3,
        "properties": {f"field{k}": _schema(rng, depth - 1) for k in range(rng.randint(3, 6))},
        "required": ["field0"],
    }


def crd(rng: random.Random, i: int) -> dict[str, Any]:
    group = f"g{i}.bench.driftbus.dev"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": _meta(rng, f"things.{group}", None, "driftbus"),
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "things",
                "singular": "thing",
                "kind": "Thing",
                "listKind": "ThingList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _schema(rng, 4)},
                }
            ],
        },
        "status": {
            "conditions": [{"type": "Established", "status": "True"}],
            "acceptedNames": {"kind": "Thing", "plural": "things"},
        },
    }


_MAKERS = {
    "ConfigMap": configmap,
    "Deployment": deployment,
    "Service": service,
    "CustomResourceDefinition": crd,
}


def build(n: int, seed: int = 42) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    kinds = list(MIX)
    weights = [MIX[k] for k in kinds]
    return [_MAKERS[rng.choices(kinds, weights)[0]](rng, i) for i in range(n)]
