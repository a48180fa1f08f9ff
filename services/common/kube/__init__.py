"""A thin Kubernetes API client on aiohttp: one request function, discovery, list/watch, apply.

Raw JSON in, raw JSON out (dicts decoded by orjson): typed models would change object hashes.
"""

from services.common.kube.client import KubeClient, WatchEvent
from services.common.kube.discovery import Resource
from services.common.kube.errors import (
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
