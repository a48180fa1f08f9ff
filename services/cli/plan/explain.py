"""``driftbus plan``: what a publish would do, and why, without writing anything.

The decision for each object is the planner's own rule (``decide.evaluate``) over the state the
streams hold (APPLIED, SERVER, OUTCOMES), replayed through the planner's own adapter
(``planner.rule.facts``), so a plan cannot disagree with what the planner will do. For an
object that would be applied, the server computes the result by server-side dry-run and the plan
shows the field-level difference to the live object (Secret values masked). A SOPS-encrypted
Secret is not dry-run (only the applier may decrypt it; its ciphertext is no object the server
would take): its row says it would be applied, and why, without a difference. Objects that would
leave the bundle are listed as deletes (or kept, with ``--no-prune`` or when not ours).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, cast

from schemas.cli import PlanAction
from schemas.codec import WireError, decode
from schemas.decision import DecisionAction
from schemas.messages import (
    AppliedEvent,
    Bundle,
    BundleOptions,
    IgnoreRule,
    OutcomeEvent,
    ServerEvent,
)
from schemas.subjects import ObjectKey, cluster_filter
from services.clusters import registry
from services.common import bus
from services.core.diff import Change, diff, mask_sensitive
from services.core.ignore import pointers_of
from services.core.manifest import FIELD_MANAGER, apply_order, check_bundle_name
from services.core.scope import Scopes, group_kind
from services.core.scrub import scrub_for
from services.core.sha import manifest_sha, prune
from services.inputs import sops
from services.inputs.load import Loaded
from services.kube import KubeClient, KubeError, NotFound
from services.planner.rule import facts, limits
from services.planner.rule.decide import Decision, Desired, Entry, evaluate, restore
from services.planner.rule.revision import checked_object
from services.tenancy.clusters import NOT_READ, Labels
from services.tenancy.store import read_policy


@dataclasses.dataclass
class PlanRow:
    key: ObjectKey
    action: PlanAction
    reason: str
    changes: list[Change] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)
    """Pointers of the fields neither applied nor compared (``--ignore``, the annotation)."""
    api_version: str = ""


async def _state(js: bus.JetStream, cluster: str) -> dict[ObjectKey, list[facts.Fact]]:
    """The last fact of each stream the planner rebuilds from (APPLIED, SERVER, OUTCOMES), per
    object, in that order: the compacted view a planner starting now would replay. A stream
    not made yet (no planner has run on this bus) holds nothing."""
    known: dict[ObjectKey, list[facts.Fact]] = {}
    for stream, family, kind in (
        (bus.APPLIED, "applied", AppliedEvent),
        (bus.SERVER, "server", ServerEvent),
        (bus.OUTCOMES, "outcome", OutcomeEvent),
    ):
        try:
            async for m in bus.Follower(js, stream, cluster_filter(family, cluster)).snapshot():
                with contextlib.suppress(WireError):
                    fact = cast(facts.Fact, decode(m.data, kind))
                    known.setdefault(fact.key, []).append(fact)
        except bus.StreamMissing as exc:
            if exc.err_code != bus.STREAM_NOT_FOUND:
                raise
    return known


async def _labels(js: bus.JetStream, cluster: str) -> Labels:
    """The cluster's registry labels, as its planner holds a tenant's clusterSelector to them
    (None: unknown to the registry, which no selector admits; ``NOT_READ`` when the registry
    cannot be read: then only the ``clusters`` globs are checked)."""
    try:
        return await registry.labels_of(js, cluster)
    except Exception:  # noqa: BLE001 - no registry, or no right to read it: plan says less
        return NOT_READ


async def _scopes(kube: KubeClient, loaded: Loaded) -> Scopes:
    """Scopes as the planner keys with them: built-in kinds and what the cluster serves (the
    planner hears it from the watcher's discovery; the plan asks), then, for kinds the cluster
    has not named, the bundle's own CRDs (``Scopes.for_revision``): the cluster's word wins."""
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
    kube: KubeClient,
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
    a publish with ``--force`` would, taking fields other managers own). Raises
    ``ManifestError`` for what the planner would refuse (``revision.checked_object``: keyed,
    normalised, ignored fields out, owned), the tenant policy in force included (``limits``)."""
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
    known = await _state(js, cluster)
    rows: list[PlanRow] = []
    desired: set[ObjectKey] = set()
    scopes = await _scopes(kube, loaded)
    for i, m in enumerate(loaded.manifests):
        # as the planner takes the object in (intake)
        key, manifest = checked_object(as_published, m.obj, scopes, f"manifests[{i}]")
        desired.add(key)
        ignored = pointers_of(manifest)
        api_version = str(manifest.get("apiVersion", ""))
        decision = decide_republish(facts.rebuilt(key, known.get(key, [])), bundle, manifest)
        if decision is None or decision.action is DecisionAction.HIT:
            rows.append(PlanRow(key, "unchanged", "hit", ignored=ignored, api_version=api_version))
            continue
        row = await _dry_run(kube, key, manifest, str(decision.reason), force=force)
        row.ignored = ignored
        row.api_version = api_version
        rows.append(row)
    limits.check(as_published, desired, scopes, tenant_policy)
    for key, found in known.items():
        if key in desired:
            continue
        entry = facts.rebuilt(key, found)
        if entry.owner_bundle != bundle or not entry.live:
            continue
        v = entry.api_version
        if entry.applied_bundle != bundle:  # only the label says so: the planner never prunes it
            rows.append(PlanRow(key, "keep", "not-declared", api_version=v))
        elif entry.keep:  # the live object opts out: the planner keeps it
            rows.append(PlanRow(key, "keep", "annotation", api_version=v))
        elif prune_removed:
            rows.append(PlanRow(key, "delete", "prune", api_version=v))
        else:
            rows.append(PlanRow(key, "keep", "prune-disabled", api_version=v))
    return sorted(rows, key=lambda r: apply_order(r.key))


def decide_republish(entry: Entry, bundle: str, manifest: dict[str, Any]) -> Decision | None:
    """What the planner decides when ``manifest`` is published (again) over ``entry``."""
    return evaluate(
        restore(entry, Desired(bundle, "plan", manifest_sha(manifest))), republished=True
    )


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
