"""SOPS-encrypted manifests: carried encrypted everywhere, decrypted only by the applier.

A document with a top-level ``sops:`` map is a SOPS file (https://github.com/getsops/sops).
driftbus takes it as it is — the publisher, the bus, the planner, the decision log, ``plan`` and
the status page only ever see its ciphertext — and the applier, the one component that writes,
decrypts it just before the server-side apply (docs/secrets.md; the shell that runs ``sops`` is
``services.applier.decrypt``).

Pure (no I/O):

* ``is_encrypted`` — does a document carry SOPS metadata;
* ``check`` — what a publish accepts: a ``v1`` Secret whose ``apiVersion``, ``kind`` and
  ``metadata`` are plaintext (``sops --encrypted-regex '^(data|stringData)$'``, as Flux
  documents) and name its namespace, whose MAC covers its plaintext too (no
  ``mac_only_encrypted``), with an age recipient. Other kinds are refused: only a Secret's
  values are masked in every diff and message driftbus prints (``core.diff``, ``core.scrub``),
  so a decrypted ConfigMap's would not be;
* ``carried`` — the document as published: its original ``metadata`` and field order recorded
  inside its ``sops`` map (``RECORD``), because SOPS's MAC covers every value of the file, the
  plaintext ones too, in their order, and the planner adds ownership labels and a default
  namespace to the metadata. ``sops`` ignores keys of its metadata it does not know; the
  applier removes the record anyway;
* ``bound`` — the binding: a document is applied only as the namespace and name it was
  encrypted with. The recorded metadata is what sops's MAC checks, the manifest's is what the
  planner checked against the tenant's limits and what would be written; they must name the
  same object, or another tenant could republish the file under a namespace of its own;
* ``other_key_groups`` — the key groups of a file that are not age (cloud KMS, Vault, PGP),
  which sops would try with the credentials of the node it runs on;
* ``as_encrypted`` — the file again from a manifest as the applier receives it (the recorded
  metadata and order back in place), ready for ``sops decrypt``;
* ``as_applied`` — the decrypted object with the planner's metadata (labels, namespace);
* ``reason`` — sops's error text made one short line, without the MACs it prints;
* ``comparable`` — what of a SOPS document can be compared with the live object (for a
  desired-vs-live difference): its plaintext fields, without ``sops`` and without the fields
  holding ciphertext.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

FIELD: Final = "sops"
RECORD: Final = "driftbus"
"""The key inside a document's ``sops`` map where the publisher records its original metadata
and field order (``carried``)."""
ENCRYPTED_VALUE: Final = re.compile(r"^ENC\[[A-Z0-9_]+,data:.*\]$", re.DOTALL)
"""How SOPS writes an encrypted value (``ENC[AES256_GCM,data:…,iv:…,tag:…,type:str]``)."""
HINT: Final = "encrypt only data and stringData: sops --encrypted-regex '^(data|stringData)$'"
OTHER_KEYS: Final = ("pgp", "kms", "gcp_kms", "hckms", "azure_kv", "hc_vault")
"""SOPS's key types other than age (sops v3.13): when the age key does not open a file, sops
tries each with whatever credentials the process that runs it can reach (instance metadata, a
gpg agent, a Vault agent)."""
MAX_REASON: Final = 400
_DIGEST = re.compile(r"\b[0-9A-Fa-f]{32,}\b")


class SopsError(ValueError):
    """A SOPS document that cannot be accepted or decrypted; the message says why (never a
    decrypted value)."""


def is_encrypted(obj: Any) -> bool:
    """Whether ``obj`` is a SOPS document: a mapping with a top-level ``sops`` field (no
    Kubernetes object has one)."""
    return isinstance(obj, Mapping) and FIELD in obj


def _encrypted_leaf(value: Any, path: str) -> str | None:
    """The path of the first encrypted value in ``value`` (``path`` names ``value``)."""
    if isinstance(value, str):
        return path if ENCRYPTED_VALUE.match(value) else None
    if isinstance(value, Mapping):
        for k, v in value.items():
            if (found := _encrypted_leaf(v, f"{path}.{k}")) is not None:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            if (found := _encrypted_leaf(v, f"{path}[{i}]")) is not None:
                return found
    return None


def check(obj: Mapping[str, Any]) -> None:
    """Refuse (``SopsError``) a SOPS document driftbus cannot carry: identifying fields
    encrypted, a kind other than a core ``v1`` Secret, no namespace named, metadata that is not
    SOPS's or whose MAC leaves the plaintext out, no age recipient. The caller names the file
    and document."""
    for field in ("apiVersion", "kind", "metadata"):
        if (found := _encrypted_leaf(obj.get(field), field)) is not None:
            raise SopsError(
                f"{found} is encrypted: driftbus must read apiVersion, kind and metadata to "
                f"key the object ({HINT})"
            )
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if (api_version, kind) != ("v1", "Secret"):
        raise SopsError(
            f"a SOPS-encrypted {kind or 'document'} ({api_version or 'no apiVersion'}): only "
            "Secrets (v1) may be encrypted, since only a Secret's values are masked wherever "
            "driftbus shows an object"
        )
    meta = obj.get(FIELD)
    if not isinstance(meta, Mapping) or not isinstance(meta.get("mac"), str):
        raise SopsError(
            "its top-level 'sops' field is not SOPS metadata (no 'mac'): encrypt the file with "
            "sops, or remove the field"
        )
    _mac_covers_metadata(meta)
    if not any(group.get("age") for group in _key_groups(meta)):
        others = other_key_groups(meta)
        raise SopsError(
            "it has no age recipient"
            + (f" (only {', '.join(others)})" if others else "")
            + ": driftbus's applier decrypts with an age key (sops --age RECIPIENT)"
        )
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or not metadata.get("namespace"):
        raise SopsError(
            "it names no metadata.namespace: an encrypted Secret is applied only in the "
            "namespace it was encrypted with (its MAC covers it), never in a default one "
            "(-n): name it in the file and encrypt it again"
        )


def _mac_covers_metadata(meta: Mapping[str, Any]) -> None:
    """Refuse a file whose MAC leaves its plaintext out (``sops --mac-only-encrypted``): its
    metadata could then be changed unnoticed, and with it where the Secret is applied."""
    if meta.get("mac_only_encrypted"):
        raise SopsError(
            "it was encrypted with mac_only_encrypted: its MAC does not cover its metadata, "
            "which names where it is applied; encrypt it again without --mac-only-encrypted"
        )


def _key_groups(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The key groups of SOPS metadata: those of ``key_groups`` (Shamir), or the metadata
    itself (one group, the keys at the top)."""
    groups = meta.get("key_groups")
    if isinstance(groups, list):
        return [g for g in groups if isinstance(g, Mapping)]
    return [meta]


def other_key_groups(meta: Mapping[str, Any]) -> list[str]:
    """The key types other than age that SOPS metadata ``meta`` names with at least one key
    (``OTHER_KEYS``, in that order), in any of its key groups."""
    groups = _key_groups(meta)
    return [k for k in OTHER_KEYS if any(group.get(k) for group in groups)]


def _named(metadata: Any) -> tuple[str, str]:
    """(namespace, name) of a metadata map ("" for what it does not name)."""
    if not isinstance(metadata, Mapping):
        return "", ""
    ns, name = metadata.get("namespace"), metadata.get("name")
    return (ns if isinstance(ns, str) else ""), (name if isinstance(name, str) else "")


def _object(kind: Any, ns: str, name: str) -> str:
    return f"{kind}/{ns}/{name}" if ns else f"{kind}/{name or '?'} (no namespace)"


def bound(manifest: Mapping[str, Any]) -> None:
    """Refuse (``SopsError``, naming both) a manifest that would be applied under another
    namespace or name than the one its document was encrypted with: the recorded metadata
    (``carried``), which sops's MAC checks, against the manifest's, which the planner checked
    against the tenant's limits and which is written. A manifest without a record is its own
    document (the MAC checks its metadata itself), so it is bound already. Checked before
    anything is decrypted."""
    meta = manifest.get(FIELD)
    if not isinstance(meta, Mapping):
        raise SopsError("its 'sops' field is not SOPS metadata")
    _mac_covers_metadata(meta)
    record = meta.get(RECORD)
    if not isinstance(record, Mapping):
        return
    kind = manifest.get("kind")
    was, now = _named(record.get("metadata")), _named(manifest.get("metadata"))
    if was != now or not was[0]:
        raise SopsError(
            f"it was encrypted as {_object(kind, *was)} and would be applied as "
            f"{_object(kind, *now)}: an encrypted Secret is applied only under the namespace "
            "and name it was encrypted with"
        )


def carried(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as published: its ``sops`` map also records the original ``metadata`` and the
    order of its fields (``RECORD``), which SOPS's MAC depends on. The input is not modified,
    and the record is a copy: what later changes the object's metadata leaves it as it was."""
    meta = {k: v for k, v in obj[FIELD].items() if k != RECORD}
    meta[RECORD] = {
        "metadata": copy.deepcopy(obj.get("metadata")),
        "fields": [k for k in obj if k != FIELD],
    }
    return {**obj, FIELD: meta}


def as_encrypted(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The SOPS document the publisher read, from ``manifest`` as the planner sent it (its
    metadata owned and maybe given a namespace): the recorded metadata and field order back in
    place, the record itself out. A manifest without a record (not published by ``load``) is
    passed on as it is: unless nothing was added to it, sops then finds its MAC changed."""
    meta = manifest.get(FIELD)
    if not isinstance(meta, Mapping):
        raise SopsError("its 'sops' field is not SOPS metadata")
    record = meta.get(RECORD)
    sops_meta = {k: v for k, v in meta.items() if k != RECORD}
    if not isinstance(record, Mapping):
        return {**{k: v for k, v in manifest.items() if k != FIELD}, FIELD: sops_meta}
    fields = record.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise SopsError(f"its sops.{RECORD} record is malformed")
    out: dict[str, Any] = {}
    for field in fields:
        if field == "metadata":
            out[field] = record.get("metadata")
        elif field in manifest:
            out[field] = manifest[field]
        else:
            raise SopsError(
                f"field {field} of the encrypted document was left out (an ignore rule?): "
                "fields of a SOPS document cannot be ignored"
            )
    out[FIELD] = sops_meta
    return out


def as_applied(manifest: Mapping[str, Any], decrypted: Mapping[str, Any]) -> dict[str, Any]:
    """What is applied: the decrypted fields with ``manifest``'s metadata (the ownership labels
    and namespace the planner gave it), no ``sops`` field."""
    out = {k: v for k, v in decrypted.items() if k != FIELD}
    out["metadata"] = manifest.get("metadata")
    return out


def comparable(manifest: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(``manifest`` without its ``sops`` field and the top-level fields holding ciphertext,
    those fields' names): the part of a SOPS document a difference to the live object can show
    (the ciphertext always differs from the live values, which only the applier may know)."""
    left_out = [k for k, v in manifest.items() if k != FIELD and _encrypted_leaf(v, k) is not None]
    kept = {k: v for k, v in manifest.items() if k != FIELD and k not in left_out}
    return kept, left_out


def reason(stderr: str, returncode: int | None) -> str:
    """sops's error as one line: whitespace and its tree drawing folded, the MACs it prints
    on a mismatch left out (a digest of the plaintext), cut to ``MAX_REASON`` characters."""
    text = " ".join(stderr.replace("|", " ").split())
    text = _DIGEST.sub("…", text)
    if not text:
        text = f"sops exited with status {returncode}"
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 1] + "…"
