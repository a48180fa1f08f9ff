"""Error classification: every error the applier meets, at every step, maps to one verdict."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from nats.errors import TimeoutError as NatsTimeout

from schemas.messages import ApplyIntent, DeleteIntent, Impersonation, ObjectPhase
from schemas.subjects import ObjectKey
from services.applier.classify import (
    Decided,
    Gone,
    Leave,
    Redeliver,
    Replace,
    Report,
    Retry,
    Step,
    Verdict,
    Wait,
    classify,
    schedule,
)
from services.common.bus import BusError
from services.kube import KubeError, Retryable
from services.kube.errors import error_for

FAILED, CONFLICT = ObjectPhase.FAILED, ObjectPhase.CONFLICT
WAITING, RETRYING = ObjectPhase.WAITING, ObjectPhase.RETRYING
FORBIDDEN = ObjectPhase.FORBIDDEN
CM = "ConfigMap/team-a/settings"
SECRET_VALUE = "hunter2-hunter2"


def manifest(kind: str = "ConfigMap", **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "settings", "namespace": "team-a"},
        **extra,
    }


def applying(m: dict[str, Any] | None = None, **flags: Any) -> ApplyIntent:
    m = m or manifest()
    return ApplyIntent(
        cluster="c1",
        key=ObjectKey("", m["kind"], "team-a", "settings"),
        bundle="b",
        revision="r1",
        manifest_sha="0" * 64,
        manifest=m,
        reason="new",
        **flags,
    )


APPLY = applying()
FORCED = applying(force=True)
REPLACEABLE = applying(allow_replace=True)
AS_TENANT = applying(
    impersonate=Impersonation("system:serviceaccount:team-a:deployer", ["system:serviceaccounts"])
)
SECRET = applying(
    manifest("Secret", data={"password": base64.b64encode(SECRET_VALUE.encode()).decode()})
)
PRUNE = DeleteIntent(
    cluster="c1",
    key=ObjectKey("", "ConfigMap", "team-a", "settings"),
    api_version="v1",
    bundle="b",
    revision="r2",
)


def status(
    code: int, message: str = "boom", retry_after: float | None = None, **details: Any
) -> KubeError:
    """The error the kube client raises for an API answer with this status code."""
    body = {"reason": "Because", "message": message, "details": details or None}
    return error_for(CM, code, body, retry_after)


def text(code: int, message: str = "boom") -> str:
    return f"{CM}: Because ({code}): {message}"


IMMUTABLE = "spec.selector: field is immutable"
NOT_SERVED = (
    "kind ConfigMap (v1) is not served by the cluster "
    "(is its CustomResourceDefinition installed and Established?)"
)
TAKE_OVER = " (publish with force to take these fields over)"
RECREATE = " (publish with allow-replace to delete and recreate it)"

CASES: list[tuple[str, Exception, Step, ApplyIntent | DeleteIntent, Verdict]] = [
    # (case, error, step, intent, verdict)
    # --- anywhere: the status code decides --------------------------------------------------
    ("400-bad-request-fails", status(400), Step.INTENT, APPLY, Report(FAILED, text(400))),
    ("401-unauthorized-fails", status(401), Step.INTENT, APPLY, Report(FAILED, text(401))),
    ("403-forbidden-waits", status(403), Step.INTENT, APPLY, Retry(FORBIDDEN, text(403))),
    ("404-not-found-fails", status(404), Step.INTENT, APPLY, Report(FAILED, text(404))),
    (
        "409-conflict-on-a-re-apply-fails",
        status(409),
        Step.INTENT,
        APPLY,
        Report(FAILED, text(409)),
    ),
    ("410-gone-fails", status(410), Step.INTENT, APPLY, Report(FAILED, text(410))),
    ("422-invalid-fails", status(422), Step.INTENT, APPLY, Report(FAILED, text(422))),
    ("418-any-other-4xx-fails", status(418), Step.INTENT, APPLY, Report(FAILED, text(418))),
    (
        "429-is-retried-honouring-retry-after",
        status(429, retry_after=7.0),
        Step.INTENT,
        APPLY,
        Retry(RETRYING, text(429), 7.0),
    ),
    ("500-is-retried", status(500), Step.INTENT, APPLY, Retry(RETRYING, text(500))),
    (
        "500-that-cannot-convert-the-object-fails",
        status(500, "failed to convert new object"),
        Step.INTENT,
        APPLY,
        Report(FAILED, text(500, "failed to convert new object")),
    ),
    ("503-is-retried", status(503), Step.INTENT, APPLY, Retry(RETRYING, text(503))),
    (
        "an-unreachable-api-server-is-retried",
        Retryable(CM, 0, "ClientConnectorError", "refused"),  # as the client raises it
        Step.INTENT,
        APPLY,
        Retry(RETRYING, f"{CM}: ClientConnectorError (0): refused"),
    ),
    (
        "a-response-that-is-not-json-fails",
        KubeError(CM, 200, "BadResponse", "response is not a JSON object"),
        Step.INTENT,
        APPLY,
        Report(FAILED, f"{CM}: BadResponse (200): response is not a JSON object"),
    ),
    # --- anywhere: not the API server's answer ----------------------------------------------
    (
        "a-missing-prerequisite-waits",
        Wait("Deployment/team-a/web is still being deleted for replacement"),
        Step.INTENT,
        APPLY,
        Retry(WAITING, "Deployment/team-a/web is still being deleted for replacement"),
    ),
    (
        "a-verb-s-classified-error-keeps-its-verdict",
        Decided(Report(CONFLICT, "owned by kubectl")),
        Step.INTENT,
        APPLY,
        Report(CONFLICT, "owned by kubectl"),
    ),
    ("a-nats-timeout-leaves-the-intent-unacked", NatsTimeout(), Step.INTENT, APPLY, Leave()),
    ("a-timeout-leaves-the-intent-unacked", TimeoutError(), Step.INTENT, APPLY, Leave()),
    ("a-bus-error-leaves-the-intent-unacked", BusError("away"), Step.INTENT, APPLY, Leave()),
    (
        "a-lost-connection-leaves-the-intent-unacked",
        ConnectionResetError(),
        Step.INTENT,
        APPLY,
        Leave(),
    ),
    (
        "a-bug-fails-naming-only-the-exception-type",
        ValueError(SECRET_VALUE),
        Step.INTENT,
        APPLY,
        Report(FAILED, "internal error: ValueError", internal=True),
    ),
    # --- resolving the kind -----------------------------------------------------------------
    (
        "an-unserved-kind-waits-for-its-crd",
        status(404),
        Step.RESOLVE,
        APPLY,
        Retry(WAITING, NOT_SERVED),
    ),
    (
        "discovery-unavailable-is-retried",
        status(503),
        Step.RESOLVE,
        APPLY,
        Retry(RETRYING, text(503)),
    ),
    ("discovery-forbidden-waits", status(403), Step.RESOLVE, APPLY, Retry(FORBIDDEN, text(403))),
    # --- the server-side apply --------------------------------------------------------------
    (
        "a-missing-namespace-waits",
        status(404, kind="namespaces", name="team-a"),
        Step.APPLY,
        APPLY,
        Retry(WAITING, "namespace team-a does not exist"),
    ),
    (
        "any-other-404-on-apply-fails",
        status(404, kind="configmaps"),
        Step.APPLY,
        APPLY,
        Report(FAILED, text(404)),
    ),
    (
        "a-field-conflict-says-how-to-take-over",
        status(409, "owned by kubectl"),
        Step.APPLY,
        APPLY,
        Report(CONFLICT, "owned by kubectl" + TAKE_OVER),
    ),
    (
        "a-field-conflict-despite-force-says-only-the-server-s-reason",
        status(409, "owned by kubectl"),
        Step.APPLY,
        FORCED,
        Report(CONFLICT, "owned by kubectl"),
    ),
    ("an-invalid-object-fails", status(422), Step.APPLY, APPLY, Report(FAILED, text(422))),
    (
        "an-immutable-field-fails-saying-how-to-replace",
        status(422, IMMUTABLE),
        Step.APPLY,
        APPLY,
        Report(FAILED, text(422, IMMUTABLE) + RECREATE),
    ),
    (
        "an-immutable-field-is-replaced-when-the-bundle-allows",
        status(422, IMMUTABLE),
        Step.APPLY,
        REPLACEABLE,
        Replace(),
    ),
    (
        "an-apply-throttled-is-retried-honouring-retry-after",
        status(429, retry_after=3.0),
        Step.APPLY,
        APPLY,
        Retry(RETRYING, text(429), 3.0),
    ),
    ("an-apply-forbidden-waits", status(403), Step.APPLY, APPLY, Retry(FORBIDDEN, text(403))),
    (
        "an-impersonated-apply-forbidden-names-the-identity",
        status(403),
        Step.APPLY,
        AS_TENANT,
        Retry(FORBIDDEN, text(403) + " (as system:serviceaccount:team-a:deployer)"),
    ),
    # --- the prune --------------------------------------------------------------------------
    ("pruning-what-is-not-there-is-done", status(404), Step.PRUNE, PRUNE, Gone()),
    (
        "a-namesake-created-since-the-read-is-looked-at-again",
        status(409, "uid precondition failed", retry_after=9.0),
        Step.PRUNE,
        PRUNE,
        Retry(RETRYING, text(409, "uid precondition failed")),
    ),
    (
        "a-prune-throttled-is-retried-honouring-retry-after",
        status(503, retry_after=5.0),
        Step.PRUNE,
        PRUNE,
        Retry(RETRYING, text(503), 5.0),
    ),
    ("a-prune-forbidden-waits", status(403), Step.PRUNE, PRUNE, Retry(FORBIDDEN, text(403))),
    # --- secrets never leak -----------------------------------------------------------------
    (
        "a-secret-value-in-an-invalid-answer-is-masked",
        status(422, f'data.password: Invalid value: "{SECRET_VALUE}"'),
        Step.APPLY,
        SECRET,
        Report(FAILED, text(422, "data.password: Invalid value: ***")),
    ),
    (
        "a-secret-value-in-a-conflict-is-masked",
        status(409, f"{SECRET_VALUE} is owned by kubectl"),
        Step.APPLY,
        SECRET,
        Report(CONFLICT, "*** is owned by kubectl" + TAKE_OVER),
    ),
    (
        "a-secret-value-in-a-retried-answer-is-masked",
        status(503, f"webhook rejected {SECRET_VALUE}"),
        Step.INTENT,
        SECRET,
        Retry(RETRYING, text(503, "webhook rejected ***")),
    ),
]


@pytest.mark.parametrize(
    ("case", "error", "step", "intent", "verdict"), CASES, ids=[c[0] for c in CASES]
)
def test_classify(
    case: str,
    error: Exception,
    step: Step,
    intent: ApplyIntent | DeleteIntent,
    verdict: Verdict,
) -> None:
    assert classify(error, step, intent) == verdict


SCHEDULES: list[tuple[str, Retry, int, int, Redeliver | Report]] = [
    # (case, retry, attempt, max_deliver, what happens; max_backoff is 60 s)
    (
        "first-failure-is-delivered-again-in-a-second",
        Retry(WAITING, "no CRD"),
        1,
        -1,
        Redeliver(WAITING, "no CRD (attempt 1; next in 1s)", 1.0),
    ),
    (
        "retry-after-is-honoured",
        Retry(RETRYING, "429", 30.0),
        1,
        -1,
        Redeliver(RETRYING, "429 (attempt 1; next in 30s)", 30.0),
    ),
    (
        "below-the-delivery-limit-backs-off",
        Retry(RETRYING, "503"),
        3,
        5,
        Redeliver(RETRYING, "503 (attempt 3; next in 4s)", 4.0),
    ),
    (
        "the-delivery-limit-reached-fails-naming-the-cause",
        Retry(RETRYING, "503"),
        5,
        5,
        Report(FAILED, "gave up after 5 deliveries: 503"),
    ),
    (
        "no-limit-retries-for-as-long-as-it-lasts",
        Retry(WAITING, "no namespace"),
        1000,
        -1,
        Redeliver(WAITING, "no namespace (attempt 1000; next in 60s)", 60.0),
    ),
    (
        "a-limit-of-zero-is-no-limit",
        Retry(WAITING, "no namespace"),
        2,
        0,
        Redeliver(WAITING, "no namespace (attempt 2; next in 2s)", 2.0),
    ),
]


@pytest.mark.parametrize(
    ("case", "retry", "attempt", "max_deliver", "then"), SCHEDULES, ids=[c[0] for c in SCHEDULES]
)
def test_schedule(
    case: str, retry: Retry, attempt: int, max_deliver: int, then: Redeliver | Report
) -> None:
    assert schedule(retry, attempt, max_deliver=max_deliver, max_backoff=60.0) == then
