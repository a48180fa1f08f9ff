"""The planner's intents (DESIGN §5): what to apply or delete on a cluster, alone on the object's
subject ``driftbus.intent.<cluster>.<key>`` or several in an ``IntentBatch`` (issue 44).
Importable from ``schemas.messages`` as well, as before."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import msgspec
from msgspec import Meta

from schemas.base import Message as _Message
from schemas.base import Name, RawObject, Sha
from schemas.base import tag as _tag
from schemas.bundle import Propagation
from schemas.subjects import ObjectKey

# --- planner → driftbus.intent.<cluster>.<key> --------------------------------------------------


class Impersonation(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The identity a tenant's writes are made as (``Impersonate-User``/``-Group``): its
    ServiceAccount, so that the API server's RBAC is the final judge (docs/tenancy.md)."""

    user: Annotated[str, Meta(min_length=1, max_length=512)]
    groups: list[str] = []


class ApplyIntent(_Message, frozen=True, tag=_tag("apply-intent")):
    cluster: Name
    key: ObjectKey
    bundle: Name
    revision: str
    manifest_sha: Sha
    """Desired manifestSHA; an applier drops the intent if it is no longer the desired one."""
    manifest: RawObject
    reason: str
    force: bool = False
    allow_replace: bool = False
    issued_at: dt.datetime | None = None
    planner: str = ""
    fencing_token: int = 0
    """Revision of the planner's claim on the cluster; appliers drop intents of deposed planners."""
    impersonate: Impersonation | None = None
    """Set for a tenant's bundle: every request of the apply is made as this identity."""


class DeleteIntent(_Message, frozen=True, tag=_tag("delete-intent")):
    cluster: Name
    key: ObjectKey
    api_version: Annotated[str, Meta(min_length=1)]
    """The version to address the object with (as last seen by the watcher)."""
    bundle: Name
    """The bundle pruning it: the live object must still carry this bundle's label."""
    revision: str
    """The bundle revision that no longer contains the object."""
    reason: str = "pruned"
    propagation: Propagation = "Background"
    issued_at: dt.datetime | None = None
    planner: str = ""
    fencing_token: int = 0
    impersonate: Impersonation | None = None
    """Set for a tenant's bundle: the prune is made as this identity."""


Intent = ApplyIntent | DeleteIntent


class IntentBatch(_Message, frozen=True, tag=_tag("intent-batch")):
    """Apply intents of one cluster sent together (issue 44): what the planner decided within a
    few milliseconds, on ``driftbus.intent.<cluster>.batch.<id>``, in apply order. Each intent
    means exactly what it would alone; an applier acknowledges the batch once every intent in it
    has its fact. Only apply intents of objects with nothing in flight travel so: a delete, and
    an intent that supersedes one in flight, go alone on the object's subject, where the stream
    keeps the newest (``docs/architecture.md``)."""

    cluster: Name
    intents: list[ApplyIntent]
    traces: list[dict[str, str]] = []
    """Per intent, the trace context it was decided in (``traceparent``), or {} (untraced)."""
    planner: str = ""


Queued = ApplyIntent | DeleteIntent | IntentBatch
"""What the INTENTS stream holds: an intent alone on its object's subject, or a batch of them."""
