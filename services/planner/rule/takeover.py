"""Which objects a revision takes: one that another bundle's current revision declares stays with
that bundle, unless the publish asks to take it over (pure).

An object belongs to one bundle at a time, or two bundles would fight over it, each re-applying
its own manifest. A revision that declares an object of another bundle is taken in without it
(the bundle status lists it), or, published with take-over, takes it and the other bundle's
view forgets it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from typing import Protocol

from schemas.subjects import split_bundle
from services.core.steps import finished
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView

Bundles = Mapping[tuple[str, str], BundleView]
"""(cluster, bundle) -> the view of the bundle's revision in force."""


class Entries(Protocol):
    """What a take-over reads of the planner's entries (``memory.store.EntryStore``)."""

    def declaring(self, slot: Slot) -> str:
        """The bundle whose revision desires the object ("" when none does)."""
        ...


def declared_by_other(slot: Slot, bundle: str, entries: Entries, bundles: Bundles) -> str | None:
    """The other bundle whose current revision declares this object, if any."""
    other = entries.declaring(slot)
    if other in ("", bundle):
        return None
    view = bundles.get((slot[0], other))
    return other if view is not None and slot[1] in view.keys else None


@dataclasses.dataclass
class Taken:
    objects: list[tuple[Slot, bytes, bytes]]
    """(slot, manifest, manifestSHA) of every object the revision takes, in its order."""
    moved: list[tuple[Slot, str]]
    """Objects taken over, each with the bundle it was taken from."""


def may_take(taker: str, owner: str) -> bool:
    """Whether bundle ``taker`` may take over what bundle ``owner`` declares: a platform bundle
    may take anything, a tenant's bundle only its own tenant's."""
    tenant = split_bundle(taker)[0]
    return not tenant or split_bundle(owner)[0] == tenant


def take(
    view: BundleView,
    desired: list[tuple[Slot, bytes, bytes]],
    entries: Entries,
    bundles: Bundles,
    *,
    take_over: bool,
) -> Taken:
    """Sort a checked revision's objects into taken, taken over and left out: ``view.keys`` gets
    every object taken, ``view.errors`` one line per object left out. The views of the bundles
    objects are taken from are the caller's to change (nothing here changes ``bundles``)."""
    return finished(taking(view, desired, entries, bundles, take_over=take_over))


STEP = 2048
"""Objects sorted between two yields of ``taking``."""


def taking(
    view: BundleView,
    desired: list[tuple[Slot, bytes, bytes]],
    entries: Entries,
    bundles: Bundles,
    *,
    take_over: bool,
) -> Generator[None, None, Taken]:
    """``take`` in steps of ``STEP`` objects (100,000 in one piece held the planner's event
    loop; the shell runs this with ``stepped``)."""
    taken = Taken([], [])
    for i, (slot, encoded, sha) in enumerate(desired):
        if i % STEP == STEP - 1:
            yield
        other = declared_by_other(slot, view.name, entries, bundles)
        if other is not None and take_over and not may_take(view.name, other):
            view.errors.append(
                f"{slot[1]}: declared by bundle {other} of another tenant: a tenant's bundle "
                "may take over only its own tenant's objects"
            )
            continue
        if other is not None and not take_over:
            view.errors.append(
                f"{slot[1]}: already declared by bundle {other} (publish with take-over "
                "to move it to this bundle)"
            )
            view.declared_by[other] = view.declared_by.get(other, 0) + 1
            continue
        if other is not None:
            taken.moved.append((slot, other))
        view.keys.add(slot[1])
        taken.objects.append((slot, encoded, sha))
    return taken
