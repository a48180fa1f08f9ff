"""Scenario `durability`: what the safer JetStream fsync policy costs (issue 6, item 6).

driftbus ships nats-server with ``sync_interval: always`` (docs/durability.md): a message is
acknowledged only once it is fsynced, so a node that crashes loses nothing it acknowledged.
The server's default fsyncs every 2 minutes. Both are measured in the same run, interleaved:

* the bus alone: the services' ``Publisher`` (bounded in-flight publishes with message ids)
  sending small facts into a file-backed stream on a fresh nats-server;
* end to end: N objects cold-applied through the whole pipeline with 4 appliers.

The ratio is ``always`` / default: throughput for the bus (lower is the cost), seconds for the
end-to-end run (higher is the cost).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import nats

from bench.report import Result
from bench.stack import BenchStack, manifests, namespaces_for
from services.common import bus
from services.controlplane import servers

MESSAGES = 20_000
PAYLOAD = (
    b'{"schema":"driftbus.server/v1","server_sha":"' + b"0" * 64 + b'","pad":"' + b"x" * 300 + b'"}'
)


async def _publish_rate(workdir: Path, sync_interval: str) -> float:
    server = servers.NatsServer(workdir, sync_interval=sync_interval)
    await asyncio.to_thread(server.start)
    nc = await nats.connect(server.client_url)
    try:
        js = nc.jetstream()
        await bus.ensure_streams(js)
        pub = bus.Publisher(js)
        started = time.perf_counter()
        for i in range(MESSAGES):
            await pub.publish(
                f"driftbus.server.bench.=.ConfigMap.ns.cm-{i}", PAYLOAD, msg_id=str(i)
            )
        await pub.flush()
        return MESSAGES / (time.perf_counter() - started)
    finally:
        await nc.drain()
        await asyncio.to_thread(server.stop)


async def _main(objects: int, repetitions: int) -> list[Result]:
    rates: dict[str, list[float]] = {"always": [], "default": []}
    seconds: dict[str, list[float]] = {"always": [], "default": []}
    with tempfile.TemporaryDirectory(prefix="driftbus-bench-durability-") as tmp:
        for rep in range(repetitions):
            for policy in ("always", "default"):
                where = Path(tmp) / f"{policy}-{rep}"
                rates[policy].append(
                    await _publish_rate(where, "always" if policy == "always" else "")
                )
        print(
            "  bus publishes/s: "
            + ", ".join(f"{k} {[round(x) for x in v]}" for k, v in rates.items()),
            file=sys.stderr,
            flush=True,
        )
    objs = manifests(objects)
    async with BenchStack.start(objects) as b:
        for rep in range(repetitions):
            for policy in ("always", "default"):
                sync = "always" if policy == "always" else ""
                async with b.pipeline(4, sync_interval=sync) as d:
                    run = await b.measured(d.cold_apply(objs))
                    assert run.writes == objects, run.writes_by
                    seconds[policy].append(run.seconds)
                await b.cleanup(namespaces_for(objects))
            print(
                f"  durability rep {rep + 1}/{repetitions}: "
                + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in seconds.items()),
                file=sys.stderr,
                flush=True,
            )
    params = {"messages": MESSAGES, "payload_bytes": len(PAYLOAD), "objects": objects}
    return [
        Result(
            "bus-publish-rate-fsync-always",
            "msg/s",
            rates["always"],
            "server default (fsync every 2 min)",
            rates["default"],
            params,
            target="reported (the cost of not losing acknowledged writes)",
        ),
        Result(
            "cold-apply-fsync-always",
            "s",
            seconds["always"],
            "server default (fsync every 2 min)",
            seconds["default"],
            params,
            higher_is_better=False,
            target="reported",
        ),
    ]


def run(*, objects: int = 1000, repetitions: int = 3) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
