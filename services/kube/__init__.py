"""A thin Kubernetes API client on aiohttp: one request function, discovery, list/watch, apply.

Raw JSON in, raw JSON out (dicts decoded by orjson): typed models would change object hashes.

- ``client`` — the one choke point for Kubernetes HTTP: auth, TLS, timeouts, the verbs.
- ``credentials`` — kubernetes-asyncio's credential loaders, without its API models.
- ``discovery`` — (apiVersion, kind) → REST resource, cached per group-version.
- ``errors`` — typed API errors, each naming the object it concerns.
"""

from services.kube.client import KubeClient, WatchEvent
from services.kube.discovery import Resource
from services.kube.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Retryable,
    Unauthorized,
)

__all__ = [
    "BadRequest",
    "Conflict",
    "Forbidden",
    "Gone",
    "Invalid",
    "KubeClient",
    "KubeError",
    "NotFound",
    "Resource",
    "Retryable",
    "Unauthorized",
    "WatchEvent",
]
