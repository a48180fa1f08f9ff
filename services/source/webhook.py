"""The push webhook of ``driftbus source``: ``POST /hook`` polls every source now,
``POST /hook/BUNDLE`` the one of that bundle.

With a secret, a POST must prove it (GitHub's ``X-Hub-Signature-256``, GitLab's
``X-Gitlab-Token`` or ``Authorization: Bearer``). Without one, only a loopback peer (a reverse
proxy on the same host) may trigger a poll: anyone else gets 403, and the service warns at start
when it listens beyond loopback with no secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
from collections.abc import Sequence
from typing import Any, Protocol

from aiohttp import web

from services.source.specs import SourceSpec


class Pollable(Protocol):
    """What the webhook needs of a followed source (``service.Follower``): the bundle it
    publishes, and the event that makes it poll now."""

    @property
    def spec(self) -> SourceSpec: ...

    @property
    def trigger(self) -> asyncio.Event: ...


def webhook_app(followers: Sequence[Pollable], secret: str) -> web.Application:
    """``POST /hook`` polls every source now, ``POST /hook/BUNDLE`` the one of that bundle.
    With no ``secret``, only a loopback peer may ask."""

    async def hook(request: web.Request) -> web.Response:
        if not secret and not loopback(request.remote or ""):
            return web.Response(
                status=403, text="no webhook secret is set: only loopback may trigger a poll\n"
            )
        body = await request.read()
        if secret and not _proven(request.headers, body, secret):
            return web.Response(status=401, text="webhook secret not proven\n")
        bundle = request.match_info.get("bundle")
        hit = [f for f in followers if bundle in (None, f.spec.bundle)]
        if not hit:
            return web.Response(status=404, text=f"no source publishes bundle {bundle}\n")
        for f in hit:
            f.trigger.set()
        return web.Response(status=202, text=f"polling {len(hit)} source(s)\n")

    app = web.Application()
    app.router.add_post("/hook", hook)
    app.router.add_post("/hook/{bundle}", hook)
    return app


def loopback(host: str) -> bool:
    """Whether ``host`` (an address, or a name to listen on) is loopback only."""
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _proven(headers: Any, body: bytes, secret: str) -> bool:
    signature = headers.get("X-Hub-Signature-256", "")
    if signature.startswith("sha256="):
        want = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(signature.removeprefix("sha256=").encode(), want.encode())
    token = headers.get("X-Gitlab-Token") or headers.get("Authorization", "").removeprefix(
        "Bearer "
    )
    # bytes: compare_digest refuses non-ASCII str, and a header is whatever a client sends
    return bool(token) and hmac.compare_digest(token.encode(), secret.encode())
