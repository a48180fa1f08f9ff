"""The rollout driver in process against a real nats-server: how it carries out a step."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import nats
import pytest

from schemas.fleet import RolloutSpec
from schemas.messages import BundleOptions
from schemas.subjects import family_filter
from services.clusters import registry
from services.common import bus
from services.controlplane import servers
from services.fleet.driver.drive import PLACEMENTS_AT_ONCE, Driver
from services.fleet.driver.placing import Placer
from services.fleet.publish import publish_fleet


async def test_a_step_is_placed_with_several_placements_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One acknowledged publish after the other, a step of 2,700 clusters took the driver two
    minutes (fleet-sim, 3,000 clusters), and no cluster's planner could start before its
    placement came. A step of 100 clusters has several placements in flight at once, never
    more than ``PLACEMENTS_AT_ONCE``, and every cluster gets its placement once."""
    server = servers.NatsServer(tmp_path / "nats")  # its own: the driver drives every fleet
    server.start()
    nc = await nats.connect(server.client_url)
    in_flight = most = 0
    real_perform = Placer.perform

    async def counted(self: Placer, state: Any, action: Any) -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await real_perform(self, state, action)
        finally:
            in_flight -= 1

    monkeypatch.setattr(Placer, "perform", counted)
    try:
        js = nc.jetstream()
        await bus.ensure_streams(js)
        names = [f"step-{i:03d}" for i in range(100)]
        for name in names:
            await registry.register(
                js, name, labels={"step": "all"}, kube_version="v1.36.3", by="test"
            )
        driver = Driver(js, driver_id="d0", tick=0.2, lease_interval=0.5, lease_timeout=3.0)
        task = asyncio.create_task(driver.run())
        try:
            await publish_fleet(
                js,
                bundle="stepped",
                revision="r1",
                manifests=[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}],
                options=BundleOptions(),
                selector="step=all",
                rollout=RolloutSpec(steps=[], bake=0.0),
            )
            placed: dict[str, int] = {}
            async with asyncio.timeout(60):
                while len(placed) < len(names):
                    placed = await bus.stream_subjects(js, bus.BUNDLES, family_filter("bundle"))
                    await asyncio.sleep(0.2)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        assert len(placed) == len(names)
        assert 1 < most <= PLACEMENTS_AT_ONCE, f"{most} placements in flight at most"
    finally:
        await nc.close()
        server.stop()
