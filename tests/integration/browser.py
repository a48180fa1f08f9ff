"""Headless Chromium driven over the DevTools protocol: enough to load a page, read its DOM and
take screenshots (no Playwright download needed: Debian's chromium is installed by `make`)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp

from services.controlplane import servers


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("no chromium on PATH: `make browser` installs Debian's chromium")


class Browser:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = servers.free_port()
        self.proc: servers.Process | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)

    def _launch(self) -> None:
        self.proc = servers.Process(
            "chromium",
            [
                chromium_binary(),
                "--headless=new",
                "--no-sandbox",  # tests run as root in CI
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,900",
                f"--remote-debugging-port={self.port}",
                f"--user-data-dir={self.workdir / 'profile'}",
                "about:blank",
            ],
            self.workdir,
        )
        self.proc.start()

    async def start(self) -> None:
        self._launch()
        assert self.proc is not None
        self._session = aiohttp.ClientSession()
        deadline = time.monotonic() + 60
        while True:
            try:
                async with self._session.get(f"http://127.0.0.1:{self.port}/json/list") as r:
                    targets = await r.json()
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
            except aiohttp.ClientError:
                pass
            assert self.proc.alive(), servers.log_tail(self.proc.log_path)
            assert time.monotonic() < deadline, "chromium never offered a page to drive"
            await asyncio.sleep(0.2)
        self._ws = await self._session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        await self.call("Page.enable")

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._ws is not None
        msg_id = next(self._ids)
        await self._ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            reply = await asyncio.wait_for(self._ws.receive_json(), timeout=30)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result

    async def goto(self, url: str) -> None:
        await self.call("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    async def until(self, expression: str, within: float = 60.0, what: str = "") -> Any:
        deadline = time.monotonic() + within
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                text = await self.evaluate("document.body && document.body.innerText")
                raise AssertionError(f"page never showed {what or expression}; it shows:\n{text}")
            await asyncio.sleep(0.2)

    async def screenshot(self, path: Path) -> Path:
        data = await self.call("Page.captureScreenshot", format="png")
        return _save(path, base64.b64decode(data["data"]))

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
        if self.proc is not None:
            self.proc.stop(timeout=10)


def _save(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
