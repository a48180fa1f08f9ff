"""Decrypting a SOPS-encrypted Secret just before its apply: with whose key, and by ``sops``.

Which key (``Keys.key_for``, pure): with ``--sops-key-dir`` a tenant's bundle is decrypted with
its own key only, the file ``TENANT.agekey`` of that directory, and ``--sops-age-key-file`` (the
platform's key) only for platform bundles; a tenant's file encrypted for another tenant's key,
or for the platform's, then fails. Without a key directory the one key decrypts every bundle's
Secrets, and only the binding (``sops.bound``: the namespace and name a file was encrypted with
are where it is applied) and the tenants' namespace limits separate tenants. The tenant is the
bundle's, which the planner took from the subject its publisher's credentials allow.

Which key groups (``Keys.others_allowed``): a file naming keys other than age (cloud KMS,
Vault, PGP: ``sops.OTHER_KEYS``), which sops tries when the age key fails, is refused unless
``--sops-non-age-keys`` lets sops try them with this node's credentials, and never for a
tenant's bundle when tenants have keys of their own (the node's credentials are the
platform's, as its key is).

Shell: ``Decryptor`` runs the real ``sops`` binary (``binaries.require("sops")``, built from
its pinned module) with the document on standard input and the key file named in its
environment (``SOPS_AGE_KEY_FILE``), never on its command line. There is no maintained Python
implementation of SOPS (the original Python ``sops`` package was retired in favour of the Go
one in 2019), and a reimplementation of its format, MAC and key groups would be ours to keep
right: the binary is the reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import orjson

from schemas.subjects import split_bundle
from services.common import binaries
from services.inputs import sops
from services.inputs.sops import SopsError

DECRYPT_TIMEOUT: Final = 60.0
KEY_SUFFIX: Final = ".agekey"
"""A tenant's key file in ``--sops-key-dir`` is ``TENANT.agekey`` (Flux's name for an age
identity in a decryption Secret, so one Secret mounted as the directory holds them all)."""
CLOUD_ENV: Final = (
    "AWS_", "GOOGLE_", "CLOUDSDK_", "HUAWEICLOUD_", "AZURE_", "VAULT_", "GNUPGHOME",
)  # fmt: skip
"""The variables of the applier's environment sops is given when it may try other key groups:
the credentials of the cloud SDKs, Vault and gpg it links. Never ``HOME`` (age and SSH keys)."""


@dataclasses.dataclass(frozen=True)
class Keys:
    """Where an applier's age keys are (its settings)."""

    platform: str = ""
    """``--sops-age-key-file``: every bundle's key, or with ``tenant_dir`` the platform's."""
    tenant_dir: str = ""
    """``--sops-key-dir``: one ``TENANT.agekey`` per tenant."""
    non_age: bool = False
    """``--sops-non-age-keys``: sops may try the keys of ``sops.OTHER_KEYS``."""

    def key_for(self, bundle: str) -> str:
        """The key file that decrypts ``bundle``'s Secrets, or ``SopsError`` saying why there
        is none."""
        tenant, _ = split_bundle(bundle)
        if self.tenant_dir and tenant:
            if "/" in tenant or tenant.startswith("."):
                raise SopsError(f"tenant {tenant!r} cannot name a key file")
            return str(Path(self.tenant_dir) / f"{tenant}{KEY_SUFFIX}")
        if not self.platform:
            raise SopsError(
                "this applier has no age key to decrypt it (--sops-age-key-file, or "
                "SOPS_AGE_KEY_FILE in its environment)"
                + (" for platform bundles" if self.tenant_dir else "")
            )
        return self.platform

    def others_allowed(self, bundle: str) -> bool:
        """Whether sops may try ``bundle``'s files' key groups other than age with this node's
        credentials."""
        return self.non_age and not (self.tenant_dir and split_bundle(bundle)[0])

    def refuse_others(self, bundle: str, meta: Mapping[str, Any]) -> None:
        """``SopsError`` naming the key groups other than age that ``meta`` names, unless
        they may be tried."""
        if not (others := sops.other_key_groups(meta)) or self.others_allowed(bundle):
            return
        why = (
            "a tenant's Secrets are decrypted with its own age key only"
            if self.non_age
            else "enable them with --sops-non-age-keys"
        )
        raise SopsError(
            f"it names {', '.join(others)} keys, which sops would try with this node's "
            f"credentials: refused ({why}); encrypt it for age only (sops updatekeys)"
        )


class Decryptor:
    """Decrypts SOPS documents with the age key ``keys`` give their bundle by running ``sops``.
    The plaintext exists only in the returned object (and the pipe it came through)."""

    def __init__(self, keys: Keys, *, binary: Path | None = None) -> None:
        self.keys = keys
        self._binary = binary

    def binary(self) -> Path:
        if self._binary is None:
            try:
                self._binary = binaries.require("sops")
            except binaries.AssetError as exc:
                raise SopsError(str(exc)) from None
        return self._binary

    async def decrypt(self, manifest: Mapping[str, Any], bundle: str) -> dict[str, Any]:
        """``manifest`` (as the applier receives it, for ``bundle``) decrypted and ready to
        apply (``as_applied``), or ``SopsError`` with the reason: applied as another object
        than it was encrypted as, key groups other than age, no key for the bundle, a key
        that is not a recipient, a changed file (MAC mismatch), a broken value."""
        sops.bound(manifest)
        self.keys.refuse_others(bundle, manifest[sops.FIELD])
        key_file = self.keys.key_for(bundle)
        if self.keys.tenant_dir and not os.access(key_file, os.R_OK):
            raise SopsError(
                f"this applier has no age key for tenant {split_bundle(bundle)[0]} "
                f"({Path(key_file).name} in --sops-key-dir); its Secrets are decrypted with "
                "its own key only"
            )
        document = orjson.dumps(sops.as_encrypted(manifest))
        out = await self._run(document, key_file, others=self.keys.others_allowed(bundle))
        try:
            decrypted = orjson.loads(out)
        except orjson.JSONDecodeError:
            raise SopsError("sops did not answer with a JSON document") from None
        if not isinstance(decrypted, dict):
            raise SopsError("sops did not answer with a JSON object")
        return sops.as_applied(manifest, decrypted)

    async def _run(self, document: bytes, key_file: str, *, others: bool) -> bytes:
        argv = [
            str(self.binary()),
            "decrypt",
            "--input-type",
            "json",
            "--output-type",
            "json",
        ]
        # only the key file: no HOME (no ~/.config/sops/age/keys.txt or ~/.ssh key of whoever
        # runs us), no keyservice, and cloud credentials only when other key groups may be
        # tried; cwd "/" so no .sops.yaml is picked up
        env = {"SOPS_AGE_KEY_FILE": key_file, "PATH": os.defpath}
        if others:
            env |= {k: v for k, v in os.environ.items() if k.startswith(CLOUD_ENV)}
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
            raise SopsError(sops.reason(err.decode(errors="replace"), proc.returncode))
        return out
