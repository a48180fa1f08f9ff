"""Who may read the status page: a token, and only under a name of this machine.

- **Token.** The page serves nobody without it, as Jupyter does: ``driftbus up`` (or ``driftbus
  ui``) prints ``http://127.0.0.1:8787/?token=…``; opening it sets an HTTP-only, same-site
  cookie and redirects to the same page without the token in its address. Scripts may send
  ``Authorization: Bearer …`` or ``?token=`` on any path instead. The token comes from
  ``DRIFTBUS_UI_TOKEN`` (never a flag: flags show in ``ps``), else a fresh random one.
- **Host header.** A page on loopback is still reachable from a browser tab on another site by
  DNS rebinding (the attacker's name resolving to 127.0.0.1); such a request carries the
  attacker's name in ``Host``. Only loopback names, the bound address and ``--allow-host`` names
  are served; any other is refused (403) before the token is even looked at.
- **Tenant.** ``--tenant T`` pins the page to tenant T's bundles on every endpoint; a request
  naming another tenant is refused (403). Otherwise ``?tenant=`` filters the view.
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import ipaddress
import os
import secrets

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from services.ui import UI_PORT

TOKEN_ENV = "DRIFTBUS_UI_TOKEN"  # noqa: S105 - the variable's name, not a token
LOOPBACK_NAMES = frozenset(("localhost", "127.0.0.1", "::1", "ip6-localhost"))


@dataclasses.dataclass(frozen=True)
class PageSettings:
    host: str = "127.0.0.1"
    port: int = UI_PORT
    token: str = dataclasses.field(default="", repr=False)
    allow_hosts: tuple[str, ...] = ()
    """Names besides loopback and the bound address a browser may reach the page by."""
    tenant: str | None = None
    """Pinned: only this tenant's bundles, on every endpoint ("" the platform's)."""

    @classmethod
    def load(cls, args: argparse.Namespace) -> PageSettings:
        return cls(
            host=args.host,
            port=args.port,
            token=os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(32),
            allow_hosts=tuple(getattr(args, "allow_host", None) or ()),
            tenant=getattr(args, "tenant", None),
        )

    @property
    def cookie(self) -> str:
        """Per port: cookies are not kept apart by port, two pages on one host would mix."""
        return f"driftbus-ui-{self.port}"

    def url(self) -> str:
        """The address to open, token included (printed once, as Jupyter does)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/?token={self.token}"

    def allowed_host(self, name: str | None) -> bool:
        if not name:
            return False
        name = name.strip("[]").rstrip(".").lower()
        allowed = {*LOOPBACK_NAMES, *(h.lower() for h in self.allow_hosts)}
        if not _unspecified(self.host):
            allowed.add(self.host.strip("[]").lower())
        if name in allowed:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _same(given: str | None, token: str) -> bool:
    return bool(given) and hmac.compare_digest(str(given).encode(), token.encode())


def middleware(page: PageSettings) -> Middleware:
    """The aiohttp middleware enforcing the Host check, then the token."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not page.allowed_host(request.url.host):
            raise web.HTTPForbidden(
                text=f"driftbus ui: Host {request.host!r} is not served (DNS rebinding?); "
                "start it with --allow-host NAME to reach it by that name\n"
            )
        in_query = request.query.get("token")
        if _same(in_query, page.token) and request.method == "GET" and request.path == "/":
            rest = {k: v for k, v in request.query.items() if k != "token"}
            found = web.HTTPFound(request.rel_url.with_query(rest))
            found.set_cookie(page.cookie, page.token, httponly=True, samesite="Strict", path="/")
            raise found
        bearer = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not any(
            _same(t, page.token) for t in (request.cookies.get(page.cookie), bearer, in_query)
        ):
            raise web.HTTPUnauthorized(
                text="driftbus ui: open the address with ?token=… that `driftbus up` (or "
                "`driftbus ui`) printed\n"
            )
        return await handler(request)

    return guard


def tenant_of(request: web.Request, page: PageSettings) -> str | None:
    """The tenant whose bundles the request may see (None: all): the pinned one, else
    ``?tenant=``; a request for another tenant than the pinned one is refused."""
    asked = request.query.get("tenant")
    if page.tenant is None:
        return asked
    if asked is not None and asked != page.tenant:
        raise web.HTTPForbidden(text=f"this page shows tenant {page.tenant!r} only\n")
    return page.tenant


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name (besides loopback and --host) browsers may reach the page by (repeatable)",
    )
    p.add_argument(
        "--tenant",
        help="show only this tenant's bundles, on every endpoint ('' for the platform's)",
    )


__all__ = ["TOKEN_ENV", "PageSettings", "add_arguments", "middleware", "tenant_of"]
