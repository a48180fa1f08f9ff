"""The cluster registry (DESIGN §13): one ``ClusterRecord`` per cluster in the KV bucket
``driftbus-clusters``, and a live view of it.

A watcher registers its cluster when it starts (``register``: created with its
``--cluster-labels`` if absent; an existing entry keeps its labels, only the Kubernetes version is
brought up to date). Labels change only through ``relabel`` (``driftbus clusters label``, the
admin role) and an entry goes only through ``deregister`` (``driftbus clusters remove``): both
change fleet membership. Heartbeats never touch the registry, so a cluster that goes quiet stays a
member and nothing is pruned for it.

A cluster's labels are unknown when it has no entry, was removed, or its entry cannot be read:
they read as None (``labels_in``, ``labels_of``) and such a cluster is in no ``records``, never
as ``{}``, which ``env!=prod`` would match. Unknown labels add a cluster to no fleet and, short
of an explicit removal, take it out of none.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence

import msgspec

from schemas.fleet import ClusterRecord
from schemas.subjects import SubjectError, cluster_registry_key, decode_token
from services.clusters.selector import parse_selector
from services.common import bus
from services.common.bus import JetStream, Message

log = logging.getLogger("driftbus.fleet")
KV_PREFIX = f"$KV.{bus.CLUSTERS_BUCKET}."
_RETRIES = 10


class RegistryError(RuntimeError):
    """A registry change cannot be made; the message names the cluster and why."""


def members(
    records: Mapping[str, ClusterRecord], selector: str, named: Sequence[str]
) -> dict[str, dict[str, str]]:
    """The registered clusters a fleet bundle names, with their labels (pure): those the
    selector matches and, when ``named`` is given, only those named. ``records`` holds only
    clusters whose labels are known (``RegistryView`` leaves the unreadable out), so one whose
    labels are unknown is no member (the driver keeps what it already has: not a removal)."""
    sel = parse_selector(selector)
    wanted = set(named)
    return {
        name: dict(r.labels)
        for name, r in records.items()
        if (not wanted or name in wanted) and sel.matches(r.labels)
    }


B = bus.CLUSTERS_BUCKET


async def _entry(js: JetStream, key: str) -> bus.KvEntry | None:
    try:
        return await bus.kv_get(js, B, key)
    except bus.BucketMissing:
        raise RegistryError(
            f"the cluster registry ({B}) does not exist yet: the planner creates it"
        ) from None


async def register(
    js: JetStream,
    cluster: str,
    *,
    labels: Mapping[str, str],
    kube_version: str,
    by: str,
) -> ClusterRecord:
    """Register ``cluster`` unless it is (then only its Kubernetes version is updated). The
    planner makes the bucket (a watcher may not)."""
    key = cluster_registry_key(cluster)
    now = dt.datetime.now(dt.UTC)
    for _ in range(_RETRIES):
        entry = await _entry(js, key)
        if entry is None:
            record = ClusterRecord(
                name=cluster,
                labels=dict(labels),
                kube_version=kube_version,
                registered_at=now,
                registered_by=by,
            )
            if await bus.kv_create(js, B, key, msgspec.json.encode(record)) is None:
                continue  # registered meanwhile (a second watcher): read it
            log.info("registered cluster %s", cluster, extra={"labels": dict(labels)})
            return record
        record = _decode(entry.value, cluster)
        if record.kube_version == kube_version:
            return record
        record = msgspec.structs.replace(record, kube_version=kube_version)
        if await bus.kv_update(js, B, key, msgspec.json.encode(record), last=entry.revision):
            return record
    raise RegistryError(f"cluster {cluster}: the registry entry kept changing; not registered")


async def relabel(
    js: JetStream, cluster: str, *, set_: Mapping[str, str], remove: Sequence[str]
) -> ClusterRecord:
    """Set and remove labels of a registered cluster (compare-and-set, retried)."""
    key = cluster_registry_key(cluster)
    for _ in range(_RETRIES):
        entry = await _entry(js, key)
        if entry is None:
            raise RegistryError(f"cluster {cluster} is not registered")
        try:
            record = _decode(entry.value, cluster)
        except RegistryError as exc:  # the admin's labels are what it gets: the way out
            log.warning("%s; rewritten with the labels given", exc)
            record = ClusterRecord(name=cluster)
        labels = {k: v for k, v in record.labels.items() if k not in remove}
        labels.update(set_)
        record = msgspec.structs.replace(record, labels=labels, labelled_at=dt.datetime.now(dt.UTC))
        if await bus.kv_update(js, B, key, msgspec.json.encode(record), last=entry.revision):
            return record
    raise RegistryError(f"cluster {cluster}: the registry entry kept changing; not relabelled")


async def deregister(js: JetStream, cluster: str) -> None:
    """Remove ``cluster`` from the registry: it leaves every fleet."""
    key = cluster_registry_key(cluster)
    if await _entry(js, key) is None:
        raise RegistryError(f"cluster {cluster} is not registered")
    await bus.kv_delete(js, B, key)


async def records(js: JetStream) -> dict[str, ClusterRecord]:
    """Every registered cluster (a snapshot)."""
    view = RegistryView(js)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(30):
            async for msg in bus.Follower(js, bus.CLUSTERS_STREAM, KV_PREFIX + ">").snapshot():
                view.observe(msg)
    return dict(view.records)


def entry_subject(cluster: str) -> str:
    """The KV subject of ``cluster``'s registry entry (what its planner follows)."""
    return KV_PREFIX + cluster_registry_key(cluster)


def labels_in(msg: Message) -> dict[str, str] | None:
    """The labels a registry entry message carries; None when they are unknown (removed, or
    unreadable): never ``{}``, which ``env!=prod`` would match — unknown labels match no
    selector that depends on them (``selector.selects``)."""
    if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
        return None
    try:
        return dict(_decode(msg.data, msg.subject).labels)
    except RegistryError as exc:
        log.error("%s", exc)
        return None


async def labels_of(js: JetStream, cluster: str) -> dict[str, str] | None:
    """The registry labels of ``cluster``; None when unknown (not registered, removed, no
    registry yet, or an entry that cannot be read)."""
    msg = await bus.last_message(js, bus.CLUSTERS_STREAM, entry_subject(cluster))
    if msg is None or not msg.data:
        return None
    try:
        return dict(_decode(msg.data, cluster).labels)
    except RegistryError as exc:
        log.error("%s", exc)
        return None


def _decode(data: bytes | None, cluster: str) -> ClusterRecord:
    try:
        return msgspec.json.decode(data or b"", type=ClusterRecord)
    except msgspec.DecodeError as exc:  # ValidationError is one
        raise RegistryError(f"cluster {cluster}: its registry entry is unreadable: {exc}") from None


class RegistryView:
    """The registry as last seen, followed live (``follow``); ``changed`` is called on every
    change so a driver can act at once rather than at its next tick."""

    def __init__(self, js: JetStream, changed: Callable[[], None] = lambda: None) -> None:
        self.js = js
        self.records: dict[str, ClusterRecord] = {}
        self.removed: set[str] = set()
        """Clusters whose entry was deleted (``clusters remove``): the one way out of a fleet
        besides labels. A cluster absent with no deletion recorded has not left."""
        self.unreadable: set[str] = set()
        """Clusters whose last entry cannot be read: their labels are unknown, so they are in
        no ``records`` (no selector adds them to a fleet) and keep what they have (neither a
        removal nor a relabelling: nothing is pruned for them)."""
        self.caught_up = asyncio.Event()
        self._changed = changed

    def observe(self, msg: Message) -> None:
        token = msg.subject.removeprefix(KV_PREFIX)
        try:
            name = decode_token(token)
        except SubjectError:
            log.warning("ignoring a registry entry with a malformed key %s", token)
            return
        if (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            self.records.pop(name, None)
            self.unreadable.discard(name)
            self.removed.add(name)
        else:
            self.removed.discard(name)
            try:
                self.records[name] = _decode(msg.data, name)
                self.unreadable.discard(name)
            except RegistryError as exc:
                # bad input never loses data: an unreadable entry is not a removal (which
                # would prune the cluster's fleet bundles), nor are its last labels still
                # true (they would add it to fleets it was never meant for): unknown
                self.records.pop(name, None)
                self.unreadable.add(name)
                log.error(
                    "%s; its labels are unknown: it joins no fleet and keeps what it has until "
                    "a readable entry is written (driftbus clusters label)",
                    exc,
                )
        self._changed()

    async def follow(self) -> None:
        """Follow the registry forever (restarted after an error: a view that stopped silently
        would freeze membership)."""
        while True:
            follower = bus.Follower(self.js, bus.CLUSTERS_STREAM, KV_PREFIX + ">")
            marker = asyncio.create_task(self._mark(follower))
            try:
                async for msg in follower.messages():
                    self.observe(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("following the cluster registry failed; following it again")
            finally:
                marker.cancel()
            await asyncio.sleep(1.0)

    async def _mark(self, follower: bus.Follower) -> None:
        await follower.caught_up.wait()
        self.caught_up.set()
        self._changed()
