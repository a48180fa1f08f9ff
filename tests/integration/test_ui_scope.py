"""What a tenant's status page explains (issue 41, item 5): only objects the planner accepted
for one of the tenant's bundles, and of them only the fields their manifest declares.

The page reads live objects with its own kubeconfig (the admin's under ``driftbus up``), so the
object it is asked about must be one the planner took in: a refused revision may name any
object of any namespace. On the real stack, through ``/api/object`` of a page pinned with
``--tenant`` (no browser: the API is what the page's script reads).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import aiohttp
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import BundlePhase, ObjectPhase
from services.controlplane import servers
from services.kube import KubeClient
from services.ui.guard import TOKEN_ENV

from ..conftest import unique_name
from .manifests import cm
from .test_tenancy import put_policy, team, tenant_namespace


class TenantPage:
    """``driftbus ui --tenant T`` of the pipeline, read as its script reads it."""

    def __init__(self, pipeline: Pipeline, tenant: str) -> None:
        token = secrets.token_urlsafe(16)
        pipeline.role_env["ui"] = {TOKEN_ENV: token}
        port = servers.free_port()
        pipeline.start("ui", None, "--port", str(port), "--tenant", tenant)
        self.url = f"http://127.0.0.1:{port}"
        self.auth = {"Authorization": f"Bearer {token}"}
        self.pipeline = pipeline

    async def object(self, bundle: str, ns: str, name: str) -> tuple[int, str]:
        """``/api/object`` for ConfigMap ``ns/name`` of ``bundle``: status and body, once the
        page listens."""
        q = {"cluster": self.pipeline.cluster, "bundle": bundle, "kind": "ConfigMap"}
        q |= {"namespace": ns, "name": name}
        deadline = time.monotonic() + 60
        while True:
            try:
                async with (
                    aiohttp.ClientSession(headers=self.auth) as s,
                    s.get(f"{self.url}/api/object", params=q) as resp,
                ):
                    return resp.status, await resp.text()
            except aiohttp.ClientConnectionError as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"the page never listened\n{self.pipeline.logs()}"
                    ) from exc
                await asyncio.sleep(0.2)


def changes(body: str) -> dict[str, dict[str, Any]]:
    return {c["path"]: c for c in json.loads(body)["diff"] or []}


async def test_a_tenants_page_explains_only_what_the_planner_accepted_for_the_tenant(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    na, nb = unique_name("pa"), unique_name("pb")
    ta, tb = unique_name("ta"), unique_name("tb")
    web, app = f"{ta}/web", f"{tb}/app"
    await tenant_namespace(kube, na, ["configmaps"])
    await tenant_namespace(kube, nb, ["configmaps"])
    # team-a's objects that name no namespace go to its default one
    await put_policy(pnc, f"tenants:{team(ta, na, f'    defaultNamespace: {na}')}{team(tb, nb)}")
    b_value, typed_value = f"b-only-{secrets.token_hex(6)}", f"live-only-{secrets.token_hex(6)}"
    # team-a's own namespace holds a ConfigMap someone else made: team-a's manifest of it sets
    # `data: 0` (the API server refuses it; the live map stays)
    await kube.apply(
        {**cm(na, "typed"), "data": {"k": typed_value}}, field_manager="platform-team", force=True
    )
    watch_a, watch_b = StatusWatch(), StatusWatch()
    await watch_a.start(pnc, pipeline.cluster, web)
    await watch_b.start(pnc, pipeline.cluster, app)
    pipeline.start_all()
    page = TenantPage(pipeline, ta)
    js = pnc.jetstream()

    await pipeline.publish(js, app, [{**cm(nb, "settings"), "data": {"password": b_value}}])
    await watch_b.ready("r1", 90, pipeline.logs)
    typed = {**cm(na, "typed"), "data": 0}
    mine = cm("", "a")
    del mine["metadata"]["namespace"]
    await pipeline.publish(js, web, [mine, typed], drift="warn")
    await watch_a.object_status(
        lambda o: o.key.name == "typed" and o.phase is ObjectPhase.FAILED, 90, pipeline.logs
    )
    await watch_a.object_status(
        lambda o: o.key.name == "a" and o.phase is ObjectPhase.APPLIED, 90, pipeline.logs
    )
    # r2 names team-b's ConfigMap: outside team-a's namespaces, the planner refuses it whole
    await pipeline.publish(js, web, [mine, typed, {**cm(nb, "settings"), "data": 0}], revision="r2")
    refused = await watch_a.until(lambda s: s.revision == "r2", 60, pipeline.logs)
    assert refused.phase is BundlePhase.FAILED, refused
    assert "refused" in refused.message, refused

    # team-a's page asked about team-b's ConfigMap through team-a's refused revision
    status, body = await page.object(web, nb, "settings")
    assert b_value not in body, f"team-b's data shown on team-a's page: {body}"
    assert status == 200, body
    doc = json.loads(body)
    assert doc["diff"] is None, doc
    assert "accepted" in doc["diff_note"], doc
    # and through team-b's own bundle: not team-a's to see at all
    status, body = await page.object(app, nb, "settings")
    assert b_value not in body, body
    assert status == 404, body

    # an object the planner took in: a scalar where the live object has a map is a type
    # mismatch, never the live map
    status, body = await page.object(web, na, "typed")
    assert typed_value not in body, f"a live map the manifest did not declare is shown: {body}"
    assert status == 200, body
    change = changes(body)["data"]
    assert (change["live"], change["live_type"], change["desired"]) == (None, "mapping", 0), body

    # the revision in force is still explained (its object placed in team-a's default
    # namespace too): a field changed out of band shows its values
    await kube.apply(
        {**cm(na, "a"), "data": {"k": "changed"}}, field_manager="intruder", force=True
    )
    deadline = time.monotonic() + 30
    while "data.k" not in changes(body := (await page.object(web, na, "a"))[1]):
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.3)
    change = changes(body)["data.k"]
    assert (change["live"], change["desired"]) == ("changed", "a"), body
