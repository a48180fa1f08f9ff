"""The bundle message (user → ``driftbus.bundle.<cluster>.<bundle>``): a revision of manifests,
inline or in the Object Store, with the options it is applied with."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from schemas.base import Message, Name, RawObject, Sha, tag

Propagation = Literal["Background", "Foreground", "Orphan"]
DriftMode = Literal["correct", "warn"]


BundleRef = Annotated[
    str,
    Meta(
        pattern=r"^(/[^/\s]+|[^/\s]+(/[^/\s]+)?)$",
        max_length=317,
        description="a bundle of the same cluster: name, tenant/name, or /name (the platform's)",
    ),
]

JsonPointer = Annotated[
    str,
    Meta(
        pattern=r"^(/([^~/]|~[01])*)+$",
        max_length=1024,
        description="RFC 6901 JSON pointer into an object, e.g. /spec/replicas",
    ),
]


class IgnoreRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Fields of matching objects driftbus neither applies nor compares (what another controller
    manages, e.g. an HPA's ``/spec/replicas``)."""

    kind: Annotated[str, Meta(min_length=1, max_length=253)]
    pointers: Annotated[list[JsonPointer], Meta(min_length=1)]
    group: Annotated[str, Meta(max_length=253)] = ""
    """API group ("" for the core group: ConfigMap, Service, …)."""
    namespace: Annotated[str, Meta(max_length=63)] = "*"
    """Only objects of this namespace ("*": any; "": cluster-scoped objects only)."""
    name: Annotated[str, Meta(max_length=253)] = "*"
    """Only the object of this name ("*": any)."""


class BundleOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    prune: bool = True
    """Delete objects that left the bundle (only if they still carry its ownership label)."""
    force: bool = False
    """Server-side apply with force=true: take ownership of fields other managers hold."""
    allow_replace: bool = False
    """Delete and recreate an object when an immutable field changed."""
    allow_empty: bool = False
    """Accept a revision with no objects (which prunes everything the bundle had). Without it an
    empty revision is refused: it is far more often a wrong path than a wish."""
    take_over: bool = False
    """Take objects that another bundle declares (they then belong to this one). Without it such
    an object is refused for this bundle, naming the bundle that has it."""
    propagation: Propagation = "Background"
    """propagationPolicy of prune deletes (Background: dependents are collected afterwards)."""
    namespace: Annotated[
        str, Meta(max_length=63, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$")
    ] = ""
    """Default namespace (``kubectl apply -n``): set on every object of a namespaced kind that
    names none. Objects that name a namespace keep it; cluster-scoped ones never get one."""
    drift: DriftMode = "correct"
    """What a change made by someone else to a field driftbus owns (or a deletion) gets:
    ``correct`` applies the manifest again; ``warn`` writes nothing and reports the bundle
    ``OutOfSync``, naming the objects (``driftbus plan`` shows the fields)."""
    ignore: list[IgnoreRule] = []
    """Fields other controllers manage: removed from matching manifests before they are hashed
    and applied, named in each object's ``driftbus.dev/ignore`` annotation so that serverSHA and
    applySHA leave them out too (docs/drift.md)."""
    depends_on: Annotated[list[BundleRef], Meta(max_length=64)] = []
    """Bundles of the same cluster that must be Ready before this one writes anything (applies
    and prunes wait; the status says for which). ``name`` is a bundle of the same tenant,
    ``tenant/name`` another tenant's (a tenant may name only its own and the platform's), and
    ``/name`` a platform bundle. A revision that closes a cycle is refused (docs/lifecycle.md)."""
    override_window: bool = False
    """Write this revision (and correct its drift) even inside a deny sync window, or outside
    every allow window (``driftbus publish --override-window``); each write it lets through is
    recorded in the decision log, naming the window overridden (docs/windows.md)."""
    allow_prune: bool = False
    """Let this revision's deletions through even past the prune budget (``driftbus publish
    --allow-prune``, or ``driftbus approve``, which republishes the held revision with it): more
    than half of the bundle's objects on a cluster, or a Namespace or CRD (docs/lifecycle.md).
    Only this revision's: the next one is held again if it deletes as much."""


class ObjectStoreRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Manifests too large for one message live in the Object Store; this points at them."""

    bucket: Name
    name: Annotated[str, Meta(min_length=1)]
    sha: Sha
    """SHA-256 of the stored bytes (a JSON array of objects); checked on read."""
    size: Annotated[int, Meta(ge=0)]
    count: Annotated[int, Meta(ge=0)]


class Bundle(Message, frozen=True, tag=tag("bundle")):
    cluster: Name
    bundle: Name
    revision: Annotated[str, Meta(min_length=1, max_length=256)]
    options: BundleOptions = BundleOptions()
    manifests: list[RawObject] = []
    manifests_ref: ObjectStoreRef | None = None
    """Set instead of ``manifests`` when the bundle is over the payload limit."""
    published_at: dt.datetime | None = None
    source: str = ""
    """Where the manifests came from (path, git URL@commit), for humans."""
    kinds: list[str] = []
    """Every ``apiVersion/Kind`` the manifests contain, sorted, once each (``apps/v1/Deployment``,
    ``v1/ConfigMap``): what the watcher must watch, without reading the manifests. The planner
    refuses a revision whose list differs from its manifests; empty means not stated (an older
    publisher), and the watcher then reads the manifests."""
    delete: bool = False
    """Delete the bundle: its objects are pruned (with every prune safeguard: the ownership
    label, ``driftbus.dev/prune: disabled``, objects in use; none with ``options.prune`` off),
    then the bundle is forgotten (its last status says ``Deleted``). Carries no manifests."""
    rollback_of: Annotated[str, Meta(max_length=256)] = ""
    """Set on a revision republished by ``driftbus rollback``: the revision that was in force."""
    fleet: bool = False
    """Placed by a fleet bundle's rollout (``driftbus publish --selector``, docs/fleet.md): the
    rollout driver decides which revision this cluster gets."""
    fencing_token: Annotated[int, Meta(ge=0)] = 0
    """Of a fleet placement: the rollout driver's lease token (the KV revision that made the
    lease its own). The planner refuses a placement whose token is lower than one it has taken
    for the bundle: it comes from a driver deposed while it was stalled. 0: not the driver's
    (a user's publish, a ``driftbus rollback``), never refused for it."""


class BundleControl(Message, frozen=True, tag=tag("bundle-control")):
    """A bundle's reconciliation switched off or on (user → ``driftbus.control.<cluster>.<tenant>.
    <name>``; the stream keeps the last per bundle, so it is state, not an event).

    Suspended: nothing of the bundle is written (no apply, no drift correction, no prune), while
    drift and new revisions are still taken in and reported (the bundle is ``OutOfSync``).
    Resumed: everything that differs is written at once."""

    cluster: Name
    bundle: Name
    suspended: bool
    reason: Annotated[str, Meta(max_length=1024)] = ""
    """Why, for the people reading the status (an incident, a freeze)."""
    at: dt.datetime | None = None


class RollbackRequest(Message, frozen=True, tag=tag("rollback-request")):
    """Put an earlier revision of a bundle back in force (user → ``driftbus.rollback.<cluster>.
    <tenant>.<name>``, a request): the cluster's planner republishes it from the bundle's history
    on the bus (the last few revisions) with ``Bundle.rollback_of`` set, and answers with a
    ``RollbackAnswer``. Only the objects that differ from what is in force are written."""

    cluster: Name
    bundle: Name
    to: Annotated[str, Meta(max_length=256)] = ""
    """The revision to go back to; "" is the one before the revision in force."""


class PruneApproval(Message, frozen=True, tag=tag("prune-approval")):
    """``driftbus approve B --cluster C``: let the deletions of the revision held by the prune
    budget through (user → ``driftbus.rollback.<cluster>.<tenant>.<name>``, the request subject
    the cluster's planner answers, with the same rights as a rollback). The planner republishes
    that revision with ``allow_prune`` and answers with a ``RollbackAnswer``; an approval of a
    revision that is no longer the one held is refused, so it never lets a later one through."""

    cluster: Name
    bundle: Name
    revision: Annotated[str, Meta(min_length=1, max_length=256)]
    """The revision whose held deletions are approved (the one ``driftbus status`` showed)."""


class RollbackAnswer(Message, frozen=True, tag=tag("rollback-answer")):
    """The planner's answer to a ``RollbackRequest``."""

    ok: bool
    message: str
    """What was republished, or why nothing was (the revisions there are to go back to)."""
    revision: str = ""
    """The revision republished (ok)."""
    rollback_of: str = ""
    """The revision that was in force."""
    history: list[str] = []
    """The revisions on the bus, oldest first (what ``to`` may name)."""
