"""The registry's ``401`` challenges, answered: parsing ``WWW-Authenticate``, and the bearer
token flow of the distribution spec's token authentication (``GET realm?service=…&scope=…``,
with basic credentials when there are some, as docker and helm do); and reading a body within a
byte limit. Used by ``oci_client`` only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from services.inputs.oci.reference import Credentials, OciAuthError, OciError, loopback

TOKEN_MAX_BYTES = 1024 * 1024
_PARAM = re.compile(r'([A-Za-z_]+)="([^"]*)"')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Bearer realm="…",service="…"`` → ("bearer", {realm, service})."""
    scheme, _, params = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in _PARAM.findall(params)}


async def fetch_token(
    session: aiohttp.ClientSession,
    registry: str,
    params: Mapping[str, str],
    scope: str,
    creds: Credentials | None,
    *,
    insecure: bool,
) -> str:
    """A bearer token for ``scope`` from the challenge's realm (``params``): over HTTPS, or
    plain HTTP to loopback or with ``insecure`` (credentials may go with the request)."""
    realm = params["realm"]
    host = realm.partition("://")[2].partition("/")[0]
    if not realm.startswith("https://") and not (
        realm.startswith("http://") and (insecure or loopback(host))
    ):
        raise OciAuthError(
            f"the registry {registry} sends for a token to {realm[:80]!r}: not HTTPS (plain "
            "HTTP only to loopback or with --insecure)"
        )
    # the scope the whole operation needs (a push: pull,push), and the one the challenge names
    # if it differs (a HEAD before an upload asks only pull): one token for both
    query = [("scope", scope)]
    if params.get("scope") and params["scope"] != scope:
        query.append(("scope", params["scope"]))
    if params.get("service"):
        query.append(("service", params["service"]))
    auth = aiohttp.BasicAuth(creds.username, creds.password) if creds else None
    who = f"user {creds.username!r}" if creds else "anonymous"
    try:
        async with session.get(realm, params=query, auth=auth) as resp:
            body = await read_limited(resp, TOKEN_MAX_BYTES, realm)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OciAuthError(f"the token service of {registry} ({realm[:80]}): {exc}") from None
    if status in (401, 403):
        raise OciAuthError(
            f"the token service of {registry} refused {who} ({status}): wrong user or "
            "password, or no right to the repository"
        )
    if status != 200:
        raise OciAuthError(f"the token service of {registry} answered {status}")
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    token = (doc.get("token") or doc.get("access_token")) if isinstance(doc, dict) else None
    if not isinstance(token, str) or not token:
        raise OciAuthError(f"the token service of {registry} answered with no token")
    return token


async def read_limited(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The body, refused past ``limit`` bytes (declared or read)."""
    where = what.partition("?")[0]
    if resp.content_length is not None and resp.content_length > limit:
        raise OciError(f"{where}: {resp.content_length:,} bytes, over the {limit:,}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise OciError(f"{where}: more than the {limit:,} bytes expected: refused")
        chunks.append(chunk)
    return b"".join(chunks)
