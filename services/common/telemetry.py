"""Metrics, traces and the health endpoints every service serves (docs/observability.md).

Instruments are created on OpenTelemetry's global API where they are used (``meter``), so the
pure core stays free of it and a process that never calls ``setup`` pays nothing. ``setup``
installs a meter provider whose reader is the Prometheus exporter, and — when an OTLP endpoint is
configured — a tracer provider exporting there. ``serve`` starts aiohttp with ``/metrics``,
``/healthz`` (the process answers) and ``/readyz`` (every readiness check of the service holds:
NATS connected, streams bound, initial rebuild or list finished).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from opentelemetry import metrics, propagate, trace
from opentelemetry.context import Context
from opentelemetry.util.types import Attributes

from services.common.settings import setting

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger("driftbus.telemetry")

meter = metrics.get_meter("driftbus")
tracer = trace.get_tracer("driftbus")

# Buckets for the latencies driftbus cares about: milliseconds to a minute.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


@dataclasses.dataclass(frozen=True)
class TelemetrySettings:
    http_port: int = setting(
        0, "port serving /metrics, /healthz and /readyz on all interfaces (0: not served)"
    )
    otlp_endpoint: str = setting(
        "",
        "OTLP/HTTP endpoint traces are sent to, e.g. http://collector:4318 (none by default)",
        env="OTEL_EXPORTER_OTLP_ENDPOINT",
    )


_recording = False
"""Whether this process records spans (an OTLP endpoint is configured): ``span`` asks."""


class Tally:
    """A counter added to once per object on a hot path: a plain count per label values, which
    OpenTelemetry reads only when ``/metrics`` is scraped (an observable counter). The SDK's
    ``Counter.add`` hashes its attributes and takes a lock on every call — about 10 µs, a
    planner deciding 100,000 objects spent a second of them. Same name, labels and meaning on
    ``/metrics`` as a counter."""

    def __init__(self, name: str, description: str, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.counts: collections.Counter[tuple[str, ...]] = collections.Counter()
        meter.create_observable_counter(name, callbacks=[self._observe], description=description)

    def add(self, n: int, *values: str) -> None:
        """Count ``n`` under the label values, in the order of ``labels``."""
        self.counts[values] += n

    def _observe(self, _: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        counts = dict(self.counts)  # one C-level copy: a scrape never sees it change
        return [
            metrics.Observation(v, dict(zip(self.labels, k, strict=True)))
            for k, v in counts.items()
        ]


def span(
    name: str, *, context: Context | None, attributes: Attributes
) -> AbstractContextManager[trace.Span]:
    """A span for one object's work, or none when nothing would see it: this process records no
    spans and the message that caused the work carried no trace (``context`` None). A no-op
    span still costs ~8 µs (a context attached and detached), per intent and per decision."""
    if context is None and not _recording:
        return contextlib.nullcontext(trace.INVALID_SPAN)
    return tracer.start_as_current_span(name, context=context, attributes=attributes)


def setup(service: str, s: TelemetrySettings) -> None:
    """Install the providers for this process (once, at start-up)."""
    global _recording  # set once, at start-up
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create({"service.name": f"driftbus-{service}"})
    metrics.set_meter_provider(
        MeterProvider(
            resource=resource,
            metric_readers=[PrometheusMetricReader()],
            views=[
                View(
                    instrument_name="*_seconds",
                    aggregation=ExplicitBucketHistogramAggregation(LATENCY_BUCKETS),
                )
            ],
        )
    )
    if not s.otlp_endpoint:
        # No exporter: keep the API's no-op tracer. It still passes a message's trace context
        # on (a traced publish stays one trace through this process), but records nothing; an
        # SDK provider without an exporter would build and drop a span per object.
        return
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=resource)
    _recording = True
    endpoint = s.otlp_endpoint.rstrip("/") + "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)


def inject(headers: dict[str, str] | None) -> dict[str, str] | None:
    """``headers`` plus the W3C ``traceparent`` of the current span, if there is one: how a
    trace crosses from one process to the next through a NATS message."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier or None


def traced(headers: dict[str, str] | None) -> Context | None:
    """The trace context a message carries, or None: only traced messages start spans."""
    if not headers or "traceparent" not in headers:
        return None
    return propagate.extract(headers)


def flush() -> None:
    """Send what is buffered (a short-lived CLI command exits right after)."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush()


class Health:
    """Readiness checks a service registers (name → predicate), served on /readyz."""

    def __init__(self) -> None:
        self.checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        self.checks[name] = check

    def report(self) -> tuple[bool, dict[str, bool]]:
        results = {}
        for name, check in self.checks.items():
            try:
                results[name] = bool(check())
            except Exception:  # noqa: BLE001 - a check that cannot tell is a check that fails
                results[name] = False
        return all(results.values()) and bool(results), results


async def serve(port: int, health: Health) -> web.AppRunner | None:
    """Serve /metrics, /healthz and /readyz on ``port`` (nothing when 0)."""
    if not port:
        return None
    # imported here: aiohttp's server side is ~30 ms of every process's start, and only a
    # service given a port serves
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async def metrics_handler(_: web.Request) -> web.Response:
        body = generate_latest()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, results = health.report()
        lines = "".join(f"{'ok' if v else 'not ready'}: {k}\n" for k, v in results.items())
        return web.Response(text=lines or "no checks\n", status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, port=port).start()
    log.info("serving /metrics, /healthz, /readyz", extra={"port": port})
    return runner
