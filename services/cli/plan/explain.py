"""``driftbus plan`` for one cluster: what a publish would do, and why, without writing anything.

The decision for each object is the planner's own rule over the state the streams hold
(``verdict.rows``: ``decide.evaluate`` on the entries ``state.known`` rebuilds from APPLIED,
SERVER and OUTCOMES), so a plan cannot disagree with what the planner will do. With a cluster to
ask (``kube``: ``--diff``), an object that would be applied is computed by the server in a
server-side dry-run and the plan shows the field-level difference to the live object (Secret
values masked); without one, scopes come from the watcher's discovery as the planner hears it and
no API server is asked. A SOPS-encrypted Secret is not dry-run (only the applier may decrypt it;
its ciphertext is no object the server would take): its row says it would be applied, and why,
without a difference. Objects that would leave the bundle are listed as deletes (or kept, with
``--no-prune`` or when not ours).
"""

from __future__ import annotations

import contextlib
from typing import Any

from schemas.messages import Bundle, BundleOptions, IgnoreRule
from schemas.subjects import ObjectKey
from services.cli.plan import state
from services.cli.plan.verdict import PlanRow, decide_republish, rows, scopes_of
from services.clusters import registry
from services.common import bus
from services.core.diff import diff, mask_sensitive
from services.core.manifest import FIELD_MANAGER, check_bundle_name
from services.core.scope import Scopes, group_kind
from services.core.scrub import scrub_for
from services.core.sha import prune
from services.inputs import sops
from services.inputs.load import Loaded
from services.kube import KubeClient, KubeError, NotFound
from services.planner.rule import limits
from services.tenancy.clusters import NOT_READ, Labels
from services.tenancy.store import read_policy

__all__ = ["PlanRow", "decide_republish", "plan"]


async def _labels(js: bus.JetStream, cluster: str) -> Labels:
    """The cluster's registry labels, as its planner holds a tenant's clusterSelector to them
    (None: unknown to the registry, which no selector admits; ``NOT_READ`` when the registry
    cannot be read: then only the ``clusters`` globs are checked)."""
    try:
        return await registry.labels_of(js, cluster)
    except Exception:  # noqa: BLE001 - no registry, or no right to read it: plan says less
        return NOT_READ


async def _scopes(kube: KubeClient, loaded: Loaded) -> Scopes:
    """Scopes as the planner keys with them, the cluster asked (``--diff``): built-in kinds and
    what the cluster serves (the planner hears it from the watcher's discovery; the plan asks),
    then, for kinds the cluster has not named, the bundle's own CRDs (``Scopes.for_revision``:
    the cluster's word wins)."""
    scopes = Scopes()
    for m in loaded.manifests:
        gk = group_kind(m.obj)
        if gk is not None and scopes.namespaced(*gk) is None:
            with contextlib.suppress(KubeError):
                res = await kube.discovery.resource(str(m.obj["apiVersion"]), gk[1])
                scopes.learn(*gk, res.namespaced)
    return scopes.for_revision([m.obj for m in loaded.manifests])


async def plan(
    js: bus.JetStream,
    kube: KubeClient | None,
    *,
    cluster: str,
    bundle: str,
    loaded: Loaded,
    prune_removed: bool = True,
    namespace: str = "",
    ignore: list[IgnoreRule] | None = None,
    force: bool = False,
) -> list[PlanRow]:
    """One row per object of ``loaded`` and per object the publish would prune (``force``: as
    a publish with ``--force`` would, taking fields other managers own). ``kube`` None: from
    the bus alone (no field-level changes). Raises ``ManifestError`` for what the planner would
    refuse (``revision.checked_object``: keyed, normalised, ignored fields out, owned), the
    tenant policy in force included (``limits``)."""
    tenant_policy = await read_policy(js)
    as_published = limits.with_tenant_defaults(
        Bundle(
            cluster=cluster,
            bundle=check_bundle_name(bundle),
            revision="plan",
            options=BundleOptions(namespace=namespace, ignore=list(ignore or ())),
        ),
        tenant_policy,
        await _labels(js, cluster),
    )
    known = (await state.known(js, [cluster]))[cluster]
    manifests = [m.obj for m in loaded.manifests]
    if kube is None:
        scopes = scopes_of((await state.learned_scopes(js, [cluster]))[cluster], manifests)
    else:
        scopes = await _scopes(kube, loaded)
    out = rows(as_published, manifests, known, scopes, tenant_policy, prune_removed=prune_removed)
    if kube is None:
        return out
    return [await dry_run(kube, r, force=force) for r in out]


async def dry_run(kube: KubeClient, row: PlanRow, *, force: bool) -> PlanRow:
    """An ``apply`` row with the server's field-level difference (``--diff``); others as they
    are. One GET and one dry-run apply per object that would be applied, nothing else."""
    if row.action != "apply" or row.manifest is None:
        return row
    out = await _dry_run(kube, row.key, row.manifest, row.reason, force=force)
    out.ignored = row.ignored
    out.api_version = row.api_version
    return out


async def _dry_run(
    kube: KubeClient, key: ObjectKey, manifest: dict[str, Any], reason: str, *, force: bool
) -> PlanRow:
    try:
        res = await kube.resource_for(manifest)
    except NotFound:
        return PlanRow(key, "apply", f"{reason}; kind not served yet (its CRD is not installed)")
    try:
        live: dict[str, Any] = await kube.get(res, key.name, key.namespace)
    except NotFound:
        live = {}
    if sops.is_encrypted(manifest):
        encrypted = "SOPS-encrypted: decrypted by the applier only, values not compared"
        return PlanRow(key, "apply", f"{reason}{'' if live else ' (create)'}; {encrypted}")
    try:
        result = await kube.apply(
            manifest, field_manager=FIELD_MANAGER, dry_run=True, resource=res, force=force
        )
    except NotFound as exc:
        if not (key.namespace and f'namespaces "{key.namespace}" not found' in str(exc)):
            return PlanRow(key, "error", scrub_for(manifest, str(exc)))
        # a new namespace (the bundle's own Namespace is applied first; any other is waited
        # for, as the applier does): nothing to dry-run against, the manifest is the object
        changes = mask_sensitive(diff({}, prune(manifest)), key.kind)
        return PlanRow(key, "apply", f"{reason} (create in new namespace {key.namespace})", changes)
    except KubeError as exc:
        return PlanRow(key, "error", scrub_for(manifest, str(exc)))
    changes = mask_sensitive(diff(prune(live) if live else {}, prune(result)), key.kind)
    return PlanRow(key, "apply", reason if live else f"{reason} (create)", changes)
