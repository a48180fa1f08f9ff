"""Hooks and sync waves, as Helm's and Argo CD's annotations ask (pure; docs/hooks.md).

A revision is written in *stages*, each a ``(phase, wave)`` pair, lowest first: an object is
written only once every object of every lower stage is done (applied, seen by the watcher, and
Ready — a Job Complete). The phases:

* ``NAMESPACES`` — the revision's Namespaces and CRDs (not hooks), which hooks need first;
* ``PRE`` — pre-sync hooks: Helm ``pre-install`` / ``pre-upgrade``, Argo CD ``PreSync``;
* ``SYNC`` — every other object, and Argo CD ``Sync`` hooks;
* ``POST`` — post-sync hooks: Helm ``post-install`` / ``post-upgrade``, Argo CD ``PostSync``,
  written once everything before them is done (the revision is Ready but for them);
* ``FAIL`` — Argo CD ``SyncFail`` hooks, written only when the revision has failed.

As Argo CD does, Helm's install and upgrade hooks both run on every revision (a revision is one
sync), and the wave is ``argocd.argoproj.io/sync-wave``, else ``helm.sh/hook-weight``, else 0.
Hooks driftbus does not run — Helm's delete, rollback and test hooks, Argo CD's ``Skip``,
``PreDelete`` and ``PostDelete`` — are left out of the revision, as Argo CD leaves them out of a
sync. A hook named for several phases is created in the earliest and kept through the last
(charts name their hooks' ServiceAccount and RBAC for both pre- and post-install, so both Jobs
find them); Helm and Argo CD create it again for each phase, so a Job named for two phases
runs once here, not twice.

A hook runs once per revision: its manifest is stamped with the revision
(``driftbus.dev/hook-revision``), so a new revision changes its manifestSHA and an unchanged
one (a restart, a republish) does not. Its delete policy (Helm's ``hook-delete-policy`` or
Argo CD's; ``before-hook-creation`` when none is given, as in both) says when it is deleted:
before the next revision's copy is created, once it succeeded, or once it failed. A hook deleted
by its policy after it ended is *retired*: its tombstone is its end, not drift, and it is not
created again until the next revision.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

HOOK_REVISION = "driftbus.dev/hook-revision"
"""The revision a hook's manifest was stamped with: a new revision runs it again."""

HELM_HOOK = "helm.sh/hook"
HELM_WEIGHT = "helm.sh/hook-weight"
HELM_DELETE_POLICY = "helm.sh/hook-delete-policy"
ARGO_HOOK = "argocd.argoproj.io/hook"
ARGO_DELETE_POLICY = "argocd.argoproj.io/hook-delete-policy"
ARGO_WAVE = "argocd.argoproj.io/sync-wave"


class Phase(enum.IntEnum):
    NAMESPACES = -1
    """Namespaces and CRDs: what the hooks themselves live in and are made of (as ``helm
    install --create-namespace`` and Argo CD's ``CreateNamespace`` make them first)."""
    PRE = 0
    SYNC = 1
    POST = 2
    FAIL = 3


Stage = tuple[int, int]
"""(phase, wave): the order a revision's objects are written in."""

DEFAULT_STAGE: Stage = (Phase.SYNC, 0)

POLICY_DELETE = "hook-delete-policy"
"""``DeleteIntent.reason`` of a hook deleted by its policy: not a prune (no applied fact)."""

BEFORE_CREATION = "before-hook-creation"
SUCCEEDED = "hook-succeeded"
FAILED = "hook-failed"

_HELM_PHASES = {
    "pre-install": Phase.PRE,
    "pre-upgrade": Phase.PRE,
    "post-install": Phase.POST,
    "post-upgrade": Phase.POST,
    "crd-install": None,  # Helm 2's; an ordinary object (CRDs come first anyway)
}
_HELM_SKIPPED = frozenset(
    [
        "pre-delete",
        "post-delete",
        "pre-rollback",
        "post-rollback",
        "test",
        "test-success",
        "test-failure",
    ]
)
_ARGO_PHASES = {
    "PreSync": Phase.PRE,
    "Sync": Phase.SYNC,
    "PostSync": Phase.POST,
    "SyncFail": Phase.FAIL,
}
_ARGO_SKIPPED = frozenset(("Skip", "PreDelete", "PostDelete"))
_ARGO_POLICIES = {
    "BeforeHookCreation": BEFORE_CREATION,
    "HookSucceeded": SUCCEEDED,
    "HookFailed": FAILED,
}


class HookError(ValueError):
    """An annotation that cannot be read: the object is refused, naming it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hook:
    phase: Phase
    wave: int
    delete_policies: frozenset[str]
    last: Phase | None = None
    """The last phase it is named for (None: ``phase``): ``hook-succeeded`` deletes it once
    that phase is done, not before."""
    deletable: bool = True
    """A hook policy may delete it (``deletable``: not kept, not a Namespace or CRD)."""

    @property
    def until(self) -> Phase:
        return self.last if self.last is not None else self.phase

    @property
    def stage(self) -> Stage:
        return (int(self.phase), self.wave)


SKIP = "skip"
"""``hook_of``'s answer for a hook driftbus does not run."""


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    ann = meta.get("annotations") if isinstance(meta, Mapping) else None
    return ann if isinstance(ann, Mapping) else {}


def _names(value: Any) -> list[str]:
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _int(ann: Mapping[str, Any], name: str) -> int | None:
    if name not in ann:
        return None
    try:
        return int(str(ann[name]).strip())
    except ValueError:
        raise HookError(f"annotation {name}: {ann[name]!r} is not an integer") from None


def hook_of(obj: Mapping[str, Any]) -> Hook | str | None:
    """The object's hook, ``SKIP`` for a hook driftbus does not run, or None for an ordinary
    object. Argo CD's annotation wins over Helm's (as in Argo CD); HookError when unreadable."""
    ann = _annotations(obj)
    phases: list[Phase] = []
    if ARGO_HOOK in ann:
        names = _names(ann[ARGO_HOOK])
        unknown = [n for n in names if n not in _ARGO_PHASES and n not in _ARGO_SKIPPED]
        if unknown:
            raise HookError(f"annotation {ARGO_HOOK}: unknown hook {unknown[0]!r}")
        phases = [_ARGO_PHASES[n] for n in names if n in _ARGO_PHASES]
    elif HELM_HOOK in ann:
        given = _names(ann[HELM_HOOK])
        names = [n.lower() for n in given]  # Helm reads them lower-cased
        unknown = [g for g, n in zip(given, names, strict=True) if n not in _HELM_PHASES]
        unknown = [g for g in unknown if g.lower() not in _HELM_SKIPPED]
        if unknown:
            raise HookError(f"annotation {HELM_HOOK}: unknown hook {unknown[0]!r}")
        if names and all(_HELM_PHASES.get(n, "") is None for n in names):
            return None  # crd-install only
        phases = [p for n in names if (p := _HELM_PHASES.get(n)) is not None]
    else:
        return None
    if not phases:
        return SKIP
    wave = _int(ann, ARGO_WAVE)
    if wave is None:
        wave = _int(ann, HELM_WEIGHT) or 0
    first, last = min(phases), max(phases)
    return Hook(first, wave, _policies(ann), last if last != first else None, deletable(obj))


def _policies(ann: Mapping[str, Any]) -> frozenset[str]:
    out: set[str] = set()
    if ARGO_DELETE_POLICY in ann:
        for n in _names(ann[ARGO_DELETE_POLICY]):
            if n not in _ARGO_POLICIES:
                raise HookError(f"annotation {ARGO_DELETE_POLICY}: unknown policy {n!r}")
            out.add(_ARGO_POLICIES[n])
    if HELM_DELETE_POLICY in ann:
        for given in _names(ann[HELM_DELETE_POLICY]):
            if (n := given.lower()) not in (BEFORE_CREATION, SUCCEEDED, FAILED):
                raise HookError(f"annotation {HELM_DELETE_POLICY}: unknown policy {given!r}")
            out.add(n)
    return frozenset(out or (BEFORE_CREATION,))


def stage_of(obj: Mapping[str, Any]) -> Stage:
    """Where the object is written in its revision (an ordinary object: its sync wave)."""
    hook = hook_of(obj)
    if isinstance(hook, Hook):
        return hook.stage
    wave = _int(_annotations(obj), ARGO_WAVE)
    if obj.get("kind") in ("Namespace", "CustomResourceDefinition"):
        return (Phase.NAMESPACES, wave or 0)
    return (Phase.SYNC, wave or 0)


def stamped(obj: dict[str, Any], revision: str) -> dict[str, Any]:
    """A hook's manifest with the revision it runs for (an ordinary object: unchanged)."""
    if not isinstance(hook_of(obj), Hook):
        return obj
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), HOOK_REVISION: revision}
    return {**obj, "metadata": meta}


def is_hook(obj: Mapping[str, Any]) -> bool:
    """A hook as driftbus runs it: its manifest carries the revision it was stamped with."""
    return HOOK_REVISION in _annotations(obj)


KEEP = ("helm.sh/resource-policy", "keep")
"""A resource Helm never deletes: no hook policy deletes it either."""
NEVER_DELETED = frozenset(("Namespace", "CustomResourceDefinition"))
"""Kinds that hold other objects (other bundles' too): no hook policy deletes them."""


def deletable(obj: Mapping[str, Any]) -> bool:
    """Whether a hook policy may delete this hook at all: not a kept resource, not a
    Namespace or CRD (deleting it would take what is in it along)."""
    return (
        obj.get("kind") not in NEVER_DELETED
        and str(_annotations(obj).get(KEEP[0], "")).strip() != KEEP[1]
    )


def deleted_by_policy(obj: Mapping[str, Any], ready: bool, failed: bool) -> str:
    """The policy that asks for the hook to be deleted now that it ended (``ready``: it
    succeeded; ``failed``: it failed), or "" when none does (or it has not ended, or it may
    not be deleted: ``deletable``)."""
    if not is_hook(obj) or not deletable(obj):
        return ""
    try:
        hook = hook_of(obj)
    except HookError:
        return ""
    if not isinstance(hook, Hook):
        return ""
    if ready and SUCCEEDED in hook.delete_policies:
        return SUCCEEDED
    if failed and FAILED in hook.delete_policies:
        return FAILED
    return ""


def recreated(live: Mapping[str, Any], manifest: Mapping[str, Any]) -> bool:
    """Whether the live object is an earlier revision's copy of this hook that must be deleted
    before the hook is created again (``before-hook-creation``, the default; with another
    policy too, where an earlier copy was left: it failed, or it was kept)."""
    if not is_hook(manifest) or not deletable(manifest) or not deletable(live):
        return False  # applied over in place, as it is
    try:
        hook = hook_of(manifest)
    except HookError:
        return False
    if not isinstance(hook, Hook):
        return False
    # whatever its policy: a Job is not run again by patching it (Helm refuses an existing
    # hook without before-hook-creation; re-creating it runs the revision's hook as asked)
    return _annotations(live).get(HOOK_REVISION) != _annotations(manifest).get(HOOK_REVISION)
