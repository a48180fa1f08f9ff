"""The live status page in a real headless Chromium against the real stack (issue 8, item 3):
a bundle going Ready and a drifted object being corrected appear on the page as they happen.
Screenshots are kept in ``test-artifacts/ui/``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline
from services.common.kube import KubeClient
from services.controlplane import servers

from .browser import Browser
from .test_scaling import configmaps
from .waits import until_object

pytestmark = pytest.mark.ui
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"


async def test_status_page_shows_a_bundle_going_ready_and_drift_corrected(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path, measured: Any
) -> None:
    port = servers.free_port()
    pipeline.start_all()
    pipeline.start("ui", None, "--port", str(port))
    browser = Browser(tmp_path / "chromium")
    await browser.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        # the page server may still be starting: retry navigation until the page is there
        for _ in range(150):
            await browser.goto(url)
            await asyncio.sleep(0.2)
            if await browser.evaluate("!!document.querySelector('#bundles')"):
                break
        await browser.until("document.querySelector('#live').textContent === 'live'", 30, "live")

        n = 12
        await pipeline.publish(pnc.jetstream(), "ui", configmaps(namespace, n))
        row = "document.querySelector('tr[data-bundle$=\"/ui\"]')"
        await browser.until(f"{row} && {row}.dataset.phase === 'Ready'", 90, "the bundle Ready")
        objects = await browser.until(
            f"document.querySelectorAll('#objects tbody tr').length === {n} && "
            "[...document.querySelectorAll('#objects tbody tr')].map(r => r.dataset.phase)",
            30,
            f"{n} object rows",
        )
        assert set(objects) == {"Applied"}, objects
        # health comes from the watcher's facts: every ConfigMap is Ready once observed
        await browser.until(
            "[...document.querySelectorAll('#objects tbody tr td:nth-child(3)')]"
            ".every(td => td.textContent === 'Ready')",
            30,
            "every object's health Ready",
        )
        ready_png = await browser.screenshot(ARTIFACTS / "bundle-ready.png")

        res = await kube.discovery.resource("v1", "ConfigMap")
        await kube.delete(res, "cm-2", namespace)  # drift: deleted out of band
        await until_object(kube, res, "cm-2", namespace, logs=pipeline.logs)
        drift = "[...document.querySelectorAll('#drift li')]"
        events = await browser.until(
            f"{drift}.some(li => li.dataset.object.endsWith('/cm-2') && "
            "li.dataset.event === 'corrected') && "
            f"{drift}.filter(li => li.dataset.object.endsWith('/cm-2'))"
            ".map(li => li.dataset.event)",
            60,
            "cm-2 detected and corrected",
        )
        assert "detected" in events, events
        hit_ratio = await browser.evaluate("document.querySelector('#hit-ratio').textContent")
        drift_png = await browser.screenshot(ARTIFACTS / "drift-corrected.png")
        text = await browser.evaluate("document.body.innerText")
        (ARTIFACTS / "page.txt").write_text(text)
        assert "cm-2" in text
        # the drift "corrected" event and the bundle's return to Ready are two status events:
        # the page may show the first before the second; Ready must follow, bounded
        async with aiohttp.ClientSession() as session:
            for _ in range(150):
                async with session.get(f"{url}api/state") as resp:
                    state = await resp.json()
                (ui,) = [b for b in state["bundles"] if b["bundle"] == "ui"]
                if ui["phase"] == "Ready":
                    break
                await asyncio.sleep(0.2)
        assert ui["phase"] == "Ready", (ui, pipeline.logs())
        assert any(d["object"].endswith("/cm-2") for d in state["drift"])
        # one tenant's view: "ui" is a platform bundle, so it is the platform's ("") only,
        # its bundle, objects and drift alike, on /api/state and on /events
        async with aiohttp.ClientSession() as session:
            for tenant, shown in (("", True), ("team-q", False)):
                async with session.get(f"{url}api/state", params={"tenant": tenant}) as resp:
                    view = await resp.json()
                assert bool(view["bundles"]) is shown, view["bundles"]
                assert bool(view["drift"]) is shown, view["drift"]
                assert bool(view["objects"]) is shown
                async with session.get(f"{url}events", params={"tenant": tenant}) as resp:
                    first = (await resp.content.readuntil(b"\n\n")).decode()
                assert first.startswith("event: state"), first
                assert ('"bundle":"ui"' in first) is shown, first[:300]
        measured(
            f"status page in headless Chromium: bundle Ready with {n} objects, cm-2 drift "
            f"detected+corrected live, hit ratio shown {hit_ratio}; screenshots {ready_png}, "
            f"{drift_png}"
        )
    finally:
        await browser.close()
