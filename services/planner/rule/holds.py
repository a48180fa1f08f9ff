"""Why a bundle's writes wait (pure): it is suspended, a sync window holds them (a deny window
is open, or allow windows name it and none is: ``services/windows/verdict.py``, docs/windows.md),
or a bundle it depends on is not Ready — in that order.

A held bundle is still planned: every fact is folded and every revision taken in, so its
status tells what differs; only the writes wait (``decide.step(hold=...)``). When the hold ends
the planner decides again on each of its objects (``Release``) and prunes what it left.

``dependsOn`` names are resolved against the dependent's tenant: ``name`` is a bundle of the
same tenant (the platform's, for a platform bundle), ``tenant/name`` that tenant's, ``/name`` a
platform bundle. A tenant may wait only for its own bundles and the platform's: another
tenant's phase is none of its business. A revision that would close a cycle is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from schemas.decision import DecisionReason
from schemas.messages import BundlePhase
from schemas.subjects import join_bundle, split_bundle
from services.core.manifest import ManifestError, check_bundle_name
from services.windows.verdict import Block


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    reason: DecisionReason
    message: str
    """For the bundle's status: ``suspended (an incident)``, ``deny window "freeze" until …``,
    ``waits for bundle crds (...)``."""
    window: str = ""
    """The sync window that holds the writes ("" for another hold): named in decision records;
    such a bundle is OutOfSync (nothing changes before the window does), not Reconciling."""


def resolve(owner: str, ref: str) -> str:
    """The full name of the bundle ``ref`` that bundle ``owner`` depends on."""
    if ref.startswith("/"):
        return ref[1:]
    if "/" in ref:
        return ref
    return join_bundle(split_bundle(owner)[0], ref)


def dependencies(owner: str, refs: Iterable[str]) -> list[str]:
    """The full names of ``owner``'s dependencies, in order, once each; ManifestError naming
    the first one it may not depend on (itself, another tenant's, an invalid name)."""
    tenant = split_bundle(owner)[0]
    out: list[str] = []
    for ref in refs:
        full = resolve(owner, ref)
        check_bundle_name(full)
        if full == owner:
            raise ManifestError(f"bundle {owner} depends on itself")
        if tenant and split_bundle(full)[0] not in ("", tenant):
            raise ManifestError(
                f"bundle {owner} depends on {full}, a bundle of another tenant (a tenant's "
                "bundle may depend on its own tenant's bundles and the platform's)"
            )
        if full not in out:
            out.append(full)
    return out


def cycle(owner: str, deps: list[str], graph: Mapping[str, list[str]]) -> list[str]:
    """The cycle ``owner`` → ``deps`` closes in ``graph`` (bundle → its dependencies), as the
    path ``[owner, …, owner]``; empty when there is none."""
    path: list[str] = [owner]
    seen: set[str] = set()

    def walk(node: str) -> bool:
        for nxt in deps if node == owner else graph.get(node, []):
            if nxt == owner:
                path.append(owner)
                return True
            if nxt in seen:
                continue
            seen.add(nxt)
            path.append(nxt)
            if walk(nxt):
                return True
            path.pop()
        return False

    return path if walk(owner) else []


def hold_of(
    deps: list[str],
    phases: Mapping[str, BundlePhase],
    *,
    suspended: str | None,
    window: Block | None = None,
) -> Hold | None:
    """Why the bundle's writes wait now, or None. ``suspended``: the reason given when it was
    suspended ("" for none), or None when it is not; ``window``: the sync window holding its
    writes now, if any (none when its revision overrides windows); ``phases``: each bundle's
    last phase (absent: not published, or its new revision not yet counted)."""
    if suspended is not None:
        why = f"suspended ({suspended})" if suspended else "suspended"
        return Hold(DecisionReason.SUSPENDED, why)
    if window is not None:
        return Hold(DecisionReason.WINDOW, window.message, window.window.name)
    waiting = [d for d in deps if phases.get(d) is not BundlePhase.READY]
    if not waiting:
        return None
    named = ", ".join(f"{d} ({phases.get(d) or 'not published'})" for d in waiting)
    return Hold(DecisionReason.DEPENDENCIES, f"waits for {named}")
