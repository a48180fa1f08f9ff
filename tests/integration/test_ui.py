"""The live status page in a real headless Chromium against the real stack (issue 8, item 3):
a bundle going Ready and a drifted object being corrected appear on the page as they happen.
Screenshots are kept in ``test-artifacts/ui/``."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline
from services.controlplane import servers
from services.kube import KubeClient
from services.ui.guard import TOKEN_ENV

from .browser import Browser
from .test_scaling import configmaps
from .waits import until_object

pytestmark = pytest.mark.ui
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"


def page_token(pipeline: Pipeline) -> tuple[str, dict[str, str]]:
    """The token the page is started with (as `driftbus up` gives it), and the header a script
    sends it in."""
    token = secrets.token_urlsafe(16)
    pipeline.role_env["ui"] = {TOKEN_ENV: token}
    return token, {"Authorization": f"Bearer {token}"}


async def opened(browser: Browser, url: str) -> None:
    """Navigate to the page; the page server may still be starting, so until it is there."""
    for _ in range(150):
        await browser.goto(url)
        await asyncio.sleep(0.2)
        if await browser.evaluate("!!document.querySelector('#bundles')"):
            return
    raise AssertionError(f"the status page never loaded at {url}")


async def test_status_page_shows_a_bundle_going_ready_and_drift_corrected(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path, measured: Any
) -> None:
    port = servers.free_port()
    token, auth = page_token(pipeline)
    pipeline.start_all()
    pipeline.start("ui", None, "--port", str(port))
    browser = Browser(tmp_path / "chromium")
    await browser.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        await opened(browser, f"{url}?token={token}")  # sets the cookie, as `up`'s address does
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
        async with aiohttp.ClientSession(headers=auth) as session:
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
        async with aiohttp.ClientSession(headers=auth) as session:
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


async def test_status_page_explains_an_object_and_charts_writes_made_and_avoided(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path, measured: Any
) -> None:
    """Issue 16: a click on an object shows its decisions, last error and what differs from the
    manifest (Secret values masked); a bundle shows its revisions (rollback marked); charts
    show writes made vs avoided and time to correct over the last hour."""
    import base64
    import json
    import shutil

    port = servers.free_port()
    token, auth = page_token(pipeline)
    pipeline.start_all()
    pipeline.start("ui", None, "--port", str(port))
    js = pnc.jetstream()
    planted = ("s3cret-old-7731", "s3cret-new-9924")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "explain-secret", "namespace": namespace},
        "stringData": {"password": planted[0]},
    }
    mode = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "explain-cm", "namespace": namespace},
        "data": {"mode": "fast"},
    }
    # drift: warn — what someone else changes stays, reported, so there is a difference to see
    await pipeline.publish(js, "explain", [mode, secret], revision="r1", drift="warn")
    await pipeline.publish(
        js, "explain", [mode, secret, *configmaps(namespace, 2)], revision="r2", drift="warn"
    )
    await pipeline.publish(js, "ui2", configmaps(namespace, 3)[2:], revision="a")
    browser = Browser(tmp_path / "chromium")
    await browser.start()
    try:
        url = f"http://127.0.0.1:{port}/"
        await opened(browser, f"{url}?token={token}")
        row = "document.querySelector('tr[data-bundle$=\"/explain\"]')"
        await browser.until(f"{row} && {row}.dataset.phase === 'Ready'", 90, "explain Ready")
        await kube.apply({**mode, "data": {"mode": "slow"}}, field_manager="intruder", force=True)
        await kube.apply(
            {**secret, "stringData": {"password": planted[1]}}, field_manager="intruder", force=True
        )
        await browser.until(f"{row}.dataset.phase === 'OutOfSync'", 60, "explain OutOfSync")
        # the bundle's revisions, newest first
        await browser.evaluate(f"{row}.click()")
        revisions = await browser.until(
            "document.querySelectorAll('#revisions li').length === 2 && "
            "[...document.querySelectorAll('#revisions li')].map(li => li.dataset.revision)",
            30,
            "two revisions",
        )
        assert revisions == ["r2", "r1"], revisions
        # one object explained: its decisions and the field that differs from the manifest
        cm_row = "document.querySelector('#objects tr[data-object$=\"/explain-cm\"]')"
        await browser.until(f"!!{cm_row}", 30, "the ConfigMap's row")
        await browser.evaluate(f"{cm_row}.click()")
        shown = await browser.until(
            "!document.querySelector('#detail').hidden && "
            "document.querySelector('#detail-diff').innerText.includes('data.mode') && "
            "document.querySelector('#detail-diff').innerText",
            30,
            "the ConfigMap's difference",
        )
        assert 'data.mode: live "slow" → desired "fast"' in shown, shown
        actions = await browser.until(
            "[...document.querySelectorAll('#detail-decisions tbody tr')]"
            ".map(r => r.dataset.action + ':' + r.dataset.reason)",
            10,
            "decisions",
        )
        assert "apply:new" in actions, actions
        await browser.evaluate("document.querySelector('#detail').scrollIntoView()")
        detail_png = await browser.screenshot(ARTIFACTS / "object-detail.png")
        # a Secret: the path of what differs, never its values
        secret_row = "document.querySelector('#objects tr[data-object$=\"/explain-secret\"]')"
        await browser.evaluate(f"{secret_row}.click()")
        shown = await browser.until(
            "document.querySelector('#detail-object').innerText.includes('explain-secret') && "
            "document.querySelector('#detail-diff').innerText.includes('data.password') && "
            "document.querySelector('#detail-diff').innerText",
            30,
            "the Secret's difference",
        )
        assert "***" in shown, shown
        page = await browser.evaluate("document.documentElement.outerHTML")
        async with aiohttp.ClientSession(headers=auth) as session:
            q = {"cluster": pipeline.cluster, "bundle": "explain", "kind": "Secret"}
            q |= {"namespace": namespace, "name": "explain-secret"}
            async with session.get(f"{url}api/object", params=q) as resp:
                api = await resp.text()
        for value in planted:
            for form in (value, base64.b64encode(value.encode()).decode()):
                assert form not in page
                assert form not in api
        assert json.loads(api)["diff"], api
        # nor a hash of them: a Secret's SHAs are in no decision or row the page serves
        assert json.loads(api)["decisions"], api
        assert "_sha" not in api, api

        # the charts: writes made (every apply) and avoided (a republish: all hits); a drift
        # corrected (an out-of-band delete in a bundle that corrects) and its time
        await pipeline.publish(js, "ui2", configmaps(namespace, 3)[2:], revision="a")
        res = await kube.discovery.resource("v1", "ConfigMap")
        await kube.delete(res, "cm-2", namespace)
        await until_object(kube, res, "cm-2", namespace, logs=pipeline.logs)
        writes = await browser.until(
            "[...document.querySelectorAll('#writes-chart rect.writes')]"
            ".reduce((n, r) => n + Number(r.dataset.writes), 0)",
            30,
            "writes charted",
        )
        avoided = await browser.until(
            "[...document.querySelectorAll('#writes-chart rect.avoided')]"
            ".reduce((n, r) => n + Number(r.dataset.avoided), 0)",
            30,
            "writes avoided charted",
        )
        corrections = await browser.until(
            "document.querySelectorAll('#ttc-chart circle').length", 60, "a correction charted"
        )
        assert writes >= 6, writes  # 2 + 2 (explain), 1 (ui2), 1 re-creation
        assert avoided >= 1, avoided
        await browser.evaluate("window.scrollTo(0, 0)")
        charts_png = await browser.screenshot(ARTIFACTS / "charts.png")
        shutil.copyfile(charts_png, ARTIFACTS / "status-page.png")
        measured(
            f"status page explains: object detail (decisions {len(actions)}, masked Secret "
            f"diff), revisions {revisions}, charts: {writes} writes made, {avoided} avoided, "
            f"{corrections} corrections; screenshots {detail_png}, {charts_png}"
        )
    finally:
        await browser.close()
