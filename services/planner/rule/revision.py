"""A published revision taken in: its objects keyed, normalised, owned and hashed, or refused.

Pure: the planner's shell decodes the bundle and loads its manifests, then calls
``checked_revision``; a revision with one bad object is refused whole. Each object goes through
``checked_object`` (keyed, normalised, its ignored fields out, owned), the step ``driftbus plan``
runs too, so a plan keys and hashes an object exactly as the planner will.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Generator, Sequence
from typing import Any

import msgspec

from schemas.messages import Bundle, IgnoreRule
from schemas.subjects import ObjectKey, SubjectError, object_subject
from services.core import hooks
from services.core.ignore import (
    IgnoreError,
    check_annotation,
    pointers_of,
    with_rules,
    without,
)
from services.core.manifest import (
    ManifestError,
    check_not_empty,
    check_size,
    key_of,
    kind_of,
    owned,
)
from services.core.scope import Scopes, UnknownScope, normalise
from services.core.sha import HashError, manifest_sha
from services.core.steps import finished
from services.planner.rule import holds
from services.planner.rule.entry import Slot

MAX_LISTED_FAILURES = 50
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MANIFEST_JSON = msgspec.json.Encoder()


@dataclasses.dataclass
class BundleView:
    cluster: str
    name: str
    revision: str
    seq: int
    prune: bool
    force: bool
    allow_replace: bool
    keys: set[ObjectKey]
    errors: list[str]
    """Objects of this revision not taken (another bundle declares them)."""
    declared_by: dict[str, int] = dataclasses.field(default_factory=dict)
    """Of those, how many each other bundle declares: the bundle status names them."""
    stages: dict[ObjectKey, hooks.Stage] = dataclasses.field(default_factory=dict)
    """Each object's stage (``core.hooks``: its hook phase and wave) when the revision has more
    than one; empty when it has one (nothing waits for anything: ``rule.waves``)."""
    hooks: dict[ObjectKey, hooks.Hook] = dataclasses.field(default_factory=dict)
    """The revision's hooks: phase, wave, delete policies."""
    skipped_hooks: int = 0
    """Hooks left out: ones driftbus does not run (Helm's delete, rollback and test hooks)."""
    propagation: str = "Background"
    refused: tuple[str, str] | None = None
    """(revision, why) of the latest publish if it was refused; this view stays in force."""
    refusal_waits: bool = False
    """The refusal is a wait, not a failure: the revision is taken once the cluster's discovery
    tells a kind's scope (``UnknownScope``)."""
    source: str = ""
    """Where the revision came from and what rendered it (``Bundle.source``)."""
    outside: list[str] = dataclasses.field(default_factory=list)
    """Objects of this revision that the tenant policy no longer allows (it changed since the
    revision was taken in): reported, never pruned for it."""
    depends_on: list[str] = dataclasses.field(default_factory=list)
    """Full names of the bundles that must be Ready before this one writes (``holds``)."""
    deleting: bool = False
    """The revision is a deletion (``Bundle.delete``): pruned, then forgotten."""
    rollback_of: str = ""
    published_at: dt.datetime | None = None
    allow_prune: bool = False
    """The revision lets its deletions through past the prune budget (``rule.budget``)."""

    @classmethod
    def of(cls, bundle: Bundle, seq: int) -> BundleView:
        """The view of a revision just taken in (its keys are filled as objects are taken)."""
        o = bundle.options
        return cls(
            bundle.cluster,
            bundle.bundle,
            bundle.revision,
            seq,
            o.prune,
            o.force,
            o.allow_replace,
            set(),
            [],
            propagation=o.propagation,
            source=bundle.source,
            depends_on=holds.dependencies(bundle.bundle, o.depends_on),
            deleting=bundle.delete,
            rollback_of=bundle.rollback_of,
            published_at=bundle.published_at,
            # an empty revision published with --allow-empty asks for every object to go, as
            # a bundle deletion does: an explicit request the prune budget does not hold
            allow_prune=o.allow_prune
            or (o.allow_empty and not bundle.manifests and bundle.manifests_ref is None),
        )


def ignoring(
    raw: dict[str, Any], rules: list[IgnoreRule], key: ObjectKey, where: str
) -> dict[str, Any]:
    """The manifest without its ignored fields, which its annotation names (the bundle's rules
    merged in) so the SHAs of the live object leave them out too."""
    raw = with_rules(raw, rules, key)
    try:
        check_annotation(raw)
    except IgnoreError as exc:
        raise ManifestError(f"{where}: {key}: {exc}") from None
    return dict(without(raw, pointers_of(raw)))


def checked_object(
    bundle: Bundle, raw: Any, scopes: Scopes, where: str
) -> tuple[ObjectKey, dict[str, Any]]:
    """One object of ``bundle`` as the planner takes it in: keyed, normalised (``scopes``, the
    bundle's default namespace), keyed again, its ignored fields out (the bundle's rules
    merged in) and owned; or ManifestError naming the object (``where``, e.g. ``manifests[3]``,
    or its key once known)."""
    key_of(raw, where)
    raw = normalise(raw, scopes, bundle.options.namespace)
    key = key_of(raw, where)
    manifest = owned(ignoring(raw, bundle.options.ignore, key, where), bundle.bundle)
    return key, hooks.stamped(manifest, bundle.revision)  # a hook runs once per revision


@dataclasses.dataclass
class Plan:
    """How a revision's objects are written (``core.hooks``), filled by ``checked_revision``."""

    stages: dict[ObjectKey, hooks.Stage] = dataclasses.field(default_factory=dict)
    hooks: dict[ObjectKey, hooks.Hook] = dataclasses.field(default_factory=dict)
    skipped: int = 0


def checked_revision(
    bundle: Bundle, manifests: Sequence[Any], scopes: Scopes, plan: Plan | None = None
) -> list[tuple[Slot, bytes, bytes]]:
    """Every object of the revision keyed, owned and hashed — or ManifestError naming every
    bad one: a revision with one bad object is refused whole (applying the rest would prune
    the bad one's live object), and so is an empty one unless the publisher says so. ``plan``
    gets each object's stage and the hooks (hooks driftbus does not run are left out)."""
    return finished(checking(bundle, manifests, scopes, plan))


CHECK_STEP = 256
"""Objects ``checking`` checks between two pauses."""


def checking(
    bundle: Bundle, manifests: Sequence[Any], scopes: Scopes, plan: Plan | None = None
) -> Generator[None, None, list[tuple[Slot, bytes, bytes]]]:
    """``checked_revision`` in steps of ``CHECK_STEP`` objects: a planner lets its event loop
    run between them (100,000 objects are seconds of work, and a loop held that long misses its
    heartbeats and loses its claim). Its value is ``checked_revision``'s."""
    plan = plan if plan is not None else Plan()
    if bundle.delete and manifests:
        raise ManifestError("a deletion carries no manifests")
    check_not_empty(
        bundle.bundle, len(manifests), allow_empty=bundle.options.allow_empty, delete=bundle.delete
    )
    out: list[tuple[Slot, bytes, bytes]] = []
    errors: list[str] = []
    scope_unknown = 0
    seen: dict[ObjectKey, int] = {}
    kinds: set[str] = set()  # what the manifests hold (``bundle_kinds``), read in the same pass
    for i, raw in enumerate(manifests):
        if i % CHECK_STEP == CHECK_STEP - 1:
            yield
        if bundle.kinds and (kind := kind_of(raw)) is not None:
            kinds.add(kind)
        where_i = f"manifests[{i}]"
        try:
            hook = hook_or_error(raw, where_i)
            if hook == hooks.SKIP:
                plan.skipped += 1
                continue
            key, manifest = checked_object(bundle, raw, scopes, where_i)
            if key.namespace and not DNS_LABEL.match(key.namespace):
                # no such namespace can ever exist: waiting for it would never end
                raise ManifestError(
                    f"{where_i}: {key}: metadata.namespace {key.namespace!r} is not a valid "
                    "namespace name (a DNS label)"
                )
            object_subject("intent", bundle.cluster, key)  # its subjects fit (a name ≤ 253)
            if key in seen:
                raise ManifestError(f"{where_i}: {key} duplicates manifests[{seen[key]}]")
            encoded = check_size(MANIFEST_JSON.encode(manifest), f"{where_i}: {key}")
            sha = manifest_sha(manifest)
            stage = hook.stage if isinstance(hook, hooks.Hook) else stage_or_error(manifest, key)
        except (ManifestError, HashError) as exc:
            errors.append(str(exc))
            scope_unknown += isinstance(exc, UnknownScope)
            continue
        except SubjectError as exc:
            errors.append(f"{where_i}: {exc}")
            continue
        seen[key] = i
        out.append(((bundle.cluster, key), encoded, sha))
        plan.stages[key] = stage
        if isinstance(hook, hooks.Hook):
            plan.hooks[key] = hook
    if bundle.kinds and bundle.kinds != sorted(kinds):
        # the watcher watches what the message names: a kind left out would never be seen
        raise ManifestError(
            f"the message names the kinds {bundle.kinds} but the manifests contain {sorted(kinds)}"
        )
    if errors:
        shown = "; ".join(errors[:MAX_LISTED_FAILURES])
        # waiting on a scope only when nothing else is wrong: the rest needs a new revision
        error = UnknownScope if scope_unknown == len(errors) else ManifestError
        raise error(f"{len(errors)} of {len(manifests)} objects are invalid: {shown}")
    if not out and plan.skipped and manifests:
        check_not_empty(
            bundle.bundle, 0, allow_empty=bundle.options.allow_empty, delete=bundle.delete
        )  # only hooks driftbus does not run: as empty as a revision with no objects
    if not plan.hooks:  # Namespaces and CRDs go first only for the hooks that live in them
        for key, stage in plan.stages.items():
            if stage[0] == hooks.Phase.NAMESPACES:
                plan.stages[key] = (hooks.Phase.SYNC, stage[1])
    first = next(iter(plan.stages.values()), None)
    if not plan.hooks and all(s == first for s in plan.stages.values()):
        plan.stages.clear()  # one stage and no hook: nothing waits for anything
    return out


def stage_or_error(manifest: dict[str, Any], key: ObjectKey) -> hooks.Stage:
    """The object's stage (``core.hooks.stage_of``), or ManifestError naming it."""
    try:
        return hooks.stage_of(manifest)
    except hooks.HookError as exc:
        raise ManifestError(f"{key}: {exc}") from None


def hook_or_error(raw: Any, where: str) -> hooks.Hook | str | None:
    """The object's hook (``core.hooks.hook_of``), or ManifestError naming it."""
    if not isinstance(raw, dict):
        return None  # refused by ``checked_object``, naming it
    try:
        return hooks.hook_of(raw)
    except hooks.HookError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def fenced(bundle: Bundle, fences: dict[str, int]) -> str:
    """Why ``bundle``, a fleet placement, comes from a rollout driver that had lost its lease
    ("" if it does not): its fencing token is lower than one already taken for the bundle in
    this cluster, so a newer driver placed since (the bundle stream's order is the order the
    placements were made in). A placement not refused raises the bundle's fence. Messages
    without a token (a user's publish, a ``driftbus rollback``) are never fenced."""
    token = bundle.fencing_token
    if not (bundle.fleet and token):
        return ""
    highest = fences.get(bundle.bundle, 0)
    if token < highest:
        return (
            f"a placement of a rollout driver that lost its lease (fencing token {token}, "
            f"a newer driver's is {highest}): refused, the revision in force stays"
        )
    fences[bundle.bundle] = token
    return ""


def republishable(in_force: tuple[bool, int], highest: int) -> bool:
    """Whether the message in force, ``(fleet, fencing_token)``, may be published again when a
    deposed driver's placement is dropped: not when it is itself a placement below the
    bundle's fence (``highest``) — a newer driver's placement raised the fence and was then
    refused (policy, unknown labels, scope), so the older one stayed in force. Published
    again, it would be dropped in turn and published again, each copy under a new message id,
    until the bundle's history held nothing but copies of it."""
    fleet, token = in_force
    return not (fleet and token and token < highest)


def history_needed(bundle: Bundle, fences: dict[str, int], lease_token: int | None) -> bool:
    """Whether ``bundle``, a fleet placement met with no memory of the bundle's fence (a
    rebuild, or the first placement since), may be a deposed driver's that landed after a
    newer one: its token is below the current lease holder's (``lease_token``; None: the lease
    does not say, so it may be). Only then is the bundle's history read (``in_force_of``): a
    placement of the current holder's term never costs that."""
    token = bundle.fencing_token
    if not (bundle.fleet and token) or bundle.bundle in fences:
        return False
    return lease_token is None or token < lease_token


def in_force_of(history: Sequence[tuple[bool, int]]) -> tuple[int, int]:
    """The fence replayed over a bundle subject's messages, oldest first, each ``(fleet,
    fencing_token)``: the index of the last one a planner that had watched them all would have
    taken, and the highest token it would have taken. A fleet placement whose token is below
    one taken before it is refused (``fenced``); every other message is taken."""
    in_force, highest = -1, 0
    for i, (fleet, token) in enumerate(history):
        if fleet and token:
            if token < highest:
                continue
            highest = token
        in_force = i
    return in_force, highest
