"""Status code → typed error: what is retried and what is reported at once."""

from __future__ import annotations

import pytest

from services.kube.errors import (
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Retryable,
    error_for,
)


@pytest.mark.parametrize(
    ("status", "message", "cls", "retryable"),
    [
        (404, "not found", NotFound, False),
        (409, "Apply failed with 1 conflict", Conflict, False),
        (410, "too old resource version", Gone, False),
        (422, "field is immutable", Invalid, False),
        (403, "forbidden", Forbidden, False),
        (429, "too many requests", Retryable, True),
        (503, "unavailable", Retryable, True),
        (500, "etcdserver: request timed out", Retryable, True),
        (500, "failed to convert new object: illegal base64 data at input byte 6", Invalid, False),
        (
            500,
            "failed to create typed patch object (default/x; apps/v1, Kind=Deployment): "
            ".spec.replicas: expected numeric (int or float), got string",
            Invalid,
            False,
        ),
        (418, "teapot", KubeError, False),
    ],
    ids=[
        "404",
        "409",
        "410",
        "422",
        "403",
        "429",
        "503",
        "500-transient",
        "500-invalid-object",
        "500-wrong-field-type",
        "unknown-4xx",
    ],
)
def test_classification(status: int, message: str, cls: type, retryable: bool) -> None:
    err = error_for("Secret/ns/x", status, {"reason": "R", "message": message})
    assert type(err) is cls
    assert err.retryable is retryable
    assert str(err).startswith("Secret/ns/x: R (")


def test_long_messages_keep_their_reason_at_the_end() -> None:
    message = (
        'Job.batch "once" is invalid: spec.template: Invalid value: '
        + "x" * 5000
        + (": field is immutable")
    )
    err = error_for("Job/ns/once", 422, {"reason": "Invalid", "message": message})
    assert len(err.message) < 1100
    assert err.message.endswith("field is immutable")
    assert err.message.startswith("Job.batch")
