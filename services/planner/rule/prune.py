"""Which prunes would destroy what others still want (pure).

Deleting a Namespace deletes everything in it; deleting a CustomResourceDefinition deletes every
custom resource of its kind. So a bundle that drops its Namespace or CRD must not take other
bundles' objects (or objects still desired, its own included) down with it. ``in_use`` names
what is inside; the planner then keeps the object and says why (a ``KEEP in-use`` decision, the
bundle ``OutOfSync``), and prunes it once nothing is left inside. ``strays_from`` says which
objects a bundle's prune concerns at all, and ``removed`` is the event folded into each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from schemas.subjects import ObjectKey
from services.planner.rule.decide import Entry, Removed
from services.planner.rule.revision import BundleView

CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")
NAMESPACE = ("", "Namespace")
MAX_NAMED = 3


def crd_kind(manifest: Mapping[str, Any]) -> str | None:
    """``spec.names.kind`` of a CRD manifest (None when it is not there)."""
    spec = manifest.get("spec")
    names = spec.get("names") if isinstance(spec, Mapping) else None
    kind = names.get("kind") if isinstance(names, Mapping) else None
    return kind if isinstance(kind, str) and kind else None


def _contains(container: ObjectKey, key: ObjectKey, crd_kind: str | None) -> bool:
    if (container.group, container.kind) == NAMESPACE:
        return key.namespace == container.name
    if (container.group, container.kind) == CRD:
        _, _, group = container.name.partition(".")
        # without the CRD's manifest (after a restart) every kind of its group counts: the
        # safe side of not knowing
        return key.group == group and (crd_kind is None or key.kind == crd_kind)
    return False


def in_use(
    key: ObjectKey,
    entries: Iterable[tuple[tuple[str, ObjectKey], Entry]],
    *,
    pruning: str,
    crd_kind: str | None = None,
) -> str:
    """Why pruning ``key`` for bundle ``pruning`` would delete what is still wanted, or "".

    Wanted: desired by any bundle's current revision, live and carrying another bundle's
    label, or live and opting out of prune (``driftbus.dev/prune: disabled``, whoever's it is:
    deleting its Namespace would delete it all the same). Objects of ``pruning`` itself that
    are being pruned too go down with it, as asked.
    """
    if (key.group, key.kind) not in (NAMESPACE, CRD):
        return ""
    held: list[tuple[ObjectKey, str]] = []
    for (_, k), e in entries:
        if k == key or not _contains(key, k, crd_kind):
            continue
        if e.manifest_sha is not None:
            held.append((k, e.bundle))
        elif e.live and (e.owner_bundle not in ("", pruning) or e.keep):
            held.append((k, e.owner_bundle))
    if not held:
        return ""
    held.sort()
    named = ", ".join(f"{k} (bundle {b})" if b else str(k) for k, b in held[:MAX_NAMED])
    more = f" and {len(held) - MAX_NAMED} more" if len(held) > MAX_NAMED else ""
    return f"not pruned: still holds {named}{more}"


def strays_from(entry: Entry, view: BundleView) -> bool:
    """Whether ``entry`` is to be pruned (or kept) for ``view`` now: in the bundle's inventory
    (driftbus applied it for this bundle), live, still carrying its label, declared by no
    bundle's current revision (its own previous one aside), and with no intent on its way.

    The label alone is not enough: anyone can copy it (``kubectl get -o yaml`` of a managed
    object, renamed and created), and a tenant can put another tenant's on an object of its
    own. Such an object is reported (``not_declared``), never deleted."""
    return (
        entry.inflight is None
        and entry.owner_bundle == view.name
        and entry.applied_bundle == view.name
        and entry.manifest_sha is None
        and entry.live
        and entry.key not in view.keys
        and entry.bundle in ("", view.name)
    )


def removed(
    key: ObjectKey,
    view: BundleView,
    entries: Iterable[tuple[tuple[str, ObjectKey], Entry]],
    manifest: bytes | None,
) -> Removed:
    """The event of ``key`` leaving ``view``'s bundle: with why its prune is held back, when the
    bundle prunes at all (``entries`` are then read; ``manifest`` names a CRD's kind)."""
    why = ""
    if view.prune:
        why = in_use(
            key,
            entries,
            pruning=view.name,
            crd_kind=crd_kind(msgspec.json.decode(manifest)) if manifest else None,
        )
    return Removed(view.name, view.revision, view.prune, in_use=why)
