"""Scenario `webhook`: a cold apply where every write waits for an admission webhook (issue 18).

Real clusters are latency-bound more often than CPU-bound: every write passes admission webhooks
(Gatekeeper, Kyverno, Istio). Here a real validating webhook (``harness.webhook``: HTTPS, its own
CA, served from the bench process) answers every CREATE/UPDATE of every kind of the mix in the
bench namespaces after ``delay`` seconds (20 ms by default), registered with the API server
through a ``ValidatingWebhookConfiguration``.

Each applier runs with ``--concurrency 2`` here (16 by default), so that the number of writes in
flight is what the number of appliers makes it: 8 appliers have 16 in flight, as many as the raw
client. Every repetition runs 1/2/4/8 appliers and the raw limit (one aiohttp client, 16 in
flight) against the same API server and webhook, and checks that every contender's writes were
exactly the objects and that the webhook reviewed every one of them.

Targets: 4 appliers ≥ 3.5 × one applier; 8 appliers ≥ 0.8 × the raw limit at 16 in flight.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from typing import Any

from bench.report import Result
from bench.stack import (
    KINDS,
    BenchStack,
    Run,
    check_writes,
    labelled,
    manifests,
    namespaces_for,
)
from harness.webhook import AdmissionWebhook
from services.kube import KubeClient

APPLIERS = (1, 2, 4, 8)
PER_APPLIER = 2
"""In-flight writes per applier in this scenario (``DRIFTBUS_CONCURRENCY``)."""


def rules() -> list[dict[str, Any]]:
    """CREATE/UPDATE of every resource of the mix, one rule per API group."""
    by_group: dict[tuple[str, str], list[str]] = {}
    for prefix, plural, _ in KINDS.values():
        if prefix == "/api/v1":
            group, version = "", "v1"
        else:
            group, version = prefix.removeprefix("/apis/").split("/")
        by_group.setdefault((group, version), []).append(plural)
    return [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "operations": ["CREATE", "UPDATE"],
            "resources": sorted(plurals),
            "scope": "Namespaced",
        }
        for (group, version), plurals in sorted(by_group.items())
    ]


async def _main(objects: int, repetitions: int, delay: float) -> list[Result]:
    objs = manifests(objects)
    namespaces = namespaces_for(objects)
    runs: dict[str, list[Run]] = {**{str(n): [] for n in APPLIERS}, "raw": []}
    reviewed: dict[str, list[int]] = {k: [] for k in runs}
    async with BenchStack.start(objects) as b:
        kube = await KubeClient.from_kubeconfig(str(b.cluster.kubeconfig))
        async with kube, AdmissionWebhook(delay=delay) as hook:
            await hook.register(kube, namespaces, rules=rules(), timeout_seconds=10, within=60)

            async def measured(key: str, work: Any) -> None:
                before = len(hook.calls())
                runs[key].append(await b.measured(work))
                reviewed[key].append(len(hook.calls()) - before)
                await b.cleanup(namespaces)

            for rep in range(repetitions):
                for n in APPLIERS:
                    env = {"applier": {"DRIFTBUS_CONCURRENCY": str(PER_APPLIER)}}
                    async with b.pipeline(n, role_env=env, quick_claim=True) as d:
                        await measured(str(n), d.cold_apply(objs))
                await measured("raw", b.raw_apply(labelled(objs)))
                print(
                    f"  webhook rep {rep + 1}/{repetitions}: "
                    + ", ".join(f"{k}: {objects / v[-1].seconds:.0f}/s" for k, v in runs.items()),
                    file=sys.stderr,
                    flush=True,
                )
    check_writes(runs, objects)
    # every write passed the webhook (a create is reviewed once; nothing was written twice)
    assert all(set(v) == {objects} for v in reviewed.values()), reviewed

    def rates(key: str) -> list[float]:
        return [objects / r.seconds for r in runs[key]]

    params = {
        "objects": objects,
        "webhook_delay_s": delay,
        "in_flight_per_applier": PER_APPLIER,
        "curve": {k: round(statistics.median(rates(k)), 1) for k in runs},
        "apiserver_cpu_share": {
            k: round(statistics.median(r.apiserver_cpu for r in v), 3) for k, v in runs.items()
        },
        "machine_busy_share": {
            k: round(statistics.median(r.machine_busy for r in v), 3) for k, v in runs.items()
        },
        "writes": {k: v[0].writes for k, v in runs.items()},
        "reviews": {k: v[0] for k, v in reviewed.items()},
    }
    return [
        Result(
            "webhook-4-vs-1-appliers",
            "objects/s",
            rates("4"),
            "1 applier",
            rates("1"),
            params,
            target="ratio ≥ 3.5",
        ),
        Result(
            "webhook-8-appliers-vs-raw-limit",
            "objects/s",
            rates("8"),
            "raw SSA, 16 in flight",
            rates("raw"),
            params,
            target="ratio ≥ 0.8",
        ),
    ]


def run(*, objects: int = 1000, repetitions: int = 3, delay: float = 0.02) -> list[Result]:
    return asyncio.run(_main(objects, repetitions, delay))
