"""The status page's fleet view (issue 31) against a real nats-server: the page (``driftbus ui``,
a real process) reads the cluster registry, a rollout state and the bundle statuses of several
clusters from the bus and serves the matrix of bundles × clusters and the rollout's progress on
``GET /api/fleet``; a page pinned to one tenant serves that tenant's rows and rollouts only.

What the planners and the rollout driver would write is published here as they publish it
(``BundleStatus`` on ``driftbus.status.<cluster>.<bundle>.bundle``, the ``RolloutState`` in the
``driftbus-rollouts`` bucket, the clusters through ``registry.register``): the bus contract,
without the kube-apiservers a full fleet needs (``fleet_site.py`` runs those)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from nats.js import JetStreamContext

from schemas.codec import encode
from schemas.fleet import (
    ClusterRollout,
    Placement,
    RolloutEvent,
    RolloutPhase,
    RolloutSpec,
    RolloutState,
)
from schemas.messages import BundleCounts, BundlePhase, BundleStatus
from schemas.subjects import bundle_status_subject, rollout_key
from services.clusters import registry
from services.common import bus
from services.controlplane import servers
from services.ui.guard import TOKEN_ENV

pytestmark = pytest.mark.integration
CLUSTERS = {
    "canary": {"env": "canary"},
    "prod-a": {"env": "prod"},
    "prod-b": {"env": "prod"},
    "edge": {"env": "prod", "zone": "edge"},
}
WEB, DB, INFRA = "team-a/web", "team-b/db", "infra"
BAKE = 600.0
EXCLUDED = "tenant team-a may not use cluster edge"


class Page:
    """A ``driftbus ui`` process and the header its token goes in."""

    def __init__(self, workdir: Path, nats_url: str, *args: str) -> None:
        self.port = servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        token = secrets.token_urlsafe(16)
        self.auth = {"Authorization": f"Bearer {token}"}
        env = os.environ | {"NATS_URL": nats_url, TOKEN_ENV: token, "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "services.cli.main", "ui", "--port", str(self.port), *args]
        self.proc = servers.Process(f"ui-{self.port}", argv, workdir, env=env)
        self.proc.start()

    async def get(self, path: str, **params: str) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession(headers=self.auth) as s,
            s.get(self.url + path, params=params) as resp,
        ):
            body = await (resp.json() if resp.content_type == "application/json" else resp.text())
            return resp.status, body

    async def fleet_until(
        self, ok: Callable[[dict[str, Any]], bool], what: str, within: float = 30.0
    ) -> dict[str, Any]:
        """``/api/fleet`` once ``ok`` holds of it (the page follows the bus as it starts)."""
        deadline = time.monotonic() + within
        doc: Any = None
        while time.monotonic() < deadline:
            try:
                status, doc = await self.get("/api/fleet")
                if status == 200 and ok(doc):
                    return dict(doc)
            except aiohttp.ClientConnectionError:
                pass  # not listening yet
            await asyncio.sleep(0.2)
        raise AssertionError(
            f"the page never showed {what}; last /api/fleet: {doc}\n"
            f"{servers.log_tail(self.proc.log_path, 30)}"
        )


def bundle_status(cluster: str, bundle: str, phase: BundlePhase, revision: str) -> BundleStatus:
    return BundleStatus(
        cluster=cluster,
        bundle=bundle,
        revision=revision,
        phase=phase,
        counts=BundleCounts(total=2, applied=2, ready=2 if phase == BundlePhase.READY else 0),
        message="" if phase == BundlePhase.READY else f"{phase} in {cluster}",
        at=dt.datetime.now(dt.UTC),
    )


def event(seq: int, name: str, step: int, clusters: list[str], at: dt.datetime) -> RolloutEvent:
    return RolloutEvent(
        bundle=WEB,
        revision="r2",
        seq=seq,
        event=name,
        phase=RolloutPhase.PROGRESSING,
        step=step,
        clusters=clusters,
        message=f"{name} {', '.join(clusters)}",
        at=at,
        driver="planner-0",
    )


def web_rollout(now: dt.datetime, *, step: int) -> RolloutState:
    """team-a/web going r1 → r2: canary (step 1) Ready and baking; at step 2 prod-a placed."""
    clusters = {"canary": ClusterRollout(revision="r2", state="ready", step=0, at=now)}
    recent = [event(0, "started", 0, [], now), event(1, "step", 0, ["canary"], now)]
    if step == 1:
        clusters["prod-a"] = ClusterRollout(revision="r2", state="assigned", step=1, at=now)
        clusters["prod-b"] = ClusterRollout(
            revision="r2", state="refused", step=1, at=now, message="lacks label region"
        )
        recent += [event(2, "baked", 0, ["canary"], now), event(3, "step", 1, ["prod-a"], now)]
    return RolloutState(
        bundle=WEB,
        target=Placement(revision="r2"),
        previous=Placement(revision="r1"),
        spec=RolloutSpec(steps=["env=canary"], bake=BAKE),
        selector="env in (canary,prod)",
        tenant="team-a",
        step=step,
        step_started_at=now,
        ready_since=now if step == 0 else None,
        clusters=clusters,
        excluded={"edge": EXCLUDED},
        recent=recent,
        events=len(recent),
    )


@pytest.fixture
async def fleet_bus(tmp_path: Path) -> AsyncIterator[tuple[str, JetStreamContext]]:
    """A private nats-server with the streams and buckets, three planners' worth of bundle
    statuses and a registry of four clusters."""
    server = servers.NatsServer(tmp_path / "nats")
    server.start()
    nc = await nats.connect(server.client_url)
    try:
        js = nc.jetstream()
        await bus.ensure_streams(js)
        for name, labels in CLUSTERS.items():
            await registry.register(js, name, labels=labels, kube_version="v1.31.0", by="test")
        for cluster, bundle, phase, revision in [
            ("canary", WEB, BundlePhase.READY, "r2"),
            ("prod-a", WEB, BundlePhase.READY, "r1"),  # still on the old revision
            ("prod-a", DB, BundlePhase.FAILED, "d1"),
            ("canary", INFRA, BundlePhase.RECONCILING, "i1"),
            ("prod-a", INFRA, BundlePhase.READY, "i1"),
        ]:
            await js.publish(
                bundle_status_subject(cluster, bundle),
                encode(bundle_status(cluster, bundle, phase, revision)),
            )
        yield server.client_url, js
    finally:
        await nc.drain()
        server.stop()


def cells(doc: dict[str, Any], bundle: str) -> dict[str, dict[str, Any]]:
    (row,) = [r for r in doc["rows"] if r["bundle"] == bundle]
    return {c["cluster"]: c for c in row["cells"]}


async def test_fleet_view_shows_the_matrix_and_rollout_progress_per_tenant(
    fleet_bus: tuple[str, JetStreamContext], tmp_path: Path, measured: Any
) -> None:
    url, js = fleet_bus
    kv = await js.key_value(bus.ROLLOUTS_BUCKET)
    now = dt.datetime.now(dt.UTC)
    await kv.put(rollout_key(WEB), msgspec.json.encode(web_rollout(now, step=0)))
    started = time.monotonic()
    admin = Page(tmp_path, url)
    tenant = Page(tmp_path, url, "--tenant", "team-a")
    try:
        doc = await admin.fleet_until(
            lambda d: len(d["rows"]) == 3 and len(d["rollouts"]) == 1, "three bundles, a rollout"
        )
        measured(f"fleet view served {time.monotonic() - started:.2f}s after the page started")
        assert [c["name"] for c in doc["clusters"]] == ["canary", "edge", "prod-a", "prod-b"]
        assert [r["bundle"] for r in doc["rows"]] == [INFRA, WEB, DB]

        web = cells(doc, WEB)
        assert (web["canary"]["label"], web["canary"]["tone"]) == ("Ready", "ok")
        # prod-a is Ready on r1, but the rollout has not reached it with r2
        assert (web["prod-a"]["label"], web["prod-a"]["tone"]) == ("Waiting", "waiting")
        assert "step 2/2" in web["prod-a"]["title"]
        assert web["prod-b"]["tone"] == "waiting"
        assert (web["edge"]["tone"], web["edge"]["title"]) == ("refused", f"excluded: {EXCLUDED}")
        assert cells(doc, DB)["prod-a"]["tone"] == "bad"
        assert cells(doc, DB)["canary"]["tone"] == "none"
        infra = cells(doc, INFRA)
        assert (infra["canary"]["tone"], infra["prod-a"]["tone"]) == ("warn", "ok")

        (p,) = doc["rollouts"]
        assert (p["bundle"], p["revision"], p["previous"], p["phase"]) == (
            WEB,
            "r2",
            "r1",
            "Progressing",
        )
        assert (p["step"], p["steps"], p["ready"], p["total"]) == (1, 2, 1, 3)
        assert [(s["selector"], s["state"]) for s in p["selectors"]] == [
            ("env=canary", "current"),
            ("(the whole fleet)", "next"),
        ]
        assert 0 < p["bake_remaining"] <= BAKE
        assert [e["event"] for e in p["events"]] == ["step", "started"]
        assert p["excluded"] == {"edge": EXCLUDED}

        # the tenant's page: its own bundle and rollout only, never team-b's nor the platform's
        mine = await tenant.fleet_until(lambda d: bool(d["rows"]), "team-a's row")
        assert [r["bundle"] for r in mine["rows"]] == [WEB]
        assert [r["bundle"] for r in mine["rollouts"]] == [WEB]
        assert DB not in str(mine)
        assert "Failed" not in str(mine)
        assert (await tenant.get("/api/fleet", tenant="team-b"))[0] == 403
        assert [
            r["bundle"] for r in (await admin.get("/api/fleet", tenant="team-b"))[1]["rows"]
        ] == [DB]
        async with aiohttp.ClientSession() as s, s.get(f"{tenant.url}/api/fleet") as resp:
            assert resp.status == 401  # no token, nothing

        # the driver moves on: step 2 places r2 in prod-a (Reconciling), prod-b is refused
        await kv.put(rollout_key(WEB), msgspec.json.encode(web_rollout(now, step=1)))
        await js.publish(
            bundle_status_subject("prod-a", WEB),
            encode(bundle_status("prod-a", WEB, BundlePhase.RECONCILING, "r2")),
        )
        doc = await admin.fleet_until(
            lambda d: (
                d["rollouts"]
                and d["rollouts"][0]["step"] == 2
                and cells(d, WEB)["prod-a"]["label"] == "Reconciling"
            ),
            "step 2 with prod-a Reconciling",
        )
        web = cells(doc, WEB)
        assert (web["prod-a"]["tone"], web["prod-a"]["rollout"]) == ("warn", "assigned")
        assert (web["prod-b"]["tone"], web["prod-b"]["title"]) == (
            "refused",
            "refused: lacks label region",
        )
        (p,) = doc["rollouts"]
        assert [s["state"] for s in p["selectors"]] == ["done", "current"]
        assert p["bake_remaining"] is None
        assert [e["event"] for e in p["events"]][:2] == ["step", "baked"]

        # the page itself: the fleet section and its script, served with the token
        status, html = await admin.get("/")
        assert status == 200
        assert 'id="fleet-matrix"' in html
        assert "/static/fleet.js" in html
        status, script = await admin.get("/static/fleet.js")
        assert status == 200
        assert "/api/fleet" in script
    finally:
        for page in (admin, tenant):
            page.proc.terminate()
        for page in (admin, tenant):
            page.proc.stop(timeout=10)
