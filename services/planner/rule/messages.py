"""What the planner sends for a decision: the intent and its message id, the decision record,
its own object rows (drift and kept only). Pure builders; the planner's shell publishes what
they return.

Intent ids are derived from the state that caused them (bundle sequence, applied and server
resourceVersions) and the fencing token, so a restarted planner re-emitting an intent it already
sent is deduplicated by JetStream, while a new cause (or a new claim holder) always gets through.
"""

from __future__ import annotations

import datetime as dt
import logging

import msgspec

from schemas.codec import WireError, decode
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.messages import (
    ApplyIntent,
    DeleteIntent,
    Health,
    Impersonation,
    IntentBatch,
    ObjectPhase,
    ObjectStatus,
    OutcomeEvent,
    Queued,
)
from schemas.subjects import key_tokens
from services.core import hooks
from services.planner.rule.decide import DELETE_INFLIGHT, Decision, Entry
from services.planner.rule.entry import Slot
from services.planner.rule.replay import Inputs, kept
from services.planner.rule.revision import BundleView

log = logging.getLogger("driftbus.planner")

# the object rows the planner writes itself, from its decisions
# (none for an apply on its way, issue 44: a Pending row per object was a third message per
# object for what the bundle's row already says — how many are applied and how many are not;
# the applier's row is the object's first)
ROW_OF = {
    DecisionReason.DRIFT: ObjectPhase.DRIFTED,
    DecisionReason.DELETED: ObjectPhase.DRIFTED,
    DecisionReason.ANNOTATION: ObjectPhase.KEPT,
    DecisionReason.IN_USE: ObjectPhase.KEPT,
}
ROW_MESSAGES = {
    DecisionReason.DRIFT: "changed out of band: correction on its way",
    DecisionReason.DELETED: "deleted out of band: re-creation on its way",
    DecisionReason.ANNOTATION: "left the bundle; kept: it carries driftbus.dev/prune: disabled",
    DecisionReason.IN_USE: "left the bundle; kept: still in use",
}


def hex_or_none(sha: bytes | None) -> str | None:
    return sha.hex() if sha is not None else None


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def intent(
    slot: Slot,
    e: Entry,
    d: Decision,
    view: BundleView | None,
    revision: str,
    *,
    manifest: bytes | None,
    planner_id: str,
    fencing_token: int,
    identity: Impersonation | None = None,
) -> tuple[ApplyIntent | DeleteIntent, str] | None:
    """The intent for a writing decision and its message id; None when it cannot be built
    (its manifest or apiVersion unknown: logged)."""
    cluster, key = slot
    # the token is part of every id: a planner that took the cluster over re-sends what
    # was in flight, and its intents must not be dropped as repeats of the deposed one's;
    # a resend gets its own id (the first one may have been dropped as a repeat)
    again = f"|resend@{e.inflight_at:.0f}" if d.reason is DecisionReason.RESEND else ""
    if d.action is DecisionAction.APPLY:
        encoded = manifest
        if encoded is None or e.manifest_sha is None or view is None:
            log.error("%s: decided %s but its manifest is unknown", key, d.reason)
            return None
        cause = f"{view.seq}.{e.applied_rv}.{e.server_rv}"
        apply = ApplyIntent(
            cluster=cluster,
            key=key,
            bundle=e.bundle,
            revision=revision,
            manifest_sha=e.manifest_sha.hex(),
            manifest=msgspec.json.decode(encoded),
            reason=str(d.reason),
            force=view.force,
            allow_replace=view.allow_replace,
            issued_at=now(),
            planner=planner_id,
            fencing_token=fencing_token,
            impersonate=identity,
        )
        return apply, (
            f"{key_tokens(key)}|{e.manifest_sha.hex()[:16]}|{d.reason}|{cause}"
            f"|{fencing_token}{again}"
        )
    api_version = e.api_version
    if not api_version and (encoded := manifest):
        api_version = str(msgspec.json.decode(encoded).get("apiVersion", ""))
    if not api_version:
        log.error("%s: cannot prune it: its apiVersion is not known yet", key)
        return None
    delete = DeleteIntent(
        cluster=cluster,
        key=key,
        api_version=api_version,
        bundle=e.owner_bundle or (view.name if view else "?"),
        revision=revision,
        # a hook deleted by its policy is not a prune: the applier reports no applied fact
        reason=hooks.POLICY_DELETE if d.reason is DecisionReason.HOOK else "pruned",
        propagation=view.propagation if view else "Background",  # type: ignore[arg-type]
        issued_at=now(),
        planner=planner_id,
        fencing_token=fencing_token,
        impersonate=identity,
    )
    return delete, f"{key_tokens(key)}|delete|{e.server_rv}|{fencing_token}{again}"


def record(
    slot: Slot,
    e: Entry,
    d: Decision,
    revision: str,
    planner_id: str,
    identity: Impersonation | None = None,
    bundle: str = "",
    window: str = "",
    inputs: Inputs | None = None,
) -> DecisionRecord:
    """The audit record of a decision (hits included), with every SHA it was made from and
    whom its write is made as; ``bundle``: whose it is when the entry names none (a prune that
    cancels an apply still on its way); ``window``: the sync window that held it, or
    ``override: NAME`` (``ClusterState.window_note``); ``inputs``: what the rule decided it
    from, kept for ``driftbus replay`` (``rule.replay``)."""
    cluster, key = slot
    return DecisionRecord(
        cluster=cluster,
        key=key,
        bundle=e.bundle or e.owner_bundle or bundle,
        revision=revision,
        action=d.action,
        reason=d.reason,
        manifest_sha=hex_or_none(e.manifest_sha),
        last_applied_manifest_sha=hex_or_none(e.applied_manifest_sha),
        apply_sha=hex_or_none(e.apply_sha),
        server_sha=hex_or_none(e.server_sha),
        at=now(),
        planner=planner_id,
        identity=identity.user if identity is not None else "",
        window=window,
        inputs=kept(inputs, e),  # its SHAs are those above: the inputs refer to them
    )


def object_row(
    slot: Slot,
    e: Entry,
    view: BundleView,
    phase: ObjectPhase,
    message: str,
    health: Health = Health.UNKNOWN,
) -> ObjectStatus:
    """The planner's own object rows: Drifted, Kept, and Applied when a revision
    makes an earlier failure moot (appliers write the rest)."""
    return ObjectStatus(
        cluster=view.cluster,
        bundle=view.name,
        revision=view.revision,
        key=slot[1],
        phase=phase,
        health=health,
        message=message,
        manifest_sha=hex_or_none(e.manifest_sha),
        apply_sha=hex_or_none(e.apply_sha) if phase is ObjectPhase.APPLIED else None,
        at=now(),
    )


def moot_failure(oc: OutcomeEvent | None, e: Entry) -> bool:
    """Whether the object's last failure was for a manifest no longer desired, while what is
    desired is what was applied (a rollback to the revision before a failed one): its row
    still says Failed, and nothing would ever write it again."""
    return (
        oc is not None
        and oc.manifest_sha != hex_or_none(e.manifest_sha)
        and e.manifest_sha is not None
        and e.manifest_sha == e.applied_manifest_sha
    )


def is_inflight(data: bytes | None, entry: Entry) -> bool:
    """Whether a queued intent (or a batch holding one) is the one ``entry`` waits for (not an
    older one still waiting while the newer one was lost)."""
    try:
        queued: ApplyIntent | DeleteIntent | IntentBatch = decode(
            data or b"",
            Queued,  # type: ignore[arg-type]
        )
    except WireError:
        return False
    if isinstance(queued, IntentBatch):
        return any(_awaited(i, entry) for i in queued.intents if i.key == entry.key)
    return _awaited(queued, entry)


def _awaited(intent: ApplyIntent | DeleteIntent, entry: Entry) -> bool:
    if entry.inflight == DELETE_INFLIGHT:
        return isinstance(intent, DeleteIntent)
    return (
        isinstance(intent, ApplyIntent)
        and entry.inflight is not None
        and intent.manifest_sha == entry.inflight.hex()
    )
