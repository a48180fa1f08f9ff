"""Scenario `cold`: N objects from nothing to applied (issue 5, item 1).

Contenders, interleaved in every repetition against the same API server:

* driftbus with 1 and with 4 appliers: publish → every object applied, as the bundle status
  reports it (Deployments cannot become Ready: the bench stack has no controller-manager);
* ``kubectl apply --server-side -f DIR``, kubectl from the same Kubernetes version;
* the physical limit: raw server-side-apply PATCHes from one aiohttp client, 16 in flight.

Namespaces and the CRD exist before anything is timed; every run creates the same objects.
Targets: driftbus (4 appliers) ≤ 0.5 × kubectl and ≤ 1.3 × the raw limit, and the CPU all its
processes use (reported per process: watcher, planner, appliers) ≤ 0.5 ms per object, and the
NATS messages they send and receive (nats-server's counters, per role: ``natstraffic``) ≤ 3 per
object.
"""

from __future__ import annotations

import asyncio
import statistics
import sys

from bench import natstraffic
from bench.report import Result
from bench.stack import BenchStack, Run, check_writes, labelled, manifests, namespaces_for

CPU_TARGET_MS = 0.5
MESSAGES_TARGET = 3.0
"""NATS messages per object applied (issue 33), all driftbus processes, sent and delivered."""


async def _main(objects: int, repetitions: int) -> list[Result]:
    objs = manifests(objects)
    peer_objs = labelled(objs)
    runs: dict[str, list[Run]] = {"driftbus-1": [], "driftbus-4": [], "kubectl": [], "raw": []}
    traffic: dict[str, list[dict[str, natstraffic.Traffic]]] = {"driftbus-1": [], "driftbus-4": []}
    heads: dict[str, list[tuple[dict[str, int], dict[str, int]]]] = {
        "driftbus-1": [],
        "driftbus-4": [],
    }
    async with BenchStack.start(objects) as b:
        directory = b.manifest_dir(peer_objs)
        for rep in range(repetitions):
            for appliers in (1, 4):
                async with b.pipeline(appliers) as d:
                    before = natstraffic.by_role(d.p.nats)
                    first = await natstraffic.stream_heads(d.js)
                    run = await b.measured(d.cold_apply(objs), d.pids())
                    runs[f"driftbus-{appliers}"].append(run)
                    after = natstraffic.by_role(d.p.nats)
                    traffic[f"driftbus-{appliers}"].append(natstraffic.delta(before, after))
                    heads[f"driftbus-{appliers}"].append(
                        (first, await natstraffic.stream_heads(d.js))
                    )
                await b.cleanup(namespaces_for(objects))
            runs["kubectl"].append(await b.measured(b.kubectl_apply(directory)))
            await b.cleanup(namespaces_for(objects))
            runs["raw"].append(await b.measured(b.raw_apply(peer_objs)))
            await b.cleanup(namespaces_for(objects))
            print(
                f"  cold rep {rep + 1}/{repetitions}: "
                + ", ".join(f"{k} {v[-1].seconds:.2f}s" for k, v in runs.items()),
                file=sys.stderr,
                flush=True,
            )
    check_writes(runs, objects)

    def secs(name: str) -> list[float]:
        return [r.seconds for r in runs[name]]

    cpu = cpu_per_object(runs["driftbus-4"], objects)
    params = {
        "objects": objects,
        "driftbus_cpu_ms_per_object": cpu,
        "nats_messages_per_object": {
            k: natstraffic.per_object(v, objects) for k, v in traffic.items()
        },
        "stream_messages_per_object": {
            k: natstraffic.per_stream(v, objects) for k, v in heads.items()
        },
        "mix": "35% ConfigMap, 15% Secret, 15% Service, 15% Deployment, 10% RBAC, 10% CR",
        "apiserver_cpu_share": {
            k: round(statistics.median(r.apiserver_cpu for r in v), 3) for k, v in runs.items()
        },
        "writes": {k: v[0].writes for k, v in runs.items()},
        "machine_busy_share": {
            k: round(statistics.median(r.machine_busy for r in v), 3) for k, v in runs.items()
        },
    }
    return [
        Result(
            "cold-apply-4-appliers-vs-kubectl",
            "s",
            secs("driftbus-4"),
            "kubectl apply --server-side",
            secs("kubectl"),
            params,
            higher_is_better=False,
            target="ratio ≤ 0.5",
        ),
        Result(
            "cold-apply-4-appliers-vs-raw-limit",
            "s",
            secs("driftbus-4"),
            "raw SSA, 16 in flight",
            secs("raw"),
            params,
            higher_is_better=False,
            target="ratio ≤ 1.3",
        ),
        Result(
            "cold-apply-4-appliers-cpu-per-object",
            "ms",
            [sum(r.cpu_by_process.values()) / objects * 1e3 for r in runs["driftbus-4"]],
            "target",
            [CPU_TARGET_MS] * len(runs["driftbus-4"]),
            params,
            higher_is_better=False,
            target="ratio ≤ 1 (all driftbus processes ≤ 0.5 ms per object)",
        ),
        Result(
            "cold-apply-4-appliers-nats-messages-per-object",
            "msgs",
            [messages(t, objects) for t in traffic["driftbus-4"]],
            "target",
            [MESSAGES_TARGET] * len(traffic["driftbus-4"]),
            params,
            higher_is_better=False,
            target="ratio ≤ 1 (≤ 3 NATS messages per object, all processes, sent and delivered)",
        ),
        Result(
            "cold-apply-1-applier-vs-kubectl",
            "s",
            secs("driftbus-1"),
            "kubectl apply --server-side",
            secs("kubectl"),
            params,
            higher_is_better=False,
        ),
    ]


def messages(traffic: dict[str, natstraffic.Traffic], objects: int) -> float:
    """NATS messages per object, every driftbus process, sent and delivered."""
    return sum(t.sent + t.delivered for t in traffic.values()) / objects


def cpu_per_object(runs: list[Run], objects: int) -> dict[str, float]:
    """Median CPU milliseconds per object of each role (the appliers summed) and in all."""
    roles: dict[str, list[float]] = {}
    for r in runs:
        per_role: dict[str, float] = {}
        for name, secs in r.cpu_by_process.items():
            role = name.split("-", 1)[0]
            per_role[role] = per_role.get(role, 0.0) + secs
        per_role["all"] = sum(r.cpu_by_process.values())
        for role, secs in per_role.items():
            roles.setdefault(role, []).append(secs / objects * 1e3)
    return {role: round(statistics.median(v), 3) for role, v in roles.items()}


def run(*, objects: int = 1000, repetitions: int = 3) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
