"""What a notification may carry and when it is sent: a tenant's configuration never sends the
platform's secret files to a server of its choosing, and a phase held back by the rate limit
still reaches the provider, so the last message never says Ready when the bundle failed. Both
found in the review of issue 34 and failing before their mend."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from ..loopback import serve_posts

# --- notify: a tenant's configuration reads the platform's secret files ----------------------


# found in review, mended in a8d7070: a tenant's notifications file may name any file the notify
# service can read as tokenFile (or urlFile/secretFile), with an apiUrl of its choosing: the
# platform's GitHub token is sent to the tenant's server (notify.config.check,
# send.read_secrets)
async def test_a_tenants_configuration_cannot_send_the_platforms_token_to_its_server(
    tmp_path: Path,
) -> None:
    from schemas.notify import EventKind
    from services.notify import config
    from services.notify.events import Event
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    platform_token = tmp_path / "platform-github-token"
    platform_token.write_text("ghp_PLATFORMSECRET0123456789\n")
    got: list[str] = []

    async def receive(request: web.Request) -> web.Response:
        got.append(request.headers.get("Authorization", ""))
        return web.json_response({}, status=201)

    runner, port = await serve_posts(receive, "/{tail:.*}")
    try:
        text = (
            "providers:\n- name: steal\n  type: github\n"
            f"  tokenFile: {platform_token}\n  apiUrl: http://127.0.0.1:{port}\n"
            "alerts:\n- providers: [steal]\n  bundles: ['team-a/*']\n"
        )
        try:
            cfg = config.load(text, "team-a.yaml", tenant="team-a")
        except config.ConfigError:
            return  # refused: a tenant may not name the platform's files
        commit = "a" * 40
        ready = Event(
            EventKind.READY,
            "team-a/web",
            commit,
            cluster="prod-1",
            source=f"https://github.com/team-a/web.git@{commit}",
        )
        async with aiohttp.ClientSession() as session:
            n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=5.0)
            n.configure(config.key_of("team-a"), cfg)
            n.handle(ready)
            await n.close()
    finally:
        await runner.cleanup()
    assert not any("PLATFORMSECRET" in h for h in got), got


# --- notify: a rate-limited phase is never sent: the last message says Ready ----------------


async def test_a_rate_limited_failure_still_reaches_the_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import contextlib

    from schemas.notify import EventKind
    from services.notify import config
    from services.notify import gate as notify_gate
    from services.notify.events import Event
    from services.notify.send import RetryPolicy
    from services.notify.service import Notifier

    monkeypatch.setattr(notify_gate, "RATE_WINDOW", 0.5)  # a minute, shortened
    got: list[str] = []
    failed_sent = asyncio.Event()

    async def receive(request: web.Request) -> web.Response:
        got.append((await request.json())["kind"])
        if got[-1] == "Failed":
            failed_sent.set()
        return web.json_response({})

    runner, port = await serve_posts(receive, "/hook")
    try:
        cfg = config.load(
            f"providers:\n- name: hook\n  type: webhook\n  url: http://127.0.0.1:{port}/hook\n"
            "alerts:\n- providers: [hook]\n  events: [Ready, Failed]\n"
            "limits:\n  perMinute: 1\n",
            "n.yaml",
        )
        async with aiohttp.ClientSession() as session:
            n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=5.0)
            n.configure("platform", cfg)
            n.handle(Event(EventKind.READY, "web", "r1", cluster="prod-1"))
            n.handle(Event(EventKind.FAILED, "web", "r1", cluster="prod-1", detail="Failed"))
            # the bundle stays Failed; its status is not published again while nothing changes:
            # the held-back Failed must go out by itself once the rate window has passed
            with contextlib.suppress(TimeoutError):  # a Failed never sent fails below
                await asyncio.wait_for(failed_sent.wait(), 10.0)
            # and nothing held back may follow it: one more rate window for a stale Ready to show
            await asyncio.sleep(2 * notify_gate.RATE_WINDOW)
            await n.close()
    finally:
        await runner.cleanup()
    assert got, "nothing was delivered"
    assert got[-1] == "Failed", got
