"""A registry client: the OCI distribution API (manifests, blobs, tags, uploads) over aiohttp.

Why our own, in ~300 lines: aiohttp is the project's HTTP library (the Kubernetes client and
every service speak it), and the Python OCI clients are either synchronous (oras-py, on
``requests``: a thread per pull inside ``driftbus source``'s event loop) or unmaintained; the
API driftbus needs is six requests. What it guarantees:

* **Authentication**: anonymous first; a ``401`` with ``WWW-Authenticate: Basic`` is answered
  with the credentials (``oci.OciAccess``: ``--oci-username``/``--oci-password-file`` or a
  docker ``config.json``); ``Bearer realm=…,service=…,scope=…`` with a token fetched from the
  realm (with those credentials, if any) per repository scope, as docker and helm do. A refusal
  is an ``OciAuthError`` naming the registry and the user, never the password.
* **Transport**: HTTPS; plain HTTP only to a loopback registry (tried after HTTPS fails) or
  with ``insecure``; a token realm is contacted over plain HTTP only under the same rule. A
  ``Location`` or ``Link`` the registry names on another host is refused; a blob's redirect (to
  the registry's storage) is followed, and aiohttp sends no credentials to another origin.
* **Integrity**: every manifest and blob read is hashed, and refused unless its sha256 is the
  digest it was asked by (a manifest asked by tag: the digest the registry names, if it names
  one, must match what arrived); a blob longer than its descriptor says is cut off and refused.
* **Size**: a manifest at most 4 MiB (distribution's own limit); a blob at most the caller's
  limit, checked on ``Content-Length`` and again while reading.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Self

import aiohttp
import orjson

from services.inputs.documents import TransientInputError
from services.inputs.oci.auth import fetch_token, parse_challenge, read_limited
from services.inputs.oci.reference import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    Credentials,
    OciAccess,
    OciAuthError,
    OciError,
    Reference,
    loopback,
)

MANIFEST_MAX_BYTES = 4 * 1024 * 1024
TAGS_MAX = 10_000
"""Tags read from one repository: enough for any release history, bounded for a hostile one."""
_PAGE = 1000


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclasses.dataclass(frozen=True)
class Fetched:
    """A manifest as it arrived, checked: its digest, media type and bytes."""

    digest: str
    media_type: str
    body: bytes


def pull_scope(repository: str, *, push: bool = False) -> str:
    return f"repository:{repository}:{'pull,push' if push else 'pull'}"


class RegistryClient:
    """One registry, one session: ``async with RegistryClient(host, access) as r``."""

    def __init__(self, registry: str, access: OciAccess, *, timeout: float = 120.0) -> None:
        self.registry = registry
        self._access = access
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=30)
        self._session: aiohttp.ClientSession | None = None
        self._base = ""
        self._credentials: Credentials | None = None
        self._credentials_read = False
        self._basic = False
        self._tokens: dict[str, str] = {}
        self._renewed: set[str] = set()

    async def __aenter__(self) -> Self:
        self._creds()  # flags that cannot work fail now, not on the first challenge
        self._session = aiohttp.ClientSession(timeout=self._timeout)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    # --- what callers ask ----------------------------------------------------------------

    async def manifest(self, ref: Reference) -> Fetched:
        """The manifest ``ref`` names (by digest if it has one), its digest verified."""
        accept = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST))
        headers, body = await self._call(
            "GET",
            f"/v2/{ref.repository}/manifests/{ref.reference}",
            what=str(ref),
            scope=pull_scope(ref.repository),
            headers={"Accept": accept},
            limit=MANIFEST_MAX_BYTES,
        )
        digest = sha256(body)
        if ref.digest and digest != ref.digest:
            raise OciError(
                f"{ref}: the manifest that arrived hashes to {digest}, not the digest asked "
                "for: refused (tampered with or corrupted)"
            )
        claimed = headers.get("Docker-Content-Digest", "")
        if claimed and claimed != digest:
            raise OciError(
                f"{ref}: the registry names the manifest {claimed} but what arrived hashes to "
                f"{digest}: refused (tampered with or corrupted)"
            )
        media = headers.get("Content-Type", "").partition(";")[0].strip()
        return Fetched(digest, media, body)

    async def blob(self, ref: Reference, digest: str, size: int, *, limit: int) -> bytes:
        """The blob ``digest`` of ``ref``'s repository, at most ``size`` (its descriptor's) and
        ``limit`` bytes, refused unless it hashes to ``digest``."""
        what = f"{ref.base}@{digest} (blob)"
        if size > limit:
            raise OciError(f"{what}: {size:,} bytes, over the {limit:,}-byte limit")
        _, body = await self._call(
            "GET",
            f"/v2/{ref.repository}/blobs/{digest}",
            what=what,
            scope=pull_scope(ref.repository),
            limit=size,
        )
        got = sha256(body)
        if got != digest or len(body) != size:
            raise OciError(
                f"{what}: what arrived ({len(body):,} bytes) hashes to {got}, not the digest its "
                "manifest names: refused (tampered with or corrupted)"
            )
        return body

    async def tags(self, ref: Reference) -> list[str]:
        """Every tag of ``ref``'s repository (paginated, at most ``TAGS_MAX``)."""
        out: list[str] = []
        path = f"/v2/{ref.repository}/tags/list?n={_PAGE}"
        while path and len(out) < TAGS_MAX:
            headers, body = await self._call(
                "GET",
                path,
                what=f"{ref.base} (tags)",
                scope=pull_scope(ref.repository),
                limit=MANIFEST_MAX_BYTES,
            )
            try:
                doc: Any = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise OciError(f"{ref.base}: the tag list is not JSON") from None
            tags = doc.get("tags") if isinstance(doc, dict) else None
            out += [t for t in tags or () if isinstance(t, str)]
            path = _next_page(headers.get("Link", ""))
        return out[:TAGS_MAX]

    async def push_blob(self, ref: Reference, data: bytes) -> str:
        """Upload ``data`` to ``ref``'s repository unless it is there; its digest."""
        digest = sha256(data)
        scope = pull_scope(ref.repository, push=True)
        status, _, _ = await self._send(
            "HEAD", f"/v2/{ref.repository}/blobs/{digest}", scope=scope, limit=0
        )
        if status == 200:
            return digest
        headers, _ = await self._call(
            "POST",
            f"/v2/{ref.repository}/blobs/uploads/",
            what=f"{ref.base} (upload)",
            scope=scope,
            ok=(202,),
            limit=MANIFEST_MAX_BYTES,
        )
        location = headers.get("Location", "")
        if not location:
            raise OciError(f"{ref.base}: the registry started an upload but named no location")
        sep = "&" if "?" in location else "?"
        await self._call(
            "PUT",
            f"{location}{sep}digest={digest}",
            what=f"{ref.base}@{digest} (upload)",
            scope=scope,
            ok=(201,),
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            limit=MANIFEST_MAX_BYTES,
        )
        return digest

    async def put_manifest(self, ref: Reference, body: bytes, media_type: str) -> str:
        """Write ``body`` as the manifest tagged ``ref.tag``; its digest."""
        digest = sha256(body)
        headers, _ = await self._call(
            "PUT",
            f"/v2/{ref.repository}/manifests/{ref.tag}",
            what=str(ref),
            scope=pull_scope(ref.repository, push=True),
            ok=(201,),
            data=body,
            headers={"Content-Type": media_type},
            limit=MANIFEST_MAX_BYTES,
        )
        claimed = headers.get("Docker-Content-Digest", "")
        if claimed and claimed != digest:
            raise OciError(f"{ref}: the registry stored the manifest as {claimed}, not {digest}")
        return digest

    # --- requests ---------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        what: str,
        scope: str,
        limit: int,
        ok: tuple[int, ...] = (200,),
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Mapping[str, str], bytes]:
        status, got, body = await self._send(
            method, path, scope=scope, limit=limit, data=data, headers=headers
        )
        if status in ok:
            return got, body
        why = _error_text(body)
        if status == 404:
            raise OciError(f"{what}: not found in the registry{why}")
        if status == 401:
            raise OciAuthError(f"{what}: the registry {self.registry} refused the request{why}")
        if status == 403:
            who = self._credentials.username if self._credentials else "anonymous"
            raise OciAuthError(f"{what}: access denied to {who} by {self.registry}{why}")
        if status == 429 or status >= 500:
            raise TransientInputError(f"{what}: the registry answered {status}{why}")
        raise OciError(f"{what}: the registry answered {status}{why}")

    async def _send(
        self,
        method: str,
        path: str,
        *,
        scope: str,
        limit: int,
        data: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One request, its ``401`` challenges answered (at most twice)."""
        assert self._session is not None, "use RegistryClient in `async with`"
        base = await self._base_url()
        url = path if path.startswith(("http://", "https://")) else base + path
        if url.partition("://")[2].partition("/")[0] != self.registry:
            # a Location or Link naming another host: our credentials go to no one else
            raise OciError(f"{self.registry}: the registry sends to another host: {url[:80]!r}")
        try:
            for attempt in range(3):
                sent = dict(headers or {})
                if auth := self._authorization(scope):
                    sent["Authorization"] = auth
                async with self._session.request(method, url, headers=sent, data=data) as resp:
                    if resp.status == 401 and attempt < 2:
                        challenge = resp.headers.get("WWW-Authenticate", "")
                        await self._answer(challenge, scope, sent_auth=bool(auth))
                        continue
                    body = b"" if method == "HEAD" else await read_limited(resp, limit, url)
                    return resp.status, resp.headers, body
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientInputError(
                f"{self.registry}: {method} {path.partition('?')[0]} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        raise AssertionError("unreachable")  # the third round returns or raises

    async def _base_url(self) -> str:
        """``https://host``; ``http://host`` with ``insecure``, or for a loopback registry
        that does not speak TLS."""
        if self._base:
            return self._base
        assert self._session is not None
        if self._access.insecure:
            self._base = f"http://{self.registry}"
        elif loopback(self.registry):
            try:
                async with self._session.get(f"https://{self.registry}/v2/"):
                    self._base = f"https://{self.registry}"
            except (aiohttp.ClientError, TimeoutError):
                self._base = f"http://{self.registry}"
        else:
            self._base = f"https://{self.registry}"
        return self._base

    def _creds(self) -> Credentials | None:
        if not self._credentials_read:
            self._credentials = self._access.credentials(self.registry)
            self._credentials_read = True
        return self._credentials

    def _authorization(self, scope: str) -> str:
        if token := self._tokens.get(scope):
            return f"Bearer {token}"
        creds = self._creds() if self._basic else None
        if creds is not None:
            pair = f"{creds.username}:{creds.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return ""

    async def _answer(self, header: str, scope: str, *, sent_auth: bool) -> None:
        """Make the next request able to pass the challenge ``header``, or say why not."""
        scheme, params = parse_challenge(header)
        creds = self._creds()
        if scheme == "basic":
            if creds is None:
                raise OciAuthError(
                    f"the registry {self.registry} asks for credentials: give --oci-username "
                    "and --oci-password-file, or log in (a docker config.json entry)"
                )
            if sent_auth:
                raise OciAuthError(
                    f"the registry {self.registry} refused the credentials of user "
                    f"{creds.username!r} (401): wrong user or password"
                )
            self._basic = True
            return
        if scheme != "bearer" or not params.get("realm"):
            raise OciAuthError(
                f"the registry {self.registry} asks for authentication driftbus does not "
                f"speak: {header[:80]!r}"
            )
        if sent_auth and scope in self._tokens:
            if scope in self._renewed:  # a fresh token refused too: not a matter of time
                who = f"user {creds.username!r}" if creds else "anonymous"
                raise OciAuthError(
                    f"the registry {self.registry} refused the token issued to {who} for {scope}"
                )
            self._renewed.add(scope)  # it may have expired: one fresh token
        assert self._session is not None
        self._tokens[scope] = await fetch_token(
            self._session, self.registry, params, scope, creds, insecure=self._access.insecure
        )


def _error_text(body: bytes) -> str:
    """The registry's first error message (``{"errors": [{"code", "message"}]}``), trimmed."""
    try:
        doc: Any = orjson.loads(body)
        first = doc["errors"][0]
        return f" ({first.get('code', '')}: {str(first.get('message', ''))[:200]})"
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        return ""


def _next_page(link: str) -> str:
    """The path of ``Link: </v2/…?last=x&n=…>; rel="next"``, or ""."""
    match = re.match(r'\s*<(/v2/[^>]+)>\s*;\s*rel="?next"?', link)
    return match.group(1) if match else ""
