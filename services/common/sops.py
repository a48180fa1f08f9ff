"""SOPS-encrypted manifests: carried encrypted everywhere, decrypted only by the applier.

A document with a top-level ``sops:`` map is a SOPS file (https://github.com/getsops/sops).
driftbus takes it as it is — the publisher, the bus, the planner, the decision log, ``plan`` and
the status page only ever see its ciphertext — and the applier, the one component that writes,
decrypts it just before the server-side apply (docs/secrets.md).

Pure (no I/O):

* ``is_encrypted`` — does a document carry SOPS metadata;
* ``check`` — what a publish accepts: a ``v1`` Secret whose ``apiVersion``, ``kind`` and
  ``metadata`` are plaintext (``sops --encrypted-regex '^(data|stringData)$'``, as Flux
  documents), with an age recipient. Other kinds are refused: only a Secret's values are
  masked in every diff and message driftbus prints (``core.diff``, ``core.scrub``), so a
  decrypted ConfigMap's would not be;
* ``carried`` — the document as published: its original ``metadata`` and field order recorded
  inside its ``sops`` map (``RECORD``), because SOPS's MAC covers every value of the file, the
  plaintext ones too, in their order, and the planner adds ownership labels and a default
  namespace to the metadata. ``sops`` ignores keys of its metadata it does not know; the
  applier removes the record anyway;
* ``as_encrypted`` — the file again from a manifest as the applier receives it (the recorded
  metadata and order back in place), ready for ``sops decrypt``;
* ``as_applied`` — the decrypted object with the planner's metadata (labels, namespace);
* ``reason`` — sops's error text made one short line, without the MACs it prints;
* ``comparable`` — what of a SOPS document can be compared with the live object (for a
  desired-vs-live difference): its plaintext fields, without ``sops`` and without the fields
  holding ciphertext.

Shell: ``Decryptor`` runs the real ``sops`` binary (``binaries.require("sops")``, built from
its pinned module) with the document on standard input and the age key file named in its
environment (``SOPS_AGE_KEY_FILE``), never on its command line. There is no maintained Python
implementation of SOPS (the original Python ``sops`` package was retired in favour of the Go
one in 2019), and a reimplementation of its format, MAC and key groups would be ours to keep
right: the binary is the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import orjson

from services.common import binaries

FIELD: Final = "sops"
RECORD: Final = "driftbus"
"""The key inside a document's ``sops`` map where the publisher records its original metadata
and field order (``carried``)."""
ENCRYPTED_VALUE: Final = re.compile(r"^ENC\[[A-Z0-9_]+,data:.*\]$", re.DOTALL)
"""How SOPS writes an encrypted value (``ENC[AES256_GCM,data:…,iv:…,tag:…,type:str]``)."""
HINT: Final = "encrypt only data and stringData: sops --encrypted-regex '^(data|stringData)$'"
DECRYPT_TIMEOUT: Final = 60.0
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
    encrypted, a kind other than a core ``v1`` Secret, metadata that is not SOPS's, no age
    recipient. The caller names the file and document."""
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
    age = meta.get("age")
    if not isinstance(age, list) or not any(isinstance(r, Mapping) for r in age):
        others = sorted(k for k in ("pgp", "kms", "gcp_kms", "azure_kv", "hc_vault") if meta.get(k))
        raise SopsError(
            "it has no age recipient"
            + (f" (only {', '.join(others)})" if others else "")
            + ": driftbus's applier decrypts with an age key (sops --age RECIPIENT)"
        )


def carried(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as published: its ``sops`` map also records the original ``metadata`` and the
    order of its fields (``RECORD``), which SOPS's MAC depends on. The input is not modified."""
    meta = {k: v for k, v in obj[FIELD].items() if k != RECORD}
    meta[RECORD] = {
        "metadata": obj.get("metadata"),
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


class Decryptor:
    """Decrypts SOPS documents with the age key in ``key_file`` by running ``sops``. The
    plaintext exists only in the returned object (and the pipe it came through)."""

    def __init__(self, key_file: str, *, binary: Path | None = None) -> None:
        self.key_file = key_file
        self._binary = binary

    def binary(self) -> Path:
        if self._binary is None:
            try:
                self._binary = binaries.require("sops")
            except binaries.AssetError as exc:
                raise SopsError(str(exc)) from None
        return self._binary

    async def decrypt(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """``manifest`` (as the applier receives it) decrypted and ready to apply
        (``as_applied``), or ``SopsError`` with sops's reason: no key configured, a key that
        is not a recipient, a changed file (MAC mismatch), a broken value."""
        if not self.key_file:
            raise SopsError(
                "this applier has no age key to decrypt it (--sops-age-key-file, or "
                "SOPS_AGE_KEY_FILE in its environment)"
            )
        document = orjson.dumps(as_encrypted(manifest))
        out = await self._run(document)
        try:
            decrypted = orjson.loads(out)
        except orjson.JSONDecodeError:
            raise SopsError("sops did not answer with a JSON document") from None
        if not isinstance(decrypted, dict):
            raise SopsError("sops did not answer with a JSON object")
        return as_applied(manifest, decrypted)

    async def _run(self, document: bytes) -> bytes:
        argv = [
            str(self.binary()),
            "decrypt",
            "--input-type",
            "json",
            "--output-type",
            "json",
        ]
        # only the key file: no HOME (no ~/.config/sops/age/keys.txt of whoever runs us), no
        # keyservice, no cloud credentials; cwd "/" so no .sops.yaml is picked up
        env = {"SOPS_AGE_KEY_FILE": self.key_file, "PATH": os.defpath}
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd="/",
            )
        except OSError as exc:
            raise SopsError(f"sops could not be started: {exc}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(document), DECRYPT_TIMEOUT)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise SopsError(f"sops did not answer within {DECRYPT_TIMEOUT:.0f} s") from None
        if proc.returncode != 0:
            raise SopsError(reason(err.decode(errors="replace"), proc.returncode))
        return out
