"""A quiet applier costs the bus (almost) nothing, and still sees what it must at once (issue 43).

Before: every applier asked for intents once a second and read its cluster's planner claim
once a second — at 1,000 quiet clusters, 2,000 requests a second to nats-server for nothing.
Now one pull request waits for the next intent (answered the moment one is queued) and the
claim is followed by a subscription on its subject (read again when it is written). Real
nats-server, real kube-apiserver, the real ``Applier`` in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from schemas.codec import encode
from schemas.messages import ApplyIntent
from schemas.subjects import ObjectKey, object_subject
from services.applier.consumer import IDLE_WAIT
from services.applier.service import Applier, ApplierSettings
from services.common import bus
from services.kube import KubeClient, NotFound
from tests.conftest import unique_name


async def until(what: str, ok: Any, timeout: float) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.05)


def configmap(namespace: str, name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"v": value},
    }


def intent(cluster: str, manifest: dict[str, Any], *, token: int, planner: str) -> ApplyIntent:
    return ApplyIntent(
        cluster=cluster,
        key=ObjectKey.of(manifest),
        bundle="quiet",
        revision="r1",
        manifest_sha="0" * 64,
        manifest=manifest,
        reason="test",
        planner=planner,
        fencing_token=token,
    )


async def send(js: JetStreamContext, i: ApplyIntent) -> None:
    subject = object_subject("intent", i.cluster, i.key)
    await js.publish(subject, encode(i), headers={"Nats-Msg-Id": f"{subject}:{i.fencing_token}"})


@pytest.fixture
async def applier_nc(nats_url: str) -> AsyncIterator[NATS]:
    """The applier's own connection: what it sends is counted on it alone."""
    client = await nats.connect(nats_url, max_reconnect_attempts=2, connect_timeout=5)
    try:
        yield client
    finally:
        await client.close()


async def test_a_quiet_applier_asks_nothing_yet_takes_an_intent_and_a_take_over_at_once(
    nc: NATS, js: JetStreamContext, applier_nc: NATS, kube: KubeClient, namespace: str,
    measured: Any,
) -> None:  # fmt: skip
    await bus.ensure_streams(js)
    cluster = unique_name("quiet")
    claims = await js.key_value(bus.SHARDS_BUCKET)
    first = await claims.put(bus.claim_key(cluster), b'{"planner": "planner-a"}')
    ajs = applier_nc.jetstream()
    applier = Applier(
        settings=ApplierSettings(cluster=cluster, applier_id="quiet-applier"),
        nc=applier_nc,
        js=ajs,
        kube=kube,
        publisher=bus.Publisher(ajs),
    )
    assert applier.s.fence_refresh >= 30  # the claim's reads on a timer are a safety net only
    run = asyncio.create_task(applier.run())
    try:
        await asyncio.wait_for(applier.bound.wait(), 30)
        await until("the claim read at start", lambda: applier.fence.token == first, 10)

        # quiet: what the applier sends in a few seconds (its heartbeat every 5 s; before,
        # a fetch and a claim read every second besides)
        await asyncio.sleep(1.5)  # its first fetch (1 s) has found nothing: it waits now
        sent_before, window = applier_nc.stats["out_msgs"], 6.0
        await asyncio.sleep(window)
        quiet_sends = applier_nc.stats["out_msgs"] - sent_before
        assert quiet_sends <= 3, f"{quiet_sends} messages sent in {window}s of nothing to do"

        # an intent queued now is taken at once by the request that waits (not IDLE_WAIT later)
        queued = time.monotonic()
        await send(js, intent(cluster, configmap(namespace, "now", "a"), token=first,
                              planner="planner-a"))  # fmt: skip
        await until("the intent applied", lambda: applier.applied == 1, IDLE_WAIT / 3)
        took = time.monotonic() - queued

        # planner-b takes the cluster over: the applier sees the claim as it is written,
        # and drops the deposed planner's intent that comes before any of planner-b's
        second = await claims.put(bus.claim_key(cluster), b'{"planner": "planner-b"}')
        written = time.monotonic()
        await until("the take-over seen", lambda: applier.fence.token == second, IDLE_WAIT / 3)
        seen = time.monotonic() - written
        late = configmap(namespace, "late", "deposed")
        await send(js, intent(cluster, late, token=first, planner="planner-a"))
        await until("the deposed intent dropped", lambda: applier.fenced == 1, 10)
        res = await kube.resource_for(late)
        with pytest.raises(NotFound):
            await kube.get(res, "late", namespace)
        assert applier.applied == 1
    finally:
        applier.stopping.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run, 10)
        run.cancel()
    measured(
        f"quiet applier: {quiet_sends} messages in {window:.0f}s idle (heartbeats only), an "
        f"intent applied {took:.2f}s after it was queued, a take-over seen {seen:.2f}s after "
        "the claim was written (fence refresh 30 s), the deposed planner's intent dropped"
    )
