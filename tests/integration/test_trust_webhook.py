"""Transient API errors last as long as they last: an admission webhook that is down.

A real validating webhook (``webhook.py``) guards the test's namespace with
``failurePolicy: Fail``, so while it answers 500 the API server refuses every write of a
ConfigMap there — the kind of outage an operator fixes in minutes, not within a retry count.
The user published once; when the webhook recovers, the object must land without anyone
publishing again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from harness.webhook import AdmissionWebhook
from services.kube import KubeClient, NotFound

pytestmark = pytest.mark.reliability

# No delivery limit (the default, spelled out so the test says what it relies on): a transient
# error is retried for as long as it lasts, at most MAX_BACKOFF seconds apart. An applier that
# bounds retries of transient errors instead gives up within seconds (with -1, at the first
# error; with a limit of 4 and the old nak delays of 2, 4, 6 s, after ~12 s): the webhook stays
# broken clearly longer than that.
APPLIER_ENV = {"DRIFTBUS_MAX_DELIVER": "-1", "DRIFTBUS_MAX_BACKOFF": "5"}
OUTAGE = 25.0


def cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    }


async def test_a_webhook_down_longer_than_the_give_up_window_then_back_ends_applied(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str
) -> None:
    name = "guarded"
    res = await kube.discovery.resource("v1", "ConfigMap")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, "guarded")

    def story() -> str:
        latest = {
            str(o.key): f"{o.phase} (attempts {o.attempts}) {o.message}" for o in watch.objects
        }
        bundles = [f"{b.revision} {b.phase} {b.message}" for b in watch.bundles]
        answers = [f"{r.operation} {r.name}: {r.answered}" for r in hook.calls(name)]
        return (
            f"object status: {latest}\nbundle status: {bundles}\n"
            f"webhook answers: {answers}\n{pipeline.logs()}"
        )

    async with AdmissionWebhook(mode="error") as hook:
        await hook.register(kube, namespace)
        pipeline.role_env["applier"] = dict(APPLIER_ENV)
        pipeline.start_all()
        await pipeline.publish(pnc.jetstream(), "guarded", [cm(namespace, name, mode="fast")])

        # the outage runs from the applier's first attempt on
        first = (await hook.until_called(name, within=60))[0]
        await asyncio.sleep(max(0.0, first.at + OUTAGE - time.monotonic()))
        refused = hook.calls(name)
        assert len(refused) >= 2, f"the applier did not retry through the outage\n{story()}"
        assert all(r.answered == "error" for r in refused)
        with pytest.raises(NotFound):
            await kube.get(res, name, namespace)

        hook.mode = "allow"  # the webhook is fixed; nobody publishes again

        deadline = time.monotonic() + 60
        while True:
            try:
                live = await kube.get(res, name, namespace)
                break
            except NotFound:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"ConfigMap/{namespace}/{name} never appeared within 60 s after the "
                        f"webhook recovered ({OUTAGE:.0f} s outage)\n{story()}"
                    ) from None
                await asyncio.sleep(0.2)
        assert live["data"] == {"mode": "fast"}
        assert hook.calls(name)[-1].answered == "allow"

        status = await watch.ready("r1", 30, story)
        assert status.counts.applied == 1
        assert status.counts.failed == 0
