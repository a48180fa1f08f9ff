"""A loopback HTTP server for tests that play a provider or a webhook."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


async def serve_posts(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], path: str
) -> tuple[web.AppRunner, int]:
    """An HTTP server on 127.0.0.1 (a free port) answering POSTs at ``path`` with ``handler``:
    its runner (``cleanup()`` stops it) and its port."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])
