"""Manifests the integration tests build more than once."""

from __future__ import annotations

from typing import Any


def crd(group: str, kind: str, scope: str = "Namespaced") -> dict[str, Any]:
    """A CRD serving ``kind`` at ``<group>/v1``, any fields allowed."""
    plural = f"{kind.lower()}s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def namespace_of(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def cm(ns: str, name: str) -> dict[str, Any]:
    """A ConfigMap ``ns/name`` whose data names it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"k": name},
    }


def secret(ns: str, name: str) -> dict[str, Any]:
    """A Secret ``ns/name`` whose data names it."""
    obj = {**cm(ns, name), "kind": "Secret", "stringData": {"k": name}}
    del obj["data"]
    return obj
