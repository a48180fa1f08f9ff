"""What the status page explains on a click, read when asked: one object's decision history,
its last error and its desired-vs-live difference; one bundle's revision history.

Desired is the object's manifest, with its ownership labels (as applied), in the newest revision
of the bundle on the bus that the planner took the object in (``accepted``): never a revision
it refused, which may name any object of any namespace. Live is read from the cluster when the
page has a kubeconfig (``driftbus up`` gives it one; anywhere else ``KUBECONFIG``), and only for
such an object; it is cut to the fields the manifest sets (``diff.project``), so server defaults
and status are not shown as differences, and a live subtree the manifest does not declare is
shown by its type alone. Secret values and every ``env[].value`` are masked
(``diff.mask_sensitive``), and error texts come scrubbed from the appliers.
"""

from __future__ import annotations

import base64
import logging
import os
from typing import Any, TypeVar

import msgspec

from schemas.codec import WireError, decode
from schemas.messages import Bundle, OutcomeEvent
from schemas.subjects import ObjectKey, object_subject, split_bundle
from services.common import bus
from services.core.diff import Change, Withheld, diff, mask_sensitive, project
from services.core.ignore import pointers_of, with_rules, without
from services.core.manifest import owned
from services.core.sha import prune
from services.inputs import sops
from services.revisions.publish import BundleError, load_manifests, revisions
from services.stored import decisions as stored_decisions
from services.stored import facts as stored_facts
from services.ui import accepted

log = logging.getLogger("driftbus.ui")
T = TypeVar("T")
MAX_DECISIONS = 50
SHA_FIELDS = ("manifest_sha", "last_applied_manifest_sha", "apply_sha", "server_sha")
SECRET_WITHHELD = (*SHA_FIELDS, "inputs")
"""What a Secret's status and decisions are shown without: its SHAs, and a decision's kept
inputs (``driftbus replay``), which carry them again."""


def without_secret_shas(doc: dict[str, Any], key: ObjectKey) -> dict[str, Any]:
    """``doc`` (a status or decision of ``key``) without its SHAs when ``key`` is a Secret: a
    SHA-256 of a Secret's pruned form is an unsalted hash of its values, which a guess can be
    checked against offline. Other objects' SHAs stay (they explain a decision)."""
    if key.group or key.kind != "Secret":
        return doc
    return {k: v for k, v in doc.items() if k not in SECRET_WITHHELD}


async def _history(js: bus.JetStream, stream: str, subject: str) -> list[Any]:
    try:
        return [m async for m in bus.Follower(js, stream, subject, history=True).snapshot()]
    except bus.StreamMissing:
        return []


def _matches(raw: Any, key: ObjectKey, default_ns: str) -> bool:
    if not isinstance(raw, dict):
        return False
    meta = raw.get("metadata") or {}
    group = str(raw.get("apiVersion", "")).rpartition("/")[0]
    ns = meta.get("namespace") or (default_ns if key.namespace else "")
    return (group, raw.get("kind"), ns, meta.get("name")) == (
        key.group,
        key.kind,
        key.namespace,
        key.name,
    )


async def desired_manifest(
    js: bus.JetStream, msg: Bundle, bundle: str, key: ObjectKey
) -> dict[str, Any] | None:
    """The object's manifest in revision ``msg`` of ``bundle``, as applied (owned). ``msg`` is
    one the planner took ``key`` in (``accepted``), so a manifest naming no namespace where the
    publisher gave none is the one the planner placed in the tenant's default namespace."""
    default_ns = msg.options.namespace or key.namespace
    try:
        # read inside: a stored manifest is decoded (and may be refused) as it is reached
        for raw in await load_manifests(js, msg):
            if _matches(raw, key, default_ns):
                # the fields driftbus neither applies nor compares are not differences either
                raw = with_rules(raw, msg.options.ignore, key)
                return owned(dict(without(raw, pointers_of(raw))), bundle)
    except (WireError, BundleError) as exc:
        log.warning("bundle %s/%s not read: %s", msg.cluster, bundle, exc)
    return None


async def _last(js: bus.JetStream, stream: str, subject: str, kind: type[T]) -> T | None:
    last = await bus.last_message(js, stream, subject)
    if last is None or not last.data:
        return None
    try:
        return decode(last.data, kind)
    except WireError:
        return None


def as_stored(manifest: dict[str, Any]) -> dict[str, Any]:
    """A Secret's ``stringData`` as the API server stores it (base64 in ``data``), so it is
    compared with the live ``data`` instead of shown as missing."""
    string_data = manifest.get("stringData")
    if manifest.get("kind") != "Secret" or not isinstance(string_data, dict):
        return manifest
    data = dict(manifest.get("data") or {})
    for k, v in string_data.items():
        data[k] = base64.b64encode(str(v).encode()).decode()
    out = {k: v for k, v in manifest.items() if k != "stringData"}
    out["data"] = data
    return out


class LiveReader:
    """Reads live objects, when the page was given a cluster (else says why not)."""

    def __init__(self) -> None:
        self._kube: Any = None
        self.why_not = ""

    async def get(self, manifest: dict[str, Any], key: ObjectKey) -> dict[str, Any] | None:
        from services.kube import KubeClient, KubeError, NotFound

        if self._kube is None:
            if not os.environ.get("KUBECONFIG") and not os.environ.get("KUBERNETES_SERVICE_HOST"):
                self.why_not = "the page has no kubeconfig (set KUBECONFIG for `driftbus ui`)"
                return None
            try:
                self._kube = (
                    KubeClient.in_cluster()
                    if os.environ.get("KUBERNETES_SERVICE_HOST")
                    else await KubeClient.from_kubeconfig()
                )
            except Exception as exc:  # noqa: BLE001 - no cluster: the page still shows the rest
                self.why_not = f"the cluster cannot be read: {exc}"
                return None
        try:
            res = await self._kube.resource_for(manifest)
            return dict(await self._kube.get(res, key.name, key.namespace))
        except NotFound:
            return {}
        except KubeError as exc:
            self.why_not = f"the live object cannot be read: {exc}"
            return None


async def object_detail(
    js: bus.JetStream, live: LiveReader, cluster: str, bundle: str, key: ObjectKey
) -> dict[str, Any]:
    # the object's history is keyed by the object alone: what another tenant's bundle did with
    # the same key (a Secret of its own namespace, asked for through this bundle) is not shown
    tenant = split_bundle(bundle)[0]
    records = await stored_decisions.history(js, cluster, key)
    decisions = [
        without_secret_shas(msgspec.to_builtins(r), key)
        for r in records
        if split_bundle(r.bundle)[0] == tenant
    ][-MAX_DECISIONS:]
    error = None
    oc = await _last(js, bus.OUTCOMES, object_subject("outcome", cluster, key), OutcomeEvent)
    if oc is not None and split_bundle(oc.bundle)[0] == tenant:
        error = {"phase": str(oc.phase), "message": oc.message, "at": msgspec.to_builtins(oc.at)}
    # the applied fact: from the cluster's checkpoint and the appliers' reports after it
    applied = (await stored_facts.applied(js, [cluster])).get(cluster, {}).get(key)
    ev = accepted.evidence(bundle, records, applied, oc)
    chosen = accepted.in_force(await revisions(js, cluster, bundle), ev, str(key))
    desired = (
        None
        if chosen.revision is None
        else await desired_manifest(js, chosen.revision, bundle, key)
    )
    changes: list[dict[str, Any]] | None = None
    live_note = ""
    if desired is None:
        live_note = chosen.why_not or f"{key} is not in the revision in force"
    elif (got := await live.get(desired, key)) is None:
        live_note = live.why_not
    elif not got:
        live_note = "the object does not exist in the cluster"
    else:
        left_out: list[str] = []
        if sops.is_encrypted(desired):
            # ciphertext always differs from the live values, which only the applier may know
            desired, left_out = sops.comparable(desired)
        if left_out:
            live_note = (
                f"SOPS-encrypted: {', '.join(left_out)} not compared (only the applier "
                "decrypts them)"
            )
        want = prune(as_stored(desired))
        found = diff(project(prune(got), want), want)
        changes = [_shown(c) for c in mask_sensitive(found, key.kind)]
    return {
        "cluster": cluster,
        "bundle": bundle,
        "object": str(key),
        "revision": chosen.revision.revision if chosen.revision is not None else None,
        "decisions": decisions,
        "last_error": error,
        "diff": changes,
        "diff_note": live_note,
    }


def _shown(c: Change) -> dict[str, Any]:
    """One change as the page shows it: a live subtree the manifest does not declare by its
    type alone (``live_type``; inside a list, as ``(a mapping)``)."""
    withheld = c.old if isinstance(c.old, Withheld) else None
    return {
        "path": c.path,
        "live": None if withheld is not None else _typed(c.old),
        "live_type": withheld.type if withheld is not None else None,
        "desired": c.new,
        "added": c.added,
        "removed": c.removed,
    }


def _typed(value: Any) -> Any:
    if isinstance(value, Withheld):
        return repr(value)
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    return value


async def bundle_history(js: bus.JetStream, cluster: str, bundle: str) -> list[dict[str, Any]]:
    """The revisions of the bundle on the bus, newest first (what ``rollback`` can go back to)."""
    return [
        {
            "revision": b.revision,
            "published_at": msgspec.to_builtins(b.published_at),
            "source": b.source,
            "rollback_of": b.rollback_of,
            "delete": b.delete,
            "objects": b.manifests_ref.count if b.manifests_ref else len(b.manifests),
        }
        for b in reversed(await revisions(js, cluster, bundle))
    ]
