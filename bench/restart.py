"""Scenario `restart`: a planner SIGKILLed and started again on one cluster of 100,000 objects
(issue 44: "planner restart with 100,000 objects: ready again ≤ 10 s, 0 writes").

A real nats-server and a real planner process; no API server (a planner never asks one). The
cluster is registered, its bundle of 100,000 ConfigMaps published as ``driftbus publish`` does
(the Object Store), and the planner started: it decides every object new and sends its intents.
The bench then answers them as the applier and the watcher would — per object the applied fact
and the watcher's server fact (health Ready), through the bus's ``Publisher`` on the per-object
subjects they write — and the planner, live, folds them, and writes the cluster's checkpoint
``checkpoint_interval`` after (its own: nothing of it is seeded). The bench waits until that
checkpoint holds every object.

Each repetition then kills the planner (SIGKILL) and starts it again, twice, interleaved: once
as it runs by default (from the checkpoint and the facts above it, ``from checkpoint``) and once
with ``--checkpoint-interval 0`` (every object's facts replayed, as before checkpoints: the
peer). Measured: seconds from the start of the process to ``/readyz`` (the cluster claimed,
rebuilt and live), and the intents it sent after (its writes: none, every object a hit).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from bench.fleetsim import readyz, until
from bench.fleetsim_members import configmaps
from bench.plan import _intake
from bench.report import Result
from harness.pipeline import FAST_HEARTBEATS
from schemas.codec import decode, encode
from schemas.messages import AppliedEvent, BundleOptions, Health, IntentBatch, Queued, ServerEvent
from schemas.subjects import object_subject
from services.clusters import registry
from services.common import bus
from services.controlplane import servers
from services.planner.rule import messages
from services.revisions.publish import publish_bundle

CLUSTER, BUNDLE = "restart-1", "big"
TARGET_SECONDS = 10.0


async def _until(what: str, probe: Any, within: float) -> None:
    await until(what, probe, within, scenario="restart")


class PlannerProc:
    def __init__(self, workdir: Path, url: str) -> None:
        self.workdir, self.url = workdir, url
        self.port = servers.free_port()
        self.proc: servers.Process | None = None
        self.lives = 0

    def start(self, *, checkpoints: bool) -> float:
        self.lives += 1
        env = {
            **os.environ,
            "NATS_URL": self.url,
            "DRIFTBUS_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            **FAST_HEARTBEATS,
        }
        if not checkpoints:
            env["DRIFTBUS_CHECKPOINT_INTERVAL"] = "0"
        else:
            env.pop("DRIFTBUS_CHECKPOINT_INTERVAL", None)  # the default
        argv = [sys.executable, "-m", "services.cli.main", "planner"]
        argv += ["--planner-id", "planner", "--http-port", str(self.port)]
        self.proc = servers.Process(f"planner-{self.lives}", argv, self.workdir, env=env)
        started = time.monotonic()
        self.proc.start()
        return started

    async def ready(self, within: float) -> None:
        await _until("the planner's /readyz", lambda: asyncio.to_thread(readyz, self.port), within)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()

    def log(self) -> str:
        assert self.proc is not None
        return self.proc.log_path.read_text(errors="replace")


async def _answer(js: bus.JetStream, manifests: list[dict[str, Any]]) -> None:
    """What the applier and the watcher would publish once every object is applied."""
    pub = bus.Publisher(js, max_inflight=2048)
    now = messages.now()
    for i, (key, sha) in enumerate(_intake(BUNDLE, CLUSTER, manifests)):
        live, rv = f"{i:064x}", str(1000 + i)
        applied = AppliedEvent(
            cluster=CLUSTER, key=key, bundle=BUNDLE, revision="r1", manifest_sha=sha.hex(),
            apply_sha=live, resource_version=rv, applied_at=now,
        )  # fmt: skip
        seen = ServerEvent(
            cluster=CLUSTER, key=key, resource_version=rv, bundle=BUNDLE,
            watcher=f"{CLUSTER}-watcher", server_sha=live, health=Health.READY,
        )  # fmt: skip
        subject = object_subject("applied", CLUSTER, key)
        await pub.publish(subject, encode(applied), msg_id=f"{subject}/{rv}")
        subject = object_subject("server", CLUSTER, key)
        await pub.publish(subject, encode(seen), msg_id=f"{subject}/{rv}")
    await pub.flush()


class IntentCount:
    """The intents sent so far, counted in the INTENTS stream by direct gets (a batch holds
    up to 32: its sequence is not a count of intents; nothing consumes the stream here)."""

    def __init__(self) -> None:
        self.seen, self.intents = 0, 0

    async def upto(self, js: bus.JetStream) -> int:
        last = await bus.last_sequence(js, bus.INTENTS)
        for seq in range(self.seen + 1, last + 1):
            msg = await js.get_msg(bus.INTENTS, seq, direct=True)
            queued = decode(msg.data or b"", Queued)  # type: ignore[var-annotated,arg-type]
            self.intents += len(queued.intents) if isinstance(queued, IntentBatch) else 1
        self.seen = max(self.seen, last)
        return self.intents


async def _checkpointed(js: bus.JetStream, objects: int) -> bool:
    from services.cli.plan.state import read_checkpoints

    found = (await read_checkpoints(js, [CLUSTER])).get(CLUSTER)
    return found is not None and sum(1 for e in found.entries.values() if e.live) >= objects


async def _main(workdir: Path, objects: int, repetitions: int) -> dict[str, Any]:
    nats_server = servers.NatsServer(workdir / "nats")
    await asyncio.to_thread(nats_server.start)
    nc = await nats.connect(nats_server.client_url)
    js = nc.jetstream()
    planner = PlannerProc(workdir, nats_server.client_url)
    out: dict[str, Any] = {"checkpoint": [], "facts": [], "writes": {"checkpoint": [], "facts": []}}
    try:
        await bus.ensure_streams(js)
        await bus.ensure_fleet_buckets(js)
        await registry.register(js, CLUSTER, labels={}, kube_version="v1.36.3", by="bench")
        manifests = configmaps(objects)
        print(f"  restart: publishing {objects:,} objects …", file=sys.stderr, flush=True)
        await publish_bundle(
            js, cluster=CLUSTER, bundle=BUNDLE, revision="r1", manifests=manifests,
            options=BundleOptions(), manage_streams=True, within=60,
        )  # fmt: skip
        planner.start(checkpoints=True)
        await planner.ready(600)

        counted = IntentCount()

        async def intents_sent() -> bool:
            return await counted.upto(js) >= objects

        await _until("the first life's intents", intents_sent, 900)
        print("  restart: answering every intent …", file=sys.stderr, flush=True)
        await _answer(js, manifests)
        await _until("the planner's own checkpoint", lambda: _checkpointed(js, objects), 900)
        for rep in range(repetitions):
            for mode in ("checkpoint", "facts"):
                planner.kill()
                sent = await bus.last_sequence(js, bus.INTENTS)
                started = planner.start(checkpoints=mode == "checkpoint")
                await planner.ready(600)
                took = time.monotonic() - started
                await asyncio.sleep(3)  # what it would send after going live
                after = IntentCount()
                after.seen = sent
                writes = await after.upto(js)
                log = planner.log()
                from_checkpoint = "rebuilding from its checkpoint" in log
                if from_checkpoint != (mode == "checkpoint"):
                    raise RuntimeError(
                        f"restart bench: {mode} run read a checkpoint: {log[-2000:]}"
                    )
                out[mode].append(took)
                out["writes"][mode].append(writes)
                print(
                    f"  restart rep {rep + 1}/{repetitions} from {mode}: ready in {took:.1f}s, "
                    f"{writes} intents",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if planner.proc is not None:
            planner.kill()
        await nc.drain()
        await asyncio.to_thread(nats_server.stop)
    return out


def run(*, objects: int = 100_000, repetitions: int = 2) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="driftbus-bench-restart-") as tmp:
        got = asyncio.run(_main(Path(tmp), objects, repetitions))
    writes = got["writes"]
    params = {
        "objects": objects,
        "clusters": 1,
        "mix": "ConfigMaps (fleet-sim's), every one applied and seen Ready before the kill",
        "intents_after_restart": writes,
        "checkpoint": "the planner's own, written checkpoint_interval after the facts",
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    for mode, sent in writes.items():
        if any(sent):
            raise RuntimeError(f"restart bench: a restart from {mode} sent intents: {sent}")
    return [
        Result(
            name=f"restart-planner-{objects}",
            unit="s",
            driftbus_samples=got["checkpoint"],
            peer_name="replaying every fact",
            peer_samples=got["facts"],
            parameters=params,
            higher_is_better=False,
            target="ratio < 1 (the checkpoint spares the replay); 0 intents either way",
        ),
        Result(
            name=f"restart-planner-{objects}-vs-target",
            unit="s",
            driftbus_samples=got["checkpoint"],
            peer_name="target",
            peer_samples=[TARGET_SECONDS] * len(got["checkpoint"]),
            parameters={
                **params,
                "median_seconds_replaying_every_fact": statistics.median(got["facts"]),
            },
            higher_is_better=False,
            target="ratio ≤ 1 (ready again within 10 s, issue 44)",
        ),
    ]
