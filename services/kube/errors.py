"""Typed Kubernetes API errors. Every message starts with the object it concerns.

The API server's own message is kept (it says *why*), trimmed so a huge body never reaches a
log. Callers that handle Secrets pass the result through ``services.core.scrub`` before
publishing it anywhere.
"""

from __future__ import annotations

from typing import Any

_MAX_MESSAGE = 1024


def _trim(message: str) -> str:
    """Keep the start (what) and the end (why: "field is immutable") of a long message."""
    if len(message) <= _MAX_MESSAGE:
        return message
    half = _MAX_MESSAGE // 2
    return f"{message[:half]} … {message[-half:]}"


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP code (0 for transport errors)."""

    retryable = False

    def __init__(
        self,
        subject: str,
        status: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ):
        self.subject = subject
        self.status = status
        self.reason = reason
        self.message = _trim(message)
        self.details = details or {}
        self.retry_after = retry_after
        super().__init__(f"{subject}: {reason} ({status}): {self.message}")


class BadRequest(KubeError):
    """400: the request itself is malformed (e.g. an apply body the server cannot parse)."""


class Unauthorized(KubeError):
    """401: the credentials were refused."""


class Forbidden(KubeError):
    """403: RBAC does not allow this verb on this resource."""


class NotFound(KubeError):
    """404: the object, or its kind, does not exist."""


class Conflict(KubeError):
    """409: another field manager owns fields we set, or a resourceVersion precondition failed."""


class Gone(KubeError):
    """410: the resourceVersion we watch from was compacted away; relist."""


class Invalid(KubeError):
    """422: the object fails validation (or changes an immutable field)."""


class Retryable(KubeError):
    """429, 5xx, timeouts and connection errors: try again later."""

    retryable = True


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: Retryable,
}


_DETERMINISTIC_500 = (
    "failed to convert",
    "unable to convert",
    "error decoding",
    "failed to create typed patch object",  # SSA: a field of the wrong type for the schema
)


def error_for(
    subject: str, status: int, body: dict[str, Any] | None, retry_after: float | None = None
) -> KubeError:
    """Map an HTTP status and a Kubernetes ``Status`` body to a typed error."""
    body = body or {}
    reason = str(body.get("reason") or f"HTTP {status}")
    message = str(body.get("message") or "")
    details = body.get("details") if isinstance(body.get("details"), dict) else None
    cls = _BY_STATUS.get(status, Retryable if status >= 500 else KubeError)
    if status == 500 and any(m in message for m in _DETERMINISTIC_500):
        # The API server reports some invalid objects as 500 (e.g. a Secret whose data is not
        # base64); retrying them cannot help.
        cls = Invalid
    return cls(subject, status, reason, message, details=details, retry_after=retry_after)
