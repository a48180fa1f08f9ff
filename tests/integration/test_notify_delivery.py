"""``driftbus notify``'s delivery on a real nats-server (issue 41): what one tenant's receivers
do to the others', and what a restart or a second replica does to what is sent.

The bundle statuses are published as the planner publishes them (the streams made as the planner
makes them); the notify service is the real one, sending to real HTTP servers on loopback (which
tenants reach only with ``--tenant-egress``), one of them a tarpit: it accepts connections and
never answers.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import settle
from schemas.codec import encode
from schemas.messages import BundleCounts, BundlePhase, BundleStatus
from schemas.subjects import bundle_status_subject
from services.common import bus
from services.controlplane import servers

from ..conftest import unique_name
from .test_notify import Receiver, notifier, notify_command, until

pytestmark = pytest.mark.integration

CLUSTER = "prod-1"


class Tarpit:
    """A TCP server that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.connections = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._held: list[asyncio.StreamWriter] = []

    async def _hold(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._held.append(writer)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0, backlog=1024)
        host, port = self._server.sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        for w in self._held:
            w.close()
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def nats_url(tmp_path: Path) -> AsyncIterator[str]:
    """A nats-server with the streams and buckets, as the planner makes them."""
    server = servers.NatsServer(tmp_path / "nats")
    await asyncio.to_thread(server.start)
    try:
        nc = NATS()
        await nc.connect(server.client_url)
        try:
            await bus.ensure_streams(nc.jetstream())
        finally:
            await nc.close()
        yield server.client_url
    finally:
        server.stop()


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NATS]:
    c = NATS()
    await c.connect(nats_url)
    try:
        yield c
    finally:
        await c.drain()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver.running() as r:
        yield r


async def publish_status(
    js: bus.JetStream, bundle: str, revision: str, phase: BundlePhase, ready: int = 1
) -> None:
    """A bundle's status, as the planner publishes it (again on every count change)."""
    status = BundleStatus(
        cluster=CLUSTER,
        bundle=bundle,
        revision=revision,
        phase=phase,
        counts=BundleCounts(total=2, applied=2, ready=ready),
    )
    await bus.publish(js, bundle_status_subject(CLUSTER, bundle), encode(status))


def hook_file(tmp_path: Path, name: str, url: str, bundles: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"providers:\n- name: hook\n  type: webhook\n  url: {url}\n"
        "alerts:\n- providers: [hook]\n  events: [Ready, Failed, Progressing]\n"
        + (f'  bundles: ["{bundles}"]\n' if bundles else "")
    )
    return path


async def test_one_tenants_tarpit_does_not_starve_another_tenants_notifications(
    nats_url: str,
    nc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Tenant a's 120 webhooks at a tarpit hold connections until they time out; tenant b's
    webhook, and the platform's, are delivered at once all the same (each has its own share of
    connections and queue)."""
    js = nc.jetstream()
    a, b = unique_name("ta"), unique_name("tb")
    tarpit = Tarpit()
    await tarpit.start()
    try:
        hooks = "".join(
            f"- name: h{i}\n  type: webhook\n  url: {tarpit.url}/h{i}\n" for i in range(120)
        )
        names = ", ".join(f"h{i}" for i in range(120))
        fa = tmp_path / "a.yaml"
        fa.write_text(f"providers:\n{hooks}alerts:\n- providers: [{names}]\n  events: [Ready]\n")
        for f, tenant in (
            (fa, a),
            (hook_file(tmp_path, "b", f"{receiver.url}/tenant-b"), b),
            (hook_file(tmp_path, "p", f"{receiver.url}/platform", f"{b}/*"), ""),
        ):
            argv = ("--tenant", tenant) if tenant else ()
            code, _, err = await notify_command(nats_url, capsys, "apply", str(f), *argv)
            assert code == 0, err

        async with notifier(nats_url, js, http_timeout=10.0, retries=2):
            await publish_status(js, f"{a}/web", "r1", BundlePhase.READY)
            await until(lambda: tarpit.connections >= 10, "tenant a's webhooks at the tarpit")
            await settle(1.0)  # every one of a's 120 requests is under way, or waiting for one
            held = tarpit.connections
            published = time.monotonic()
            await publish_status(js, f"{b}/web", "r1", BundlePhase.READY)
            for prefix in ("/tenant-b", "/platform"):
                await until(
                    lambda p=prefix: receiver.delivered(p),  # type: ignore[misc]
                    f"{prefix}'s Ready delivered within 4 s while tenant a's "
                    f"{held} connections to the tarpit hang",
                    within=4.0,
                )
            took = time.monotonic() - published
    finally:
        await tarpit.stop()
    assert receiver.problems == [], receiver.problems
    assert [d["bundle"] for d in receiver.delivered("/tenant-b")] == [f"{b}/web"]
    assert took < 4.0
    # a's share: at most its own connections at once, however many webhooks it names
    assert held <= 10, held


async def test_events_published_while_notify_was_down_are_sent_when_it_is_back(
    nats_url: str,
    nc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The notify restart test: a status change published while the service was down is sent
    when it is back — once, and the one sent before is not sent again; one older than the age
    limit is not sent (the log says so)."""
    js = nc.jetstream()
    bundle = unique_name("web")
    f = hook_file(tmp_path, "p", f"{receiver.url}/platform", bundle)
    code, _, err = await notify_command(nats_url, capsys, "apply", str(f))
    assert code == 0, err

    def kinds() -> list[tuple[str, str]]:
        return [(d["kind"], d["revision"]) for d in receiver.delivered("/platform")]

    async with notifier(nats_url, js):
        await publish_status(js, bundle, "r1", BundlePhase.READY)
        await until(lambda: kinds() == [("Ready", "r1")], "r1's Ready sent")
    # the service is down: the next revision fails
    await publish_status(js, bundle, "r2", BundlePhase.FAILED, ready=0)
    async with notifier(nats_url, js):
        await until(
            lambda: ("Failed", "r2") in kinds(),
            f"r2's Failed, published while notify was down, sent once it is back (sent: {kinds()})",
        )
        await settle(1.0)
    assert kinds() == [("Ready", "r1"), ("Failed", "r2")]

    # down again, for longer than the age limit: not sent, and said
    await publish_status(js, bundle, "r3", BundlePhase.READY)
    await asyncio.sleep(2.0)  # the age the event must have: time itself is the subject
    caplog.set_level(logging.WARNING, logger="services.notify")
    async with notifier(nats_url, js, max_age=1.0):
        await until(
            lambda: any("older than its age limit" in r.getMessage() for r in caplog.records),
            "r3's Ready dropped as too old",
        )
        await settle(0.5)
    assert kinds() == [("Ready", "r1"), ("Failed", "r2")]
    assert receiver.problems == [], receiver.problems


async def test_two_replicas_send_each_event_once(
    nats_url: str,
    nc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two notify replicas: every phase change of ten bundles (each status published again on
    a count change, as the planner does) reaches the webhook exactly once."""
    js = nc.jetstream()
    prefix = unique_name("rep")
    f = hook_file(tmp_path, "p", f"{receiver.url}/platform", f"{prefix}-*")
    code, _, err = await notify_command(nats_url, capsys, "apply", str(f))
    assert code == 0, err
    bundles = [f"{prefix}-{i}" for i in range(10)]
    async with notifier(nats_url, js), notifier(nats_url, js):
        for phase, ready in (
            (BundlePhase.RECONCILING, 0),
            (BundlePhase.RECONCILING, 1),  # a count change: no news
            (BundlePhase.READY, 2),
            (BundlePhase.READY, 2),  # published again: no news
            (BundlePhase.FAILED, 1),
        ):
            for b in bundles:
                await publish_status(js, b, "r1", phase, ready)
        await until(
            lambda: len(receiver.delivered("/platform")) >= 30,
            "three phases of ten bundles sent",
        )
        await settle(2.0)
    assert receiver.problems == [], receiver.problems
    sent = collections.Counter((d["bundle"], d["kind"]) for d in receiver.delivered("/platform"))
    twice = {k: n for k, n in sent.items() if n != 1}
    assert not twice, f"sent more than once: {twice}"
    assert sorted(sent) == sorted(
        (b, k) for b in bundles for k in ("Progressing", "Ready", "Failed")
    )
