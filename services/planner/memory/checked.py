"""Fleet revisions checked once per replica, not once per cluster (pure).

A fleet rollout places one stored revision (``ObjectStoreRef``) on every cluster of the fleet;
``shell.manifests`` reads its bytes once, and this keeps what checking them gave
(``rule.revision.checking``: each object keyed, normalised, owned, hashed, its stage), so the
next cluster taking the same revision copies the result instead of decoding and checking every
object again: at 1,000 clusters that was 1,000 checks of the same 100 objects.

The check is the same for two clusters when everything it reads is the same. It reads:

- the manifests: the same reference (bucket, name, SHA-256, size) is the same bytes;
- of the bundle: its name (the owner label), revision (hooks are stamped with it), options
  after the tenant's defaults (default namespace, ignore rules, allow-empty), the kinds its
  message names and whether it is a deletion — all in ``RevisionKey``;
- of the cluster: its name, only in each object's slot (given back per cluster) and in the
  length of the object's subjects (checked to fit: the name's token length is in the key);
- of the scopes: whether each (group, kind) the manifests hold is namespaced, as the cluster
  knows it or the revision's own CRDs say (``Shape``: the kinds and the CRDs, read once; their
  answers for a cluster are its ``fingerprint``, kept beside the result).

So a cluster whose discovery knows a kind differently gets a check of its own. A revision
refused for one cluster (a bad object, a kind whose scope is unknown) is not kept: the next
cluster checks it and is refused, or not, on its own. Inline manifests (a substituted
placement's, a bundle published to one cluster) are checked by each cluster as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Final

from schemas.codec import encode
from schemas.messages import Bundle
from schemas.subjects import ObjectKey, encode_token
from services.core import hooks
from services.core.scope import Scopes, group_kind, revision_crd
from services.planner.memory.manifests import Kept
from services.planner.rule.entry import Slot
from services.planner.rule.revision import Plan

OBJECT_BYTES: Final = 200
"""What one checked object costs beside its manifest's bytes: its key, SHA, the tuple and list
slots, its stage."""

RevisionKey = tuple[Hashable, ...]
Scoped = tuple[bool | None, ...]


def revision_key(bundle: Bundle) -> RevisionKey | None:
    """What the check reads of ``bundle`` and its cluster's name (module doc), or None when its
    manifests are inline: those are checked by each cluster."""
    if bundle.manifests_ref is None or bundle.manifests:
        return None
    return (
        bundle.manifests_ref,
        bundle.bundle,
        bundle.revision,
        encode(bundle.options),
        tuple(bundle.kinds),
        bundle.delete,
        len(encode_token(bundle.cluster)),
    )


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a revision asks of the scopes: the (group, kind) of each manifest (what
    ``scope.normalise`` looks up) and the scopes its own CRDs define."""

    kinds: tuple[tuple[str, str], ...]
    crds: tuple[tuple[str, str, bool], ...]

    @classmethod
    def of(cls, manifests: Iterable[Any]) -> Shape:
        kinds: set[tuple[str, str]] = set()
        crds: list[tuple[str, str, bool]] = []
        for raw in manifests:
            if not isinstance(raw, Mapping):
                continue
            if (gk := group_kind(raw)) is not None:
                kinds.add(gk)
            if (found := revision_crd(raw)) is not None:
                crds.append(found)
        return cls(tuple(sorted(kinds)), tuple(crds))

    def fingerprint(self, scopes: Scopes) -> Scoped:
        """``scopes``' answer for each kind (``scopes`` as the revision is checked with:
        ``Scopes.with_crds(self.crds)``)."""
        return tuple(scopes.namespaced(*gk) for gk in self.kinds)


def cost_of(objects: Iterable[tuple[Any, bytes, bytes]]) -> int:
    """The bytes a checked revision's objects (``(slot or key, encoded, sha)``) cost kept."""
    return sum(len(encoded) + OBJECT_BYTES for _, encoded, _ in objects)


@dataclasses.dataclass(frozen=True)
class Checked:
    """A revision's checked objects, without the cluster, and its plan."""

    objects: tuple[tuple[ObjectKey, bytes, bytes], ...]
    stages: Mapping[ObjectKey, hooks.Stage]
    hooks: Mapping[ObjectKey, hooks.Hook]
    skipped: int

    @classmethod
    def of(cls, desired: list[tuple[Slot, bytes, bytes]], plan: Plan) -> Checked:
        return cls(
            tuple((slot[1], encoded, sha) for slot, encoded, sha in desired),
            dict(plan.stages),
            dict(plan.hooks),
            plan.skipped,
        )

    def for_cluster(self, cluster: str) -> tuple[list[tuple[Slot, bytes, bytes]], Plan]:
        """What ``checking`` gives ``cluster``: the same objects in its slots, a plan of its
        own (the view of each cluster keeps its own)."""
        desired = [((cluster, key), encoded, sha) for key, encoded, sha in self.objects]
        return desired, Plan(dict(self.stages), dict(self.hooks), self.skipped)

    def cost(self) -> int:
        return cost_of(self.objects)


@dataclasses.dataclass
class Counts:
    hits: int = 0
    """Checks answered from what another cluster's check left."""
    kept: int = 0
    """Checks made and kept (a revision checked with other scopes, or never before)."""


class CheckedRevisions:
    """Checked revisions by ``revision_key`` and scopes' fingerprint, within ``budget`` bytes
    (``Kept``: the least recently used dropped first; 0 keeps nothing)."""

    def __init__(self, budget: int) -> None:
        self._kept: Kept[tuple[RevisionKey, Scoped], Checked] = Kept(budget)
        self._shapes: Kept[RevisionKey, Shape] = Kept(budget // 16)
        self.counts = Counts()

    def get(self, key: RevisionKey, cluster_scopes: Scopes, cluster: str) -> (
        tuple[list[tuple[Slot, bytes, bytes]], Plan, Scopes] | None
    ):  # fmt: skip
        """What checking revision ``key`` gives ``cluster``, whose discovery knows
        ``cluster_scopes``, if kept: its objects, its plan and the scopes it was checked with
        (the cluster's, and the revision's CRDs for kinds it has not named) — without reading
        the manifests."""
        shape = self._shapes.get(key)
        if shape is not None:
            scopes = cluster_scopes.with_crds(shape.crds)
            found = self._kept.get((key, shape.fingerprint(scopes)))
            if found is not None:
                self.counts.hits += 1
                return (*found.for_cluster(cluster), scopes)
        return None

    def keep(
        self,
        key: RevisionKey,
        manifests: Iterable[Any],
        scopes: Scopes,
        desired: list[tuple[Slot, bytes, bytes]],
        plan: Plan,
    ) -> None:
        """Keep what checking revision ``key`` (``manifests``) with ``scopes`` gave, unless it
        is too big to keep: then nothing of it is computed (a cluster's own revision of 100,000
        objects spent 0.4 s of a planner's restart on a shape and a copy it could not keep)."""
        if not self._kept.fits(cost_of(desired)):
            return
        shape = self._shapes.get(key)
        if shape is None:
            shape = Shape.of(manifests)
            self._shapes.keep(key, shape, 64 * (len(shape.kinds) + len(shape.crds) + 1))
        checked = Checked.of(desired, plan)
        self.counts.kept += 1
        self._kept.keep((key, shape.fingerprint(scopes)), checked, checked.cost())

    def __len__(self) -> int:
        return len(self._kept)
