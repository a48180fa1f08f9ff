"""Stored manifests read once per replica: a fleet revision named by many clusters' placements is
read from the Object Store and parsed once, and shared.

A fleet rollout places one stored revision on every cluster of the fleet with the same
reference (``ObjectStoreRef``: bucket, object name, SHA-256, size, count); each cluster's
intake used to read and parse it again, so 1,000 clusters in a replica meant 1,000 reads of
the same bytes. ``ManifestCache`` is one per replica (the coordinator gives every cluster's
``BundleIntake`` the same one). An intake given none makes its own that keeps nothing
(``ManifestCache(0)``: kept per cluster, a revision would be held once per cluster, more memory
than before, not less) and reads as before.

What is shared, and why it may be:

- the stored bytes, checked against their SHA-256 and size (``bus.read_object``), split into
  the array's elements (``StoredManifests``): the same for every bundle naming the reference,
  byte for byte. Keyed by the whole reference, not the SHA alone, so a reference to an object
  that does not exist (or with a wrong size) is still refused as without the cache. Each
  bundle gets its own view (``StoredManifests.named``): a bad element names its own bundle.
  Each element is decoded afresh on every read of it, so no cluster sees another's dicts.

What is not, because it may differ by cluster, and is done by each cluster as before:

- the inline manifests of a message (a substituted placement's are the cluster's own; they
  cost no read);
- the tenant limits and the dependency check, which read the cluster's state.

The check itself (``rule.revision.checking``: keys and normal forms, from the cluster's scopes
and the bundle's options after the tenant's defaults) is kept beside the bytes
(``checked``: ``memory.checked.CheckedRevisions``) keyed by everything it reads, so a cluster
whose scopes or options differ checks the revision itself.

Concurrent asks for one reference share one read (its future); a read that fails is kept by
nobody: every asker waiting on it is told (as its own bundle's error), and the next ask reads
again, whether the failure was the object's (``StoredError``) or NATS's (a timeout, a lost
connection).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from schemas.messages import Bundle, ObjectStoreRef
from services.common import bus
from services.core.scope import Scopes
from services.planner.memory.checked import CheckedRevisions, revision_key
from services.planner.memory.manifests import Kept
from services.planner.rule.entry import Slot
from services.planner.rule.revision import Plan, checking
from services.planner.shell.yielding import stepped
from services.revisions.publish import StoredManifests, load_manifests, read_stored

KEPT_BYTES: Final = 64 * 1024 * 1024
"""Most bytes of stored manifests a replica keeps. A fleet revision of 100 objects is ~50 KB,
so this holds the target and previous revisions of hundreds of fleet bundles at once. A
revision costing more than a quarter of it (about 30,000 objects of the bench's mix) is not
kept, and is read per cluster as before (concurrent asks still share a read): one cluster's
revision of 100,000 objects kept its 56 MB for clusters that never came, in a planner whose
target is 150 MiB in all (issue 44). Not a setting: a quarter to a third
of the 200 MiB a replica at 1,000 clusters may hold (issue 43), and spent only on revisions
that were read anyway; a kept revision is also memory no cluster holds while checking it."""

CHECKED_BYTES: Final = 32 * 1024 * 1024
"""Most bytes of checked fleet revisions a replica keeps (``memory.checked``): the manifests
as checked (their bytes are the ones every cluster taking the revision then holds, shared, not
a copy each), and ~200 bytes an object beside them."""

ELEMENT_BYTES: Final = 64
"""What one element of a kept revision costs beside its bytes: a ``msgspec.Raw`` (56 bytes,
a view of the stored bytes) and its place in the list (8)."""

Read = Callable[[bus.JetStream, ObjectStoreRef], Awaitable[StoredManifests]]


def cost(ref: ObjectStoreRef, found: StoredManifests) -> int:
    """The bytes kept for ``found``, read through ``ref``: its size is checked on read, its
    count is not (a publisher's word), so the elements are counted as read: an array of a
    million ``0`` is 2 MB of bytes and 64 MB of elements."""
    return ref.size + ELEMENT_BYTES * len(found)


@dataclasses.dataclass
class Counts:
    reads: int = 0
    """Reads of the Object Store started."""
    hits: int = 0
    """Asks answered without a read of their own: kept, or sharing a read under way."""
    shared: int = 0
    """Of the hits, those that waited on a read under way."""
    failed: int = 0
    """Reads that failed (nothing kept: the next ask reads again)."""


class ManifestCache:
    """Stored manifests by reference, read once and kept within ``budget`` bytes (``Kept``:
    the least recently used dropped first). One per replica, shared by its clusters' intakes
    in one event loop."""

    def __init__(self, budget: int = KEPT_BYTES, *, read: Read | None = None) -> None:
        self._kept: Kept[ObjectStoreRef, StoredManifests] = Kept(budget, largest=budget // 4)
        self._reading: dict[ObjectStoreRef, asyncio.Future[StoredManifests]] = {}
        self._read: Read = read if read is not None else _read_stored
        self.counts = Counts()
        self.checked = CheckedRevisions(CHECKED_BYTES if budget else 0)
        """What checking a fleet revision gave, for the next cluster taking it (kept only by a
        cache that keeps revisions: an intake's own keeps nothing)."""

    async def load(self, js: bus.JetStream, bundle: Bundle) -> Sequence[Any]:
        """The manifests of ``bundle``, as ``load_manifests`` reads them (the same errors,
        naming this bundle), its stored ones read through this cache."""

        async def stored(ref: ObjectStoreRef) -> StoredManifests:
            return await self.stored(js, ref)

        return await load_manifests(js, bundle, stored=stored)

    async def checked_objects(
        self, js: bus.JetStream, bundle: Bundle, cluster_scopes: Scopes
    ) -> tuple[list[tuple[Slot, bytes, bytes]], Plan, Scopes]:
        """``bundle``'s objects checked for its cluster (whose discovery knows
        ``cluster_scopes``), its plan and the scopes they were keyed with: as another cluster's
        check of the same fleet revision left them (``checked``), or checked now and kept."""
        key = revision_key(bundle)
        if key is not None and (kept := self.checked.get(key, cluster_scopes, bundle.cluster)):
            return kept
        manifests = await self.load(js, bundle)
        # clusters taking a fleet revision at once wait on one read: the first to go on checks
        # it, the others find its check kept
        if key is not None and (kept := self.checked.get(key, cluster_scopes, bundle.cluster)):
            return kept
        # keyed with what the cluster says; the revision's own CRDs only fill in kinds it has
        # not named yet, for this revision alone: a refused revision (or a tenant's CRD
        # claiming a kind others use) changes nothing of what the planner believes
        scopes = await stepped(cluster_scopes.reading_revision(manifests))
        plan = Plan()
        desired = await stepped(checking(bundle, manifests, scopes, plan))
        if key is not None:
            self.checked.keep(key, manifests, scopes, desired, plan)
        return desired, plan, scopes

    async def stored(self, js: bus.JetStream, ref: ObjectStoreRef) -> StoredManifests:
        """The manifests ``ref`` names: kept, or being read for another ask, or read now;
        ``StoredError`` (or NATS's error) when the read fails."""
        kept = self._kept.get(ref)
        if kept is not None:
            self.counts.hits += 1
            return kept
        reading = self._reading.get(ref)
        if reading is None:
            self.counts.reads += 1
            reading = asyncio.ensure_future(self._reading_of(js, ref))
            reading.add_done_callback(_observed)
            self._reading[ref] = reading
        else:
            self.counts.hits += 1
            self.counts.shared += 1
        # shielded: an asker cancelled (its cluster released) does not cancel the others' read
        return await asyncio.shield(reading)

    async def _reading_of(self, js: bus.JetStream, ref: ObjectStoreRef) -> StoredManifests:
        try:
            found = await self._read(js, ref)
        except BaseException:
            self.counts.failed += 1
            raise
        finally:
            del self._reading[ref]
        self._kept.keep(ref, found, cost(ref, found))
        return found

    @property
    def budget(self) -> int:
        """Most bytes kept (0: none, only reads under way are shared)."""
        return self._kept.budget

    @property
    def held(self) -> int:
        """Bytes kept now."""
        return self._kept.held

    def __len__(self) -> int:
        """Revisions kept now."""
        return len(self._kept)


async def _read_stored(js: bus.JetStream, ref: ObjectStoreRef) -> StoredManifests:
    return await read_stored(js, ref)


def _observed(reading: asyncio.Future[StoredManifests]) -> None:
    """A read whose askers were all cancelled fails unheard: its error is not worth a log of
    "never retrieved" (the next ask reads again and is told)."""
    if not reading.cancelled():
        reading.exception()
