"""The status page's guard (services/ui/guard.py) on a real aiohttp server: the token and its
cookie, the Host names served, and a page pinned to one tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.ui import guard

TOKEN = "t0ken-for-tests"
PAGE = web.AppKey("page", guard.PageSettings)


async def _tenant(request: web.Request) -> web.Response:
    page = request.app[PAGE]
    return web.json_response({"tenant": guard.tenant_of(request, page)})


async def _client(page: guard.PageSettings) -> TestClient[web.Request, web.Application]:
    app = web.Application(middlewares=[guard.middleware(page)])
    app[PAGE] = page
    app.router.add_get("/", _tenant)
    app.router.add_get("/api/state", _tenant)
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


@pytest.fixture
async def page() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    client = await _client(guard.PageSettings(token=TOKEN, allow_hosts=("driftbus.lan",)))
    try:
        yield client
    finally:
        await client.close()


async def test_the_token_opens_the_page_once_then_the_cookie_does(
    page: TestClient[web.Request, web.Application],
) -> None:
    assert (await page.get("/")).status == 401
    assert (await page.get("/", headers={"Authorization": "Bearer nope"})).status == 401
    first = await page.get(f"/?token={TOKEN}&tenant=a", allow_redirects=False)
    assert first.status == 302
    assert first.headers["Location"] == "/?tenant=a"  # the token leaves the address bar
    again = await page.get("/api/state")  # the client keeps the cookie
    assert again.status == 200
    bearer = await page.get("/api/state", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status == 200


@pytest.mark.parametrize(
    ("host", "served"),
    [
        ("127.0.0.1:8787", True),
        ("localhost", True),
        ("[::1]:8787", True),
        ("127.1.2.3", True),
        ("driftbus.lan:8787", True),  # --allow-host
        ("DRIFTBUS.LAN.", True),
        ("attacker.example", False),
        ("attacker.example:8787", False),
        ("localhost.attacker.example", False),
        ("192.168.1.10", False),
    ],
)
async def test_only_this_machine_s_names_are_served(
    page: TestClient[web.Request, web.Application], host: str, served: bool
) -> None:
    got = await page.get("/api/state", headers={"Host": host, "Authorization": f"Bearer {TOKEN}"})
    assert got.status == (200 if served else 403), (host, await got.text())


async def test_a_page_pinned_to_a_tenant_shows_no_other() -> None:
    client = await _client(guard.PageSettings(token=TOKEN, tenant="team-a"))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        got = await client.get("/api/state", headers=auth)
        assert (await got.json())["tenant"] == "team-a"
        assert (await client.get("/api/state?tenant=team-a", headers=auth)).status == 200
        for other in ("team-b", ""):
            got = await client.get(f"/api/state?tenant={other}", headers=auth)
            assert got.status == 403, other
    finally:
        await client.close()


def test_the_printed_address_carries_the_token_and_the_repr_does_not() -> None:
    page = guard.PageSettings(host="127.0.0.1", port=8787, token=TOKEN)
    assert page.url() == f"http://127.0.0.1:8787/?token={TOKEN}"
    assert TOKEN not in repr(page)
    assert guard.PageSettings(host="::1", port=1, token="x").url() == "http://[::1]:1/?token=x"
