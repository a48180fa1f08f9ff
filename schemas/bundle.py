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
