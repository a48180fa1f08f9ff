"""What becomes of an intent whose handling raised: report it, try it again later, or leave it
(pure: no I/O; the one place errors are classified and retries are timed).

Errors are classified and reported, never swallowed (DESIGN §6). What an error means depends on
where it was raised (``Step``): a 404 while resolving a kind means its CRD is not served yet
(Waiting), on the apply it means a missing namespace (Waiting) or a plain failure, on a prune it
means there is nothing left to delete. Transient trouble — 429, 5xx (an admission webhook that
is down answers 500), timeouts, a CRD or Namespace that is not there yet, a 403 (a right that
may be granted later: Forbidden) — is retried for as long as it lasts, with capped exponential
backoff, never silently given up: a webhook down for ten minutes must end with the object
applied once it is back, without anybody publishing again. The server's ``Retry-After`` is
honoured (up to ``RETRY_AFTER_CAP``) when it asks for longer than the backoff. Every message is
scrubbed of the intent's Secret values here, once.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Final

from schemas.messages import ApplyIntent, DeleteIntent, ObjectPhase
from services.common.bus import BusError
from services.core.scrub import scrub_for
from services.kube import Conflict, Forbidden, Invalid, KubeError, NotFound

FIRST_DELAY: Final = 1.0
RETRY_AFTER_CAP: Final = 600.0
_LEAVE_UNACKED: Final = (TimeoutError, BusError, ConnectionError)
"""Errors of the bus, not of the object (nats' TimeoutError is a TimeoutError too): the intent
is left unacked and redelivered, unlike ``bus.BUS_AWAY``, which callers retry in place."""


class Wait(Exception):
    """A prerequisite is missing; redeliver later (or fail once the budget is spent)."""


class Step(enum.Enum):
    """Where an error was raised: the same error means different things at different steps."""

    INTENT = "intent"
    """Anywhere in the handling of an intent (also a re-apply after a replacement)."""
    RESOLVE = "resolve"
    """Looking up the resource that serves an apply's kind."""
    APPLY = "apply"
    """The server-side apply."""
    PRUNE = "prune"
    """Reading and deleting the object of a delete intent."""


@dataclasses.dataclass(frozen=True)
class Report:
    """Final: publish the phase and message, then ack."""

    phase: ObjectPhase
    message: str
    internal: bool = False
    """An unexpected exception (a bug, not the cluster's answer): log its traceback."""


@dataclasses.dataclass(frozen=True)
class Retry:
    """Deliver the intent again later, saying so (Waiting / Retrying), until the delivery limit."""

    phase: ObjectPhase
    message: str
    retry_after: float | None = None
    """Seconds the server asked us to wait (``Retry-After``), if it did."""


@dataclasses.dataclass(frozen=True)
class Replace:
    """An immutable field changed and the bundle allows replace: delete and re-create."""


@dataclasses.dataclass(frozen=True)
class Gone:
    """The object to prune is not there (or its kind is not served): nothing to delete."""


@dataclasses.dataclass(frozen=True)
class Leave:
    """The bus is away: leave the intent unacked; it is redelivered once the bus is back."""


Verdict = Report | Retry | Replace | Gone | Leave


@dataclasses.dataclass(frozen=True)
class Redeliver:
    """A scheduled retry: what to say meanwhile and when the intent is delivered again."""

    phase: ObjectPhase
    message: str
    delay: float


class Decided(Exception):
    """A verb's error, classified at its step; the intent's handler acts on ``verdict``."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict)
        self.verdict = verdict


def classify(exc: Exception, step: Step, intent: ApplyIntent | DeleteIntent) -> Verdict:
    """What to do about ``exc``, raised at ``step`` while carrying out ``intent``."""
    manifest: dict[str, Any] = intent.manifest if isinstance(intent, ApplyIntent) else {}
    if isinstance(exc, Forbidden):
        # RBAC (of driftbus, or of the tenant's ServiceAccount it impersonates) or an admission
        # policy said no: the right may be granted a minute later, so this waits, never Ready
        who = f" (as {intent.impersonate.user})" if intent.impersonate else ""
        return Retry(ObjectPhase.FORBIDDEN, scrub_for(manifest, str(exc)) + who)
    if isinstance(exc, KubeError):
        if (verdict := _at_step(exc, step, intent, manifest)) is not None:
            return verdict
        if exc.retryable:
            return Retry(ObjectPhase.RETRYING, scrub_for(manifest, str(exc)), exc.retry_after)
        return Report(ObjectPhase.FAILED, scrub_for(manifest, str(exc)))
    if isinstance(exc, Decided):
        return exc.verdict
    if isinstance(exc, Wait):
        return Retry(ObjectPhase.WAITING, scrub_for(manifest, str(exc)))
    if isinstance(exc, _LEAVE_UNACKED):
        return Leave()
    return Report(
        ObjectPhase.FAILED,
        scrub_for(manifest, f"internal error: {type(exc).__name__}"),
        internal=True,
    )


def _at_step(
    exc: KubeError, step: Step, intent: ApplyIntent | DeleteIntent, manifest: dict[str, Any]
) -> Verdict | None:
    """The step's own reading of ``exc``; None where it means what it means anywhere."""
    if step is Step.PRUNE:
        if isinstance(exc, NotFound):
            return Gone()
        if isinstance(exc, Conflict):
            # the uid precondition failed: a namesake replaced it since the read; look again
            return Retry(ObjectPhase.RETRYING, scrub_for(manifest, str(exc)))
        return None
    if not isinstance(intent, ApplyIntent):
        return None
    m = intent.manifest
    if step is Step.RESOLVE and isinstance(exc, NotFound):
        return Retry(
            ObjectPhase.WAITING,
            scrub_for(
                manifest,
                f"kind {m.get('kind')} ({m.get('apiVersion')}) is not served by the "
                "cluster (is its CustomResourceDefinition installed and Established?)",
            ),
        )
    if step is not Step.APPLY:
        return None
    if isinstance(exc, NotFound) and exc.details.get("kind") == "namespaces":
        namespace = m["metadata"].get("namespace")
        return Retry(
            ObjectPhase.WAITING, scrub_for(manifest, f"namespace {namespace} does not exist")
        )
    if isinstance(exc, Conflict):
        return Report(
            ObjectPhase.CONFLICT,
            scrub_for(manifest, exc.message)
            + ("" if intent.force else " (publish with force to take these fields over)"),
        )
    if isinstance(exc, Invalid) and "immutable" in exc.message:
        if intent.allow_replace:
            return Replace()
        return Report(
            ObjectPhase.FAILED,
            scrub_for(manifest, str(exc))
            + " (publish with allow-replace to delete and recreate it)",
        )
    return None


def schedule(
    retry: Retry, attempt: int, *, max_deliver: int, max_backoff: float
) -> Redeliver | Report:
    """When delivery ``attempt`` (1, 2, …) ended in ``retry``: the next delivery and what to say
    until then, or Failed naming the cause once a configured delivery limit is reached."""
    if 0 < max_deliver <= attempt:
        return Report(ObjectPhase.FAILED, f"gave up after {attempt} deliveries: {retry.message}")
    delay = retry_delay(attempt, cap=max_backoff, retry_after=retry.retry_after)
    return Redeliver(
        retry.phase, f"{retry.message} (attempt {attempt}; next in {delay:.0f}s)", delay
    )


def retry_delay(attempt: int, *, cap: float, retry_after: float | None = None) -> float:
    """Seconds before delivery ``attempt + 1`` of an intent whose ``attempt``-th failed:
    1, 2, 4, … up to ``cap``; at least ``retry_after`` (itself at most ``RETRY_AFTER_CAP``)."""
    delay = min(cap, FIRST_DELAY * 2.0 ** max(0, min(attempt - 1, 30)))
    if retry_after is not None and retry_after > delay:
        delay = min(retry_after, max(cap, RETRY_AFTER_CAP))
    return delay
