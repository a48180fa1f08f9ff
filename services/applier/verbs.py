"""The applier's writes to the cluster: server-side apply, replace (delete and re-create), prune.

Each verb returns its result as data (an ``Outcome``, with the applied fact on success) or raises
``Decided`` with the classification of the error that stopped it (``classify``).

A SOPS-encrypted manifest is decrypted here, just before its apply (``decrypted``, with the key
of the intent's bundle: ``decrypt``), and the rest of the apply works on the decrypted intent,
so every error is scrubbed of the decrypted values; the plaintext lives only in this call. One
that cannot be decrypted — or that would be applied as another object than it was encrypted
as — is ``Failed`` naming the object and the reason, and nothing of it is applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from typing import Any, Final

import msgspec
import orjson

from schemas.messages import AppliedEvent, ApplyIntent, DeleteIntent, ObjectPhase
from services.applier.classify import Decided, Gone, Leave, Replace, Report, Step, Wait, classify
from services.applier.decrypt import Decryptor, Keys
from services.core import hooks
from services.core.adopt import adoption_patch
from services.core.ignore import owned_at, pointers_of, sparse, value_at
from services.core.manifest import FIELD_MANAGER, PRUNE_ANNOTATION, owner_of, prune_disabled
from services.core.owned import field_set
from services.core.scrub import scrub_for
from services.core.sha import object_sha
from services.inputs import sops
from services.kube import Conflict, Invalid, KubeClient, KubeError, NotFound, Resource

log = logging.getLogger("driftbus.applier")
DELETED_SHA: Final = "0" * 64
JSON_PATCH: Final = "application/json-patch+json"
ADOPT_ATTEMPTS: Final = 5
HANDOVER_MANAGER: Final = "driftbus-ignored"
"""The field manager that keeps an ignored field's value while driftbus lets go of it."""


@dataclasses.dataclass
class Outcome:
    phase: ObjectPhase
    message: str
    applied: AppliedEvent | None = None


async def apply(
    kube: KubeClient,
    intent: ApplyIntent,
    *,
    applier_id: str,
    whole: bool = False,
    decryptor: Decryptor | None = None,
) -> Outcome:
    """Server-side apply (``fieldManager=driftbus``); an immutable field is replaced if the
    bundle allows it. A SOPS-encrypted manifest is decrypted first (``decryptor``)."""
    if sops.is_encrypted(intent.manifest):
        return await decrypted(kube, intent, applier_id=applier_id, whole=whole, by=decryptor)
    return await _apply(kube, intent, applier_id=applier_id, whole=whole)


async def decrypted(
    kube: KubeClient,
    intent: ApplyIntent,
    *,
    applier_id: str,
    whole: bool,
    by: Decryptor | None,
) -> Outcome:
    """Apply the decrypted form of a SOPS-encrypted intent: ``Failed`` (nothing applied) when it
    cannot be decrypted with its bundle's key, or is not bound to the object it would be
    applied as (``sops.bound``); any error of the apply classified against the decrypted
    manifest, so its values are scrubbed from every message and log line."""
    try:
        plain = await (by or Decryptor(Keys())).decrypt(intent.manifest, intent.bundle)
    except sops.SopsError as exc:
        return Outcome(ObjectPhase.FAILED, f"{intent.key}: not applied: its SOPS encryption: {exc}")
    clear = msgspec.structs.replace(intent, manifest=plain)
    try:
        return await _apply(kube, clear, applier_id=applier_id, whole=whole)
    except Decided:
        raise
    except Exception as exc:
        verdict = classify(exc, Step.INTENT, clear)
        if isinstance(verdict, Leave):
            raise
        if isinstance(verdict, Report) and verdict.internal:
            log.error(
                "%s: applying the decrypted manifest failed: %s",
                intent.key,
                scrub_for(plain, f"{type(exc).__name__}: {exc}"),
            )
            verdict = dataclasses.replace(verdict, internal=False)
        raise Decided(verdict) from None


async def _apply(
    kube: KubeClient, intent: ApplyIntent, *, applier_id: str, whole: bool = False
) -> Outcome:
    m = intent.manifest
    try:
        res = await kube.resource_for(m)
    except KubeError as exc:
        raise Decided(classify(exc, Step.RESOLVE, intent)) from None
    if res.namespaced and not intent.key.namespace:
        return Outcome(
            ObjectPhase.FAILED,
            f"{res.kind} is namespaced but the manifest has no metadata.namespace and the "
            "bundle no default namespace (publish with --namespace NS)",
        )
    try:
        if hooks.is_hook(m):
            await recreate_hook(kube, res, m, intent.bundle)
        if ignored := pointers_of(m):
            await hand_over(kube, res, m, ignored)
        live = await apply_adopting(kube, res, m, force=intent.force)
    except KubeError as exc:
        if not isinstance(verdict := classify(exc, Step.APPLY, intent), Replace):
            raise Decided(verdict) from None
        await replace_delete(kube, res, m["metadata"]["name"], m["metadata"].get("namespace", ""))
        live = await kube.apply(m, field_manager=FIELD_MANAGER, force=intent.force, resource=res)
    rv = live.get("metadata", {}).get("resourceVersion", "")
    applied = AppliedEvent(
        cluster=intent.cluster,
        key=intent.key,
        bundle=intent.bundle,
        revision=intent.revision,
        manifest_sha=intent.manifest_sha,
        apply_sha=object_sha(live, whole=whole).hex(),
        resource_version=rv,
        applied_at=now(),
        applier=applier_id,
    )
    return Outcome(ObjectPhase.APPLIED, f"applied ({intent.reason})", applied)


async def apply_adopting(
    kube: KubeClient, res: Resource, manifest: dict[str, Any], *, force: bool
) -> dict[str, Any]:
    """Server-side apply. An object that kubectl made is adopted first or after (``adopt.py``:
    the fields of kubectl's managers become driftbus's) and applied again, so the fields the
    manifest leaves out are removed and what it changes does not conflict with kubectl."""
    try:
        live = await kube.apply(manifest, field_manager=FIELD_MANAGER, force=force, resource=res)
    except Conflict:
        meta = manifest["metadata"]
        live = await kube.get(res, meta["name"], meta.get("namespace", ""))
        if not await adopt(kube, res, live, manifest):
            raise
        return await kube.apply(manifest, field_manager=FIELD_MANAGER, force=force, resource=res)
    if await adopt(kube, res, live, manifest):
        live = await kube.apply(manifest, field_manager=FIELD_MANAGER, force=force, resource=res)
    return live


async def adopt(
    kube: KubeClient, res: Resource, live: dict[str, Any], manifest: dict[str, Any]
) -> bool:
    """Send the adoption patch of ``live`` if it needs one; whether it was taken. The patch is
    guarded by the resourceVersion, which a controller's write right after the apply often
    moves on: then the object is read again and the patch made again, a few times."""
    meta = live["metadata"]
    name, namespace = meta["name"], meta.get("namespace", "")
    for attempt in range(ADOPT_ATTEMPTS):
        patch = adoption_patch(live, manifest)
        if not patch:
            return attempt > 0
        try:
            await kube.request(
                "PATCH",
                res.path(namespace, name),
                subject=f"{res.kind}/{namespace}/{name}" if namespace else f"{res.kind}/{name}",
                params={"fieldManager": FIELD_MANAGER},
                body=orjson.dumps(patch),
                content_type=JSON_PATCH,
            )
        except (Conflict, Invalid) as exc:  # the guard failed: the object moved on
            log.info("adopting %s/%s: %s; reading it again", res.kind, name, exc)
            live = await kube.get(res, name, namespace)
            continue
        return True
    log.warning("adopting %s/%s: gave up after %d attempts", res.kind, name, ADOPT_ATTEMPTS)
    return False


async def hand_over(
    kube: KubeClient, res: Resource, manifest: dict[str, Any], ignored: list[str]
) -> None:
    """Before a field becomes ignored, driftbus may own it (an earlier revision set it). Applied
    without it, server-side apply would *remove* it — a Deployment's replicas back to 1 under
    its HPA. So each ignored field driftbus still owns is first co-owned at its live value by
    ``HANDOVER_MANAGER`` (what the Kubernetes docs prescribe for handing a field over); the
    apply then only drops driftbus's claim and the value stays. Costs a GET per apply of an
    object with ignored fields, and one write per field handed over, once."""
    meta = manifest["metadata"]
    try:
        live = await kube.get(res, meta["name"], meta.get("namespace", ""))
    except NotFound:
        return  # created now: nothing to hand over
    fields = field_set(live)
    for pointer in ignored:
        found, value = value_at(live, pointer)
        if found and owned_at(fields, pointer):
            body = sparse(live, pointer, value)
            with contextlib.suppress(Conflict):  # another manager took it meanwhile: not ours
                await kube.apply(body, field_manager=HANDOVER_MANAGER, resource=res)


async def recreate_hook(kube: KubeClient, res: Resource, m: dict[str, Any], bundle: str) -> None:
    """A hook's earlier copy (another revision's) is deleted before the hook is created again,
    as ``before-hook-creation`` asks (the default): a Job runs anew, not patched in place.
    Only the bundle's own copy: one that does not carry its label is left to the apply."""
    meta = m["metadata"]
    try:
        live = await kube.get(res, meta["name"], meta.get("namespace", ""))
    except NotFound:
        return
    if owner_of(live) == bundle and hooks.recreated(live, m):
        await replace_delete(kube, res, meta["name"], meta.get("namespace", ""))


async def replace_delete(kube: KubeClient, res: Resource, name: str, namespace: str) -> None:
    """Delete for allow-replace and wait until it is gone (Background: no finalizer that
    only a garbage collector would remove), so the re-create does not meet the old object."""
    await kube.delete(res, name, namespace, propagation="Background")
    for _ in range(300):
        try:
            await kube.get(res, name, namespace)
        except NotFound:
            return
        await asyncio.sleep(0.1)
    raise Wait(f"{res.kind}/{namespace}/{name} is still being deleted for replacement")


async def delete(kube: KubeClient, intent: DeleteIntent, *, applier_id: str) -> Outcome:
    """Prune: re-read the live object, delete it only if it still carries the bundle's label
    and does not opt out, and only that very object (uid precondition)."""
    key = intent.key
    try:
        # a kind the cluster does not serve has no objects: there is nothing to delete
        res = await kube.discovery.resource(intent.api_version, key.kind)
        live = await kube.get(res, key.name, key.namespace)
        meta = live.get("metadata", {})
        if (owner := owner_of(live)) != intent.bundle:
            return Outcome(
                ObjectPhase.KEPT,
                f"not pruned: it carries the label of {owner or 'no bundle'} now, "
                f"not of bundle {intent.bundle}",
            )
        if prune_disabled(live):
            return Outcome(ObjectPhase.KEPT, f"not pruned: it carries {PRUNE_ANNOTATION}: disabled")
        if intent.reason == hooks.POLICY_DELETE and not hooks.deletable(live):
            return Outcome(ObjectPhase.KEPT, "not deleted: a kept resource, or a Namespace or CRD")
        gone = await kube.delete(
            res,
            key.name,
            key.namespace,
            uid=str(meta.get("uid") or "") or None,
            propagation=intent.propagation,
        )
        rv = str(gone.get("metadata", {}).get("resourceVersion", ""))
    except KubeError as exc:
        if not isinstance(verdict := classify(exc, Step.PRUNE, intent), Gone):
            raise Decided(verdict) from None
        rv = ""
    if intent.reason == hooks.POLICY_DELETE:
        # not a prune: the object stays desired and applied for this revision; its tombstone
        # (retired) is its end, so no applied fact says otherwise
        return Outcome(ObjectPhase.PRUNED, "hook ended; deleted by its hook-delete-policy")
    applied = AppliedEvent(
        cluster=intent.cluster,
        key=key,
        bundle=intent.bundle or "?",
        revision=intent.revision,
        manifest_sha=DELETED_SHA,
        apply_sha=None,
        resource_version=rv,
        deleted=True,
        applied_at=now(),
        applier=applier_id,
    )
    return Outcome(ObjectPhase.PRUNED, f"pruned: not in revision {intent.revision}", applied)


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
