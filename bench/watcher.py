"""Scenario `watcher`: pruned + hashed events per second, and RSS, with 50,000 watched objects.

50,000 labelled ConfigMaps are created once (raw SSA, 16 in flight; not timed). Each repetition
starts a watcher against a fresh nats-server — an empty SERVER stream, so it must list, prune,
hash and publish every object — and times from its first published event to the last. Its
resident memory (VmRSS, and the peak VmHWM) is read from /proc once all are published.

Peers: reading the same objects with one aiohttp client (paginated list, 500 per page, JSON
decoded: the floor of any watcher) for events/s; for memory, the 200 MiB Plural reports for its
SHA-cache agent.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import orjson

from bench.report import Result
from bench.stack import BUNDLE, BenchStack, labelled, namespaces_for, rss_bytes
from schemas.codec import server_events
from services.common import bus
from services.core.manifest import OWNER_LABEL

PLURAL_AGENT_RSS = 200 * 1024 * 1024


def _configmaps(objects: int) -> list[dict[str, Any]]:
    nss = namespaces_for(objects)
    return labelled(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"watched-{i}", "namespace": nss[i % len(nss)]},
                "data": {"index": str(i), "payload": "x" * 200},
            }
            for i in range(objects)
        ]
    )


async def _raw_list(b: BenchStack) -> int:
    count, cont = 0, ""
    while True:
        params = {"labelSelector": f"{OWNER_LABEL}={BUNDLE}", "limit": "500"}
        if cont:
            params["continue"] = cont
        async with b.http.get("/api/v1/configmaps", params=params) as r:
            page = orjson.loads(await r.read())
        count += len(page["items"])
        cont = page["metadata"].get("continue", "")
        if not cont:
            return count


def _import_rss() -> int:
    """What importing the watcher costs before it watches anything (peak RSS, bytes)."""
    code = (
        "import resource, services.cli.main, services.watcher.service;"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout) * 1024


async def _main(objects: int, repetitions: int) -> list[Result]:
    rates: list[float] = []
    list_rates: list[float] = []
    rss: list[float] = []
    peaks: list[float] = []
    async with BenchStack.start(objects) as b:
        start = time.perf_counter()
        await b.raw_apply(_configmaps(objects))
        print(
            f"  created {objects:,} ConfigMaps in {time.perf_counter() - start:.0f}s",
            file=sys.stderr,
            flush=True,
        )
        for rep in range(repetitions):
            async with b.pipeline(0, start=False) as d:
                started = time.perf_counter()
                proc = d.p.start("watcher", None, "--extra-kinds", "v1/ConfigMap")
                first = done = 0.0
                facts, seq = 0, 1
                deadline = time.monotonic() + 900
                while time.monotonic() < deadline:
                    # facts come in batches (a list page each): count what they carry
                    while (
                        m := await bus.next_message(d.js, bus.SERVER, "driftbus.server.>", seq)
                    ) is not None:
                        facts += len(server_events(m.subject or "", m.data or b""))
                        seq = (m.seq or seq) + 1
                    now = time.perf_counter()
                    if facts and not first:
                        first = now
                    if facts >= objects:
                        done = now
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise RuntimeError(f"watcher published too little\n{d.p.logs()}")
                # from the first event on: Python's start-up is not event throughput (at tiny N,
                # where all arrive within one poll, from the process start instead)
                rates.append(objects / (done - first if done > first else done - started))
                rss.append(float(rss_bytes(proc.pid)))
                peaks.append(float(rss_bytes(proc.pid, "VmHWM")))
            start = time.perf_counter()
            listed = await _raw_list(b)
            assert listed == objects, f"listed {listed} of {objects}"
            list_rates.append(objects / (time.perf_counter() - start))
            print(
                f"  watcher rep {rep + 1}/{repetitions}: {rates[-1]:,.0f} events/s, "
                f"RSS {rss[-1] / 2**20:.0f} MiB (peak {peaks[-1] / 2**20:.0f} MiB); "
                f"raw list {list_rates[-1]:,.0f} objects/s",
                file=sys.stderr,
                flush=True,
            )
    params = {
        "objects": objects,
        "rss_idle_import_bytes": _import_rss(),
        "rss_peak_bytes": peaks,
        "rss_bytes_per_object": [r / objects for r in rss],
    }
    return [
        Result(
            "watcher-events-per-s",
            "events/s",
            rates,
            "raw list + JSON decode",
            list_rates,
            params,
        ),
        Result(
            "watcher-rss",
            "bytes",
            rss,
            "Plural agent (published)",
            [float(PLURAL_AGENT_RSS)] * len(rss),
            params,
            higher_is_better=False,
        ),
    ]


def run(*, objects: int = 50_000, repetitions: int = 3) -> list[Result]:
    return asyncio.run(_main(objects, repetitions))
