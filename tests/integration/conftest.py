"""Fixtures for pipeline tests: a private nats-server and the services as real processes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import FAST_HEARTBEATS, Pipeline
from services.controlplane import servers
from services.kube import KubeClient

from ..conftest import NAMESPACES_MADE, empty_namespace, kube_client, unique_name


@pytest.fixture
async def pipeline(stack: servers.Stack, tmp_path: Path) -> AsyncIterator[Pipeline]:
    nats_server = servers.NatsServer(tmp_path / "nats")
    nats_server.start()
    p = Pipeline(stack=stack, nats=nats_server, cluster=unique_name("c"), workdir=tmp_path)
    p.planner_env = dict(FAST_HEARTBEATS)
    try:
        yield p
    finally:
        p.stop_all()
        nats_server.stop()


@contextlib.asynccontextmanager
async def _connected(p: Pipeline) -> AsyncIterator[NATS]:
    """A NATS client of the pipeline's server, drained afterwards."""
    nc = await nats.connect(p.nats.client_url)
    try:
        yield nc
    finally:
        await nc.drain()


@pytest.fixture
async def pnc(pipeline: Pipeline) -> AsyncIterator[NATS]:
    async with _connected(pipeline) as nc:
        yield nc


# A cluster whose controllers run (kube-controller-manager, kube-scheduler, kwok), one per test
# module that asks for it: the tests of issue 15 that need what controllers write.


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.Stack]:
    stack = servers.Stack.start(
        tmp_path_factory.mktemp("live"), cluster_name="live", controllers=True
    )
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
async def live_kube(live: servers.Stack) -> AsyncIterator[KubeClient]:
    async with kube_client(live) as client:
        yield client


@pytest.fixture
async def live_pipeline(live: servers.Stack, tmp_path: Path) -> AsyncIterator[Pipeline]:
    p = Pipeline(stack=live, nats=live.nats, cluster=unique_name("live"), workdir=tmp_path)
    p.planner_env = dict(FAST_HEARTBEATS)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
async def lnc(live_pipeline: Pipeline) -> AsyncIterator[NATS]:
    async with _connected(live_pipeline) as nc:
        yield nc


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    report = yield
    p = getattr(item, "funcargs", {}).get("pipeline")
    if report.failed and isinstance(p, Pipeline):
        report.sections.append(("driftbus service logs", p.logs()))
    return report


@pytest.fixture(autouse=True)
async def _empty_namespaces_after(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Autouse, so set up before and torn down after every other fixture of the test: the
    namespaces are emptied only once the test's services stopped (a running planner would
    restore what is deleted)."""
    yield
    made = request.node.stash.get(NAMESPACES_MADE, [])
    if made:
        kube = request.getfixturevalue("kube")
        for name in made:
            await empty_namespace(kube, name)
