"""Health of a live object, computed from its status in the style of kstatus (DESIGN §5).

Ready / InProgress / Failed / Unknown, with a short human reason. Pure: a raw object in, a
``(Health, message)`` out. The watcher publishes it with the SHA, so a status change that does not
change the SHA (a rollout finishing) still reaches the planner and the user.

Rules, first match wins:

* being deleted → InProgress ("terminating");
* ``status.observedGeneration`` behind ``metadata.generation`` → InProgress (controller has not
  seen the latest spec);
* a kind-specific rule (workloads compare replica counts; Job, Pod, PVC, Namespace, CRD,
  LoadBalancer Service read their own fields);
* otherwise standard conditions: ``Stalled=True`` → Failed, ``Reconciling=True`` → InProgress,
  ``Ready`` → Ready / InProgress by its status;
* objects with no status at all (ConfigMap, Secret, RBAC, ...) are Ready once they exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from schemas.messages import Health
from services.core import hooks

Result = tuple[Health, str]
READY: Result = (Health.READY, "")


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    conds = status.get("conditions")
    if not isinstance(conds, list):
        return {}
    return {
        c["type"]: c for c in conds if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    }


def _is(cond: Mapping[str, Any] | None, value: str) -> bool:
    return cond is not None and cond.get("status") == value


def _why(cond: Mapping[str, Any]) -> str:
    return str(cond.get("message") or cond.get("reason") or "")


def _replicas(want: int, status: Mapping[str, Any], **fields: str) -> Result | None:
    for label, field in fields.items():
        have = _int(status.get(field))
        if have < want:
            return Health.IN_PROGRESS, f"{label}: {have}/{want}"
    return None


def _deployment(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    conds = _conditions(status)
    progressing = conds.get("Progressing")
    if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded":
        return Health.FAILED, _why(progressing) or "progress deadline exceeded"
    want = _int(obj.get("spec", {}).get("replicas"), 1)
    waiting = _replicas(
        want,
        status,
        updated="updatedReplicas",
        ready="readyReplicas",
        available="availableReplicas",
    )
    if waiting:
        return waiting
    if _int(status.get("replicas")) > want:
        return Health.IN_PROGRESS, f"old replicas pending termination: {status['replicas']}/{want}"
    return READY


def _statefulset(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    want = _int(obj.get("spec", {}).get("replicas"), 1)
    waiting = _replicas(want, status, ready="readyReplicas", updated="updatedReplicas")
    if waiting:
        return waiting
    if status.get("updateRevision") and status.get("currentRevision") != status["updateRevision"]:
        return Health.IN_PROGRESS, "rolling update in progress"
    return READY


def _daemonset(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    want = _int(status.get("desiredNumberScheduled"))
    if "desiredNumberScheduled" not in status:
        return Health.IN_PROGRESS, "not yet scheduled"
    waiting = _replicas(
        want,
        status,
        updated="updatedNumberScheduled",
        available="numberAvailable",
        ready="numberReady",
    )
    return waiting or READY


def _replicaset(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    want = _int(obj.get("spec", {}).get("replicas"), 1)
    return _replicas(want, status, ready="readyReplicas", available="availableReplicas") or READY


def _gated(
    status: Mapping[str, Any], failed: tuple[str, str, str], done: str, waiting: str
) -> Result:
    """Health from two conditions: ``failed`` (type, status at which it failed, what to say
    when it gives no message) first, then ``done`` being True, else still in progress."""
    conds = _conditions(status)
    kind, value, otherwise = failed
    if _is(conds.get(kind), value):
        return Health.FAILED, _why(conds[kind]) or otherwise
    if _is(conds.get(done), "True"):
        return READY
    return Health.IN_PROGRESS, waiting


def _job(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    active = f"active: {_int(status.get('active'))}"
    return _gated(status, ("Failed", "True", "job failed"), "Complete", active)


def ended(obj: Mapping[str, Any]) -> Result:
    """The health an object being deleted (or just deleted) was in before its delete began,
    not "terminating": how a finished hook or Job ended."""
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "deletionTimestamp"}}
    return health(obj)


def retiring(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` finished its work and will be removed for it, as it asks: a Job that
    completed and sets ``ttlSecondsAfterFinished`` (the TTL-after-finished controller deletes it
    then), or a hook that ended the way its ``hook-delete-policy`` deletes it for (driftbus
    deletes it then: ``core.hooks``). Its deletion is the end of its life, not drift."""
    if hooks.is_hook(obj):
        h, _ = ended(obj)
        if hooks.deleted_by_policy(obj, ready=h is Health.READY, failed=h is Health.FAILED):
            return True
    api_version = obj.get("apiVersion")
    if obj.get("kind") != "Job" or not (
        isinstance(api_version, str) and api_version.startswith("batch/")
    ):
        return False
    spec, status = obj.get("spec"), obj.get("status")
    ttl = spec.get("ttlSecondsAfterFinished") if isinstance(spec, Mapping) else None
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        return False
    conds = _conditions(status if isinstance(status, Mapping) else {})
    return _is(conds.get("Complete"), "True")


def _pod(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    phase = status.get("phase")
    if phase == "Succeeded":
        return READY
    if phase == "Failed":
        return Health.FAILED, str(status.get("message") or status.get("reason") or "pod failed")
    if phase == "Running" and hooks.is_hook(obj):
        # a hook Pod has done its work when it succeeded, not while it runs (Helm, Argo CD)
        return Health.IN_PROGRESS, "a hook: running until it succeeds"
    if phase == "Running" and _is(_conditions(status).get("Ready"), "True"):
        return READY
    return Health.IN_PROGRESS, f"phase: {phase or 'Pending'}"


def _pvc(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    phase = status.get("phase")
    if phase == "Bound":
        return READY
    if phase == "Lost":
        return Health.FAILED, "claim lost its volume"
    return Health.IN_PROGRESS, f"phase: {phase or 'Pending'}"


def _namespace(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    phase = status.get("phase", "Active")
    return READY if phase == "Active" else (Health.IN_PROGRESS, f"phase: {phase}")


def _crd(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    failed = ("NamesAccepted", "False", "names not accepted")
    return _gated(status, failed, "Established", "not yet established")


def _service(obj: Mapping[str, Any], status: Mapping[str, Any]) -> Result:
    if obj.get("spec", {}).get("type") != "LoadBalancer":
        return READY
    if status.get("loadBalancer", {}).get("ingress"):
        return READY
    return Health.IN_PROGRESS, "waiting for a load balancer address"


_BY_KIND: dict[tuple[str, str], Callable[[Mapping[str, Any], Mapping[str, Any]], Result]] = {
    ("apps", "Deployment"): _deployment,
    ("apps", "StatefulSet"): _statefulset,
    ("apps", "DaemonSet"): _daemonset,
    ("apps", "ReplicaSet"): _replicaset,
    ("batch", "Job"): _job,
    ("", "Pod"): _pod,
    ("", "PersistentVolumeClaim"): _pvc,
    ("", "Namespace"): _namespace,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _crd,
    ("", "Service"): _service,
}

# Kinds that need a controller to write status before they can be called Ready, even when the
# status is still empty (a Deployment that nobody rolled out is not Ready).
_NEEDS_STATUS = frozenset(k for k in _BY_KIND if k not in {("", "Namespace"), ("", "Service")})


def health(obj: Mapping[str, Any]) -> Result:
    """Health and a one-line reason ("" when Ready) for a raw live object."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if meta.get("deletionTimestamp"):
        return Health.IN_PROGRESS, "terminating"
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    generation = _int(meta.get("generation"))
    observed = status.get("observedGeneration")
    if isinstance(observed, int) and observed < generation:
        return Health.IN_PROGRESS, f"generation {generation} not yet observed ({observed})"
    api_version = obj.get("apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    kind = (group, str(obj.get("kind", "")))
    rule = _BY_KIND.get(kind)
    if rule is not None:
        if not status and kind in _NEEDS_STATUS:
            return Health.IN_PROGRESS, "no status reported yet"
        return rule(obj, status)
    conds = _conditions(status)
    if _is(conds.get("Stalled"), "True"):
        return Health.FAILED, _why(conds["Stalled"]) or "stalled"
    if _is(conds.get("Reconciling"), "True"):
        return Health.IN_PROGRESS, _why(conds["Reconciling"]) or "reconciling"
    ready = conds.get("Ready")
    if ready is not None:
        return READY if _is(ready, "True") else (Health.IN_PROGRESS, _why(ready) or "not ready")
    return READY
