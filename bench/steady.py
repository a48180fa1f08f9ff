"""Scenarios `steady` and `drift`: what a reconcile costs when (almost) nothing changed.

``steady`` (issue 5, item 2): after a cold apply, one repetition is 10 republishes of the same
revision, a planner SIGKILL + restart and a watcher restart (a full resync from the SERVER
stream plus a relist) — 12 reconciles. API write requests come from the API server's own
``apiserver_request_total``. The peer is a cache-less loop over the same objects: server-side
apply of every object every reconcile, which is what an agent without a SHA cache does.

``drift`` (item 3): 1 % of the objects (ConfigMaps) are changed out of band at once by another
field manager. Writes by driftbus must equal the number of drifted objects; the hit ratio is the
planner's own decision records over the repetition (the drift plus one republish of the bundle);
time-to-correct is from the intruder's PATCH returning to the watch event showing the object
restored. Peers: the cache-less loop (N writes to correct the same drift) and one server-side
apply PATCH's latency (the physical floor of a correction).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from nats.aio.client import Client as NATS

from bench.report import Result
from bench.stack import BenchStack, DriftbusRun, labelled, manifests, object_path
from harness.pipeline import write_counts, writes_since
from schemas.codec import decision_records
from schemas.decision import DecisionAction
from schemas.subjects import family_filter
from services.core.manifest import OWNER_LABEL
from services.kube import KubeClient, Resource

RECONCILES_PER_REPETITION = 12  # 10 republishes, a planner restart, a watcher resync


class Decisions:
    """Counts the planner's decision records by action, as they are published."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.changed = asyncio.Event()

    async def start(self, nc: NATS) -> None:
        async def on_msg(msg: Any) -> None:
            for record in decision_records(msg.subject, msg.data):
                self.counts[str(record.action)] += 1
            self.changed.set()

        await nc.subscribe(family_filter("decision"), cb=on_msg)

    async def until(self, action: DecisionAction, count: int, within: float = 120) -> None:
        deadline = time.monotonic() + within
        while self.counts[str(action)] < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.counts[str(action)]} of {count} {action} decisions")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)


async def _log_grows(d: DriftbusRun, proc: str, text: str, before: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while d.p.procs[proc].log_path.read_text(errors="replace").count(text) <= before:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{proc} never logged {text!r}\n{d.p.logs()}")
        await asyncio.sleep(0.1)


def _count(d: DriftbusRun, proc: str, text: str) -> int:
    return d.p.procs[proc].log_path.read_text(errors="replace").count(text)


@contextlib.asynccontextmanager
async def _applied_stack(objects: int) -> AsyncIterator[tuple[BenchStack, DriftbusRun, Decisions]]:
    objs = manifests(objects)
    async with BenchStack.start(objects) as b, b.pipeline(4) as d:
        decisions = Decisions()
        await decisions.start(d.nc)
        await d.cold_apply(objs)
        await asyncio.sleep(2)  # the watch events of our own applies arrive and settle
        yield b, d, decisions


async def _steady(objects: int, repetitions: int) -> list[Result]:
    objs = manifests(objects)
    ours: list[float] = []
    theirs: list[float] = []
    async with _applied_stack(objects) as (b, d, decisions):
        for rep in range(repetitions):
            before = write_counts(b.api)
            for _ in range(10):
                hits = decisions.counts[str(DecisionAction.HIT)]
                await d.publish(objs, revision="r1")
                await decisions.until(DecisionAction.HIT, hits + objects)
            lives = _count(d, "planner", "; live")
            d.p.kill("planner")
            d.p.start("planner")
            await _log_grows(d, "planner", "; live", lives)
            seeded = _count(d, "watcher", "seeded")
            d.p.procs["watcher"].stop()
            d.p.start("watcher")
            await _log_grows(d, "watcher", "seeded", seeded)
            await asyncio.sleep(3)  # the relist's events reach the planner
            ours.append(writes_since(b.api, before) / RECONCILES_PER_REPETITION)
            run = await b.measured(b.raw_apply(labelled(objs)))
            theirs.append(float(run.writes))
            print(
                f"  steady rep {rep + 1}/{repetitions}: driftbus {ours[-1]:.0f} writes/reconcile, "
                f"cache-less {theirs[-1]:.0f}",
                file=sys.stderr,
                flush=True,
            )
    return [
        Result(
            "steady-state-writes-per-reconcile",
            "writes",
            ours,
            "cache-less loop (apply all)",
            theirs,
            {
                "objects": objects,
                "reconciles_per_repetition": RECONCILES_PER_REPETITION,
                "reconciles": "10 republishes, planner SIGKILL+restart, watcher restart",
            },
            higher_is_better=False,
            target="driftbus = 0",
        )
    ]


class Restored:
    """Watches ConfigMaps of the bundle; records when each returns to its desired data."""

    def __init__(self, b: BenchStack) -> None:
        self.b = b
        self.seen: dict[str, tuple[float, dict[str, Any]]] = {}
        self.changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.kube = await KubeClient.from_kubeconfig(str(self.b.cluster.kubeconfig))
        res = await self.kube.discovery.resource("v1", "ConfigMap")
        _, rv = await self.kube.list(res, label_selector=OWNER_LABEL)
        self._task = asyncio.create_task(self._watch(res, rv))

    async def _watch(self, res: Resource, rv: str) -> None:
        async for ev in self.kube.watch(
            res, resource_version=rv, label_selector=OWNER_LABEL, timeout_seconds=3600
        ):
            if ev.type in ("ADDED", "MODIFIED"):
                name = ev.object["metadata"]["name"]
                self.seen[name] = (time.perf_counter(), ev.object.get("data") or {})
                self.changed.set()

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.kube.close()

    async def until(self, name: str, data: dict[str, Any], after: float) -> float:
        deadline = time.monotonic() + 60
        while True:
            at, seen = self.seen.get(name, (0.0, {}))
            if at > after and seen == data:
                return at - after
            if time.monotonic() > deadline:
                raise RuntimeError(f"ConfigMap {name} was never restored")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 1.0)


async def _drift(objects: int, repetitions: int) -> list[Result]:
    objs = manifests(objects)
    configmaps = [o for o in objs if o["kind"] == "ConfigMap"]
    drifted = max(1, objects // 100)
    writes: list[float] = []
    loop_writes: list[float] = []
    ratios: list[float] = []
    times: list[float] = []
    patch_latencies: list[float] = []
    async with _applied_stack(objects) as (b, d, decisions):
        restored = Restored(b)
        await restored.start()
        try:
            for rep in range(repetitions):
                targets = configmaps[rep * drifted : (rep + 1) * drifted]
                before = write_counts(b.api)
                counted = collections.Counter(decisions.counts)

                async def intrude(cm: dict[str, Any]) -> float:
                    # the intruder takes over one field driftbus owns (as `kubectl edit` would)
                    first = next(iter(cm["data"]))
                    changed = {**cm, "data": {first: "changed by hand"}}
                    await b.request(
                        "PATCH",
                        object_path(cm),
                        params={"fieldManager": "intruder", "force": "true"},
                        data=orjson.dumps(changed),
                        headers={"Content-Type": "application/apply-patch+yaml"},
                    )
                    return time.perf_counter()

                at = await asyncio.gather(*(intrude(cm) for cm in targets))
                took = await asyncio.gather(
                    *(
                        restored.until(cm["metadata"]["name"], cm["data"], t)
                        for cm, t in zip(targets, at, strict=True)
                    )
                )
                times += took
                await asyncio.sleep(2)  # anything else driftbus would do, it does now
                corrections = writes_since(b.api, before) - len(targets)  # minus the intruder's
                writes.append(float(corrections))
                hits = decisions.counts[str(DecisionAction.HIT)]
                await d.publish(objs, revision="r1")  # the reconcile that finds the rest intact
                await decisions.until(DecisionAction.HIT, hits + objects)
                delta = decisions.counts - counted
                ratios.append(delta[str(DecisionAction.HIT)] / sum(delta.values()))
                # the peer: a cache-less loop corrects the same drift by applying everything
                run = await b.measured(b.raw_apply(labelled(objs)))
                loop_writes.append(float(run.writes))
                patch_latencies += await b.raw_apply(labelled(targets), in_flight=1)
                print(
                    f"  drift rep {rep + 1}/{repetitions}: {len(targets)} drifted, "
                    f"{corrections} corrections, hit ratio {ratios[-1]:.4f}, "
                    f"time-to-correct p50 {statistics.median(took):.3f}s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            await restored.stop()
    p99, floor_p99 = _p99(times), _p99(patch_latencies)
    params = {"objects": objects, "drifted_per_repetition": drifted, "samples": len(times)}
    return [
        Result(
            "drift-writes",
            "writes",
            writes,
            "cache-less loop (apply all)",
            loop_writes,
            params,
            higher_is_better=False,
            target=f"driftbus = {drifted} (the drifted objects)",
        ),
        Result(
            "drift-hit-ratio",
            "ratio",
            ratios,
            "target",
            [0.99] * len(ratios),
            params,
            target="ratio ≥ 1",
        ),
        Result(
            "drift-time-to-correct-p50",
            "s",
            [statistics.median(times)],
            "one SSA PATCH (p50)",
            [statistics.median(patch_latencies)],
            params,
            higher_is_better=False,
        ),
        Result(
            "drift-time-to-correct-p99",
            "s",
            [p99],
            "one SSA PATCH (p99)",
            [floor_p99],
            params,
            higher_is_better=False,
        ),
    ]


def _p99(xs: list[float]) -> float:
    """The 99th percentile; with fewer than two samples (a smoke run) the only one there is."""
    return statistics.quantiles(xs, n=100, method="inclusive")[98] if len(xs) > 1 else max(xs)


def run_steady(*, objects: int = 1000, repetitions: int = 3) -> list[Result]:
    return asyncio.run(_steady(objects, repetitions))


def run_drift(*, objects: int = 1000, repetitions: int = 3) -> list[Result]:
    return asyncio.run(_drift(objects, repetitions))
