"""One bundle publish is one trace across processes (issue 8, item 1).

The services and the CLI run as real processes exporting spans over OTLP/HTTP — the exporter
users configure — to a receiver in this test that keeps them in memory. The trace context
crosses every process boundary in the NATS message headers (W3C ``traceparent``).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from aiohttp import web
from nats.aio.client import Client as NATS
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from harness.pipeline import Pipeline
from services.controlplane import servers

from .test_cli import driftbus, write_bundle


class Receiver:
    """An OTLP/HTTP trace endpoint that keeps every span in memory."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.port = servers.free_port()
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def export(request: web.Request) -> web.Response:
            req = ExportTraceServiceRequest.FromString(await request.read())
            for rs in req.resource_spans:
                service = next(
                    (
                        a.value.string_value
                        for a in rs.resource.attributes
                        if a.key == "service.name"
                    ),
                    "?",
                )
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        self.spans.append(
                            {
                                "service": service,
                                "name": sp.name,
                                "trace": sp.trace_id.hex(),
                                "id": sp.span_id.hex(),
                                "parent": sp.parent_span_id.hex(),
                                "attributes": {
                                    a.key: a.value.string_value or a.value.int_value
                                    for a in sp.attributes
                                },
                            }
                        )
            return web.Response(
                body=ExportTraceServiceResponse().SerializeToString(),
                content_type="application/x-protobuf",
            )

        app = web.Application()
        app.router.add_post("/v1/traces", export)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


async def test_one_publish_is_one_connected_trace_across_all_services(
    pipeline: Pipeline, pnc: NATS, namespace: str, tmp_path: Path, measured: Any
) -> None:
    receiver = Receiver()
    await receiver.start()
    try:
        pipeline.extra_env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",  # export every 100 ms instead of every 5 s
        }
        pipeline.start_all()
        # The cluster is new: the planner claims it only once this first bundle exists, and
        # meets the bundle in its rebuild; the intents it then sends continue the trace.
        c = pipeline.cluster
        src = write_bundle(tmp_path / "src", namespace, n=5)
        code, out, err = await driftbus(
            pipeline, "publish", str(src), "--cluster", c, "--bundle", "traced",
            "--revision", "r1", "--wait", "--timeout", "60",
        )  # fmt: skip
        assert code == 0, f"{out}\n{err}\n{pipeline.logs()}"

        def trace_of_publish() -> list[dict[str, Any]]:
            roots = [s for s in receiver.spans if s["name"] == "publish bundle"]
            if not roots:
                return []
            return [s for s in receiver.spans if s["trace"] == roots[0]["trace"]]

        wanted = {"driftbus-cli", "driftbus-planner", "driftbus-applier", "driftbus-watcher"}
        deadline = time.monotonic() + 30
        while True:
            spans = trace_of_publish()
            services = {s["service"] for s in spans}
            ready = [
                s
                for s in spans
                if s["name"] == "publish bundle status" and s["attributes"].get("phase") == "Ready"
            ]
            if wanted <= services and ready:
                break
            assert time.monotonic() < deadline, (
                f"trace incomplete: services {services}, names "
                f"{sorted({s['name'] for s in spans})}\n{pipeline.logs()}"
            )
            await asyncio.sleep(0.2)
        await asyncio.sleep(0.5)  # late spans of the same trace
        spans = trace_of_publish()

        # connected: one root, and every other span's parent is a span of this same trace
        ids = {s["id"] for s in spans}
        roots = [s for s in spans if not s["parent"]]
        assert [r["name"] for r in roots] == ["publish bundle"], roots
        orphans = [s for s in spans if s["parent"] and s["parent"] not in ids]
        assert not orphans, orphans
        names_by_service: dict[str, set[str]] = defaultdict(set)
        for s in spans:
            names_by_service[s["service"]].add(s["name"])
        assert {"plan bundle", "decide", "plan applied", "publish bundle status"} <= (
            names_by_service["driftbus-planner"]
        )
        assert "apply" in names_by_service["driftbus-applier"]
        assert "watch bundle kinds" in names_by_service["driftbus-watcher"]
        # the chain publish → decision → intent → apply → applied → status, for one object
        by_id = {s["id"]: s for s in spans}
        status = ready[0]
        chain = [status["name"]]
        node = status
        while node["parent"]:
            node = by_id[node["parent"]]
            chain.append(f"{node['service'].removeprefix('driftbus-')}:{node['name']}")
        assert chain == [
            "publish bundle status",
            "planner:plan applied",
            "applier:apply",
            "planner:decide",
            "planner:plan bundle",
            "cli:publish bundle",
        ], chain
        applies = [s for s in spans if s["name"] == "apply"]
        assert all(a["attributes"].get("object") for a in applies)
        decides = [s for s in spans if s["name"] == "decide"]
        assert {d["attributes"].get("reason") for d in decides} >= {"new"}
        for d in decides:
            assert d["attributes"].get("bundle") == "traced", d
            assert d["attributes"].get("revision") == "r1", d
            assert d["attributes"].get("cluster") == c, d
        measured(
            f"one publish → one trace: {len(spans)} spans from "
            f"{', '.join(sorted(names_by_service))}; Ready status reached via " + " ← ".join(chain)
        )
    finally:
        await receiver.stop()
