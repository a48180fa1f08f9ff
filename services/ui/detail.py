"""What the status page explains on a click, read when asked: one object's decision history,
its last error and its desired-vs-live difference; one bundle's revision history.

Desired is the object's manifest in the bundle's latest revision on the bus, with its ownership
labels (as applied). Live is read from the cluster when the page has a kubeconfig (``driftbus up``
gives it one; anywhere else ``KUBECONFIG``), cut to the fields the manifest sets, so server
defaults and status are not shown as differences. Secret values and every ``env[].value`` are
masked (``diff.mask_sensitive``), and error texts come scrubbed from the appliers.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
from typing import Any

import msgspec

from schemas.codec import WireError, decode
from schemas.decision import DecisionRecord
from schemas.messages import Bundle, OutcomeEvent
from schemas.subjects import ObjectKey, bundle_subject, object_subject, split_bundle
from services.common import bus, sops
from services.common.bundles import BundleError, load_manifests, revisions
from services.core.diff import diff, mask_sensitive, project
from services.core.ignore import pointers_of, with_rules, without
from services.core.manifest import owned
from services.core.sha import prune

log = logging.getLogger("driftbus.ui")
MAX_DECISIONS = 50
SHA_FIELDS = ("manifest_sha", "last_applied_manifest_sha", "apply_sha", "server_sha")


def without_secret_shas(doc: dict[str, Any], key: ObjectKey) -> dict[str, Any]:
    """``doc`` (a status or decision of ``key``) without its SHAs when ``key`` is a Secret: a
    SHA-256 of a Secret's pruned form is an unsalted hash of its values, which a guess can be
    checked against offline. Other objects' SHAs stay (they explain a decision)."""
    if key.group or key.kind != "Secret":
        return doc
    return {k: v for k, v in doc.items() if k not in SHA_FIELDS}


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
    js: bus.JetStream, cluster: str, bundle: str, key: ObjectKey
) -> dict[str, Any] | None:
    """The object's manifest in the bundle's latest revision, as applied (owned)."""
    last = await bus.last_message(js, bus.BUNDLES, bundle_subject(cluster, bundle))
    if last is None or not last.data:
        return None
    try:
        msg = decode(last.data, Bundle)
        # read inside: a stored manifest is decoded (and may be refused) as it is reached
        for raw in await load_manifests(js, msg):
            if _matches(raw, key, msg.options.namespace):
                # the fields driftbus neither applies nor compares are not differences either
                raw = with_rules(raw, msg.options.ignore, key)
                return owned(dict(without(raw, pointers_of(raw))), bundle)
    except (WireError, BundleError) as exc:
        log.warning("bundle %s/%s not read: %s", cluster, bundle, exc)
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
        from services.common.kube import KubeClient, KubeError, NotFound

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
    decisions = []
    for m in (await _history(js, bus.DECISIONS, object_subject("decision", cluster, key)))[
        -MAX_DECISIONS:
    ]:
        with contextlib.suppress(WireError):
            record = decode(m.data, DecisionRecord)
            if split_bundle(record.bundle)[0] == tenant:
                decisions.append(without_secret_shas(msgspec.to_builtins(record), key))
    error = None
    last = await bus.last_message(js, bus.OUTCOMES, object_subject("outcome", cluster, key))
    if last is not None and last.data:
        with contextlib.suppress(WireError):
            oc = decode(last.data, OutcomeEvent)
            if split_bundle(oc.bundle)[0] == tenant:
                error = {
                    "phase": str(oc.phase),
                    "message": oc.message,
                    "at": msgspec.to_builtins(oc.at),
                }
    desired = await desired_manifest(js, cluster, bundle, key)
    changes: list[dict[str, Any]] | None = None
    live_note = ""
    if desired is None:
        live_note = "the object is not in the bundle's latest revision"
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
        changes = [
            {
                "path": c.path,
                "live": c.old,
                "desired": c.new,
                "added": c.added,
                "removed": c.removed,
            }
            for c in mask_sensitive(found, key.kind)
        ]
    return {
        "cluster": cluster,
        "bundle": bundle,
        "object": str(key),
        "decisions": decisions,
        "last_error": error,
        "diff": changes,
        "diff_note": live_note,
    }


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
