"""Fixtures wiring the real servers into tests.

* ``stack`` (session): nats-server with JetStream + etcd + kube-apiserver on loopback ports.
* ``kube`` (session): a KubeClient of the stack's cluster, admin identity.
* ``namespace`` (per test): a fresh namespace with a unique name, emptied after the test.
* ``second_cluster``, ``third_cluster`` (session, on demand): more independent etcd +
  kube-apiserver pairs (multi-cluster tests).
* ``nc`` / ``js`` (per test): a NATS connection and its JetStream context.

Server logs are attached to the report of every failing test that used them, and the session
fails if any server process outlives it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from services.controlplane import assets, servers
from services.kube import KubeClient
from services.kube.errors import NotFound, Retryable

_SESSION_ROOT_KEY = pytest.StashKey[Path]()
_LOGS_KEY = pytest.StashKey[dict[str, Path]]()
_counter = itertools.count()
NAMESPACES_MADE = pytest.StashKey[list[str]]()
"""Namespaces a test made (``namespace``), emptied once its services stopped."""


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for name in ("nats-server", "etcd", "kube-apiserver"):
        path = assets.find(name)
        version = assets.version_of(name, path) if path else "missing (run: make assets)"
        lines.append(f"{name}: {version} ({path})")
    return lines


def _compile_bytecode() -> None:
    """Python's bytecode of the project and its dependencies, written once before the run.

    Every service, CLI call and server helper of the suite is a fresh ``python`` process. Where
    the environment says ``PYTHONDONTWRITEBYTECODE`` (container images often do) and nothing was
    compiled beforehand, each of those processes compiles every module it imports from source:
    ~0.7 s of CPU more per process, half of the CPU of a file like test_pipeline.py. Compiled
    bytecode is still read under that setting; Python checks each file against its source, so a
    stale one is never used. (``make deps`` compiles the dependencies as uv installs them.)
    """
    import compileall
    import importlib.util
    import site

    if not sys.dont_write_bytecode:
        return  # the processes cache what they import themselves
    root = Path(__file__).resolve().parents[1]
    for name in ("services", "schemas", "harness", "bench", "tests"):
        # in this process: ~0.05 s when nothing changed (a pool of workers takes ~1 s to start)
        compileall.compile_dir(root / name, quiet=2, workers=1)
    cached = importlib.util.cache_from_source(nats.__file__ or "")
    if not Path(cached).exists():  # a virtualenv synced without compiling its packages
        for directory in site.getsitepackages():
            # a read-only one (a system Python's) would be compiled in memory and the writes
            # refused, on every run: left as it is
            if os.access(directory, os.W_OK):
                compileall.compile_dir(directory, quiet=2, workers=0)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LOGS_KEY] = {}
    if not hasattr(config, "workerinput"):  # once, in the controller (not per xdist worker)
        _compile_bytecode()
    # `driftbus up` writes a context file that commands read when NATS_URL is unset: never the
    # user's own (~/.config/driftbus), and one per worker (inherited by every subprocess)
    import tempfile

    os.environ["DRIFTBUS_UP_CONTEXT"] = str(
        Path(tempfile.mkdtemp(prefix="driftbus-context-")) / "context.json"
    )
    # the services a test starts are forked warm, not started cold (harness/warm.py: most of
    # the suite's CPU was interpreters starting and importing)
    from harness.pipeline import Pipeline

    Pipeline.warm = True


_MEASURED = "driftbus-measured"


@pytest.fixture
def measured(request: pytest.FixtureRequest) -> Any:
    """Record a figure a test measured; all of them are printed at the end of the run. They
    travel in the test's report, so figures measured on pytest-xdist workers arrive too."""

    def record(text: str) -> None:
        request.node.user_properties.append((_MEASURED, text))

    return record


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = [
        str(value)
        for reports in terminalreporter.stats.values()
        for report in reports
        if getattr(report, "when", "") == "call"
        for name, value in getattr(report, "user_properties", ())
        if name == _MEASURED
    ]
    if lines:
        terminalreporter.section("driftbus measurements")
        for line in lines:
            terminalreporter.write_line(line)


_SERVER_FIXTURES = {
    "stack",
    "kube",
    "namespace",
    "second_cluster",
    "third_cluster",
    "nc",
    "js",
    "nats_url",
}


LONGEST_FILES = {
    "test_bench_smoke.py": 606,
    "test_corpus.py": 289,
    "test_fleet.py": 224,
    "test_faults.py": 213,
    "test_cli_up.py": 139,
    "test_sharding.py": 137,
    "test_windows.py": 135,
    "test_cli_up_fleet.py": 134,
    "test_oci.py": 128,
    "test_pipeline.py": 128,
    "test_scaling.py": 124,
}
"""Seconds a worker spent on each of the longest files (``make test`` on two workers, before it
had three): only their order is used. pytest-xdist hands out whole files (``--dist loadfile``) in
collection order when told ``--no-loadscope-reorder`` (``make test`` does); by default it sorts
files by their number of tests, which put these few-but-long files last, each one alone on a
worker at the end."""


def _run_order(item: pytest.Item) -> tuple[int, int]:
    """The longest files first, the other integration tests next, the unit tests (short, and
    many: they fill in the end) last."""
    path = item.path
    return ("integration" not in path.parts, -LONGEST_FILES.get(path.name, 0))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    items.sort(key=_run_order)  # stable: a file's tests keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        for name, path in item.config.stash[_LOGS_KEY].items():
            report.sections.append((f"server log: {name} ({path})", servers.log_tail(path, 40)))
    return report


_ORPHANS_KEY = pytest.StashKey[list[str]]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Every fixture is torn down by now: any server still alive is an orphan, and a defect.
    config = session.config
    root = config.stash.get(_SESSION_ROOT_KEY, None)
    left = sorted(set(servers.still_running()) | set(servers.orphans(str(root)) if root else set()))
    for line in left:
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), 9)
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: the controller reports them
        config.workeroutput["driftbus_orphans"] = left
        return
    left += config.stash.get(_ORPHANS_KEY, [])
    if left:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        msg = "orphan server processes left behind (killed now):\n  " + "\n  ".join(left)
        if tr is not None:
            tr.write_line(msg, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist: a worker finished; keep the orphans it found for the session's verdict."""
    left = getattr(node, "workeroutput", {}).get("driftbus_orphans", [])
    node.config.stash.setdefault(_ORPHANS_KEY, []).extend(left)


@pytest.fixture(scope="session")
def stack(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[servers.Stack]:
    pytestconfig.stash[_SESSION_ROOT_KEY] = tmp_path_factory.getbasetemp()
    root = tmp_path_factory.mktemp("stack")
    st = servers.Stack.start(root, cluster_name="test")
    pytestconfig.stash[_LOGS_KEY].update(st.logs())
    try:
        yield st
    finally:
        st.stop()


def _extra_cluster(
    name: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[servers.Cluster]:
    pytestconfig.stash[_SESSION_ROOT_KEY] = tmp_path_factory.getbasetemp()
    root = tmp_path_factory.mktemp(name)
    cluster = servers.Cluster.start(name, root)
    pytestconfig.stash[_LOGS_KEY].update({f"{name}/{k}": v for k, v in cluster.logs().items()})
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def second_cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[servers.Cluster]:
    yield from _extra_cluster("second", tmp_path_factory, pytestconfig)


@pytest.fixture(scope="session")
def third_cluster(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[servers.Cluster]:
    yield from _extra_cluster("third", tmp_path_factory, pytestconfig)


@contextlib.asynccontextmanager
async def kube_client(stack: servers.Stack) -> AsyncIterator[KubeClient]:
    """An admin client of the stack's API server, closed afterwards."""
    client = await KubeClient.from_kubeconfig(str(stack.cluster.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="session")
async def kube(stack: servers.Stack) -> AsyncIterator[KubeClient]:
    async with kube_client(stack) as client:
        yield client


def unique_name(prefix: str) -> str:
    """A DNS-label-safe name unique within the session (tests isolate by name, like envtest)."""
    return f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def namespace(kube: KubeClient, request: pytest.FixtureRequest) -> str:
    base = request.node.name.lower().replace("_", "-")
    name = unique_name("".join(c for c in base if c.isalnum() or c == "-")[:30].strip("-") or "t")
    await kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        field_manager="driftbus-tests",
    )
    # No namespace controller runs, so deleting would leave it Terminating forever; unique
    # names keep tests apart, and the test's objects are deleted afterwards (tests/integration's
    # conftest): left behind, every later test's watcher would list and publish them all.
    request.node.stash.setdefault(NAMESPACES_MADE, []).append(name)
    return name


async def empty_namespace(kube: KubeClient, name: str) -> None:
    """Delete every object in the namespace, as the namespace controller would: one
    deletecollection per namespaced resource the API server serves (no grace period: no kubelet
    runs to finish a Pod's). A collection too big to delete within the API server's own request
    timeout on a loaded machine (10,000 ConfigMaps: 504) is asked again: each call deletes
    what is left."""
    for path in await _namespaced_collections(kube, name):
        for attempt in range(1, 6):
            try:
                await kube.request("DELETE", path, params={"gracePeriodSeconds": "0"}, timeout=300)
            except NotFound:
                pass
            except Retryable:
                if attempt == 5:
                    raise
                continue
            break


async def _namespaced_collections(kube: KubeClient, namespace: str) -> list[str]:
    lists = [("/api/v1", await kube.get_path("/api/v1"))]
    for group in (await kube.get_path("/apis")).get("groups", []):
        base = f"/apis/{group['preferredVersion']['groupVersion']}"
        with contextlib.suppress(NotFound):
            lists.append((base, await kube.get_path(base)))
    return [
        f"{base}/namespaces/{namespace}/{r['name']}"
        for base, body in lists
        for r in body.get("resources", [])
        if r.get("namespaced") and "/" not in r["name"] and "deletecollection" in r.get("verbs", [])
    ]


@pytest.fixture
def nats_url(stack: servers.Stack) -> str:
    return stack.nats.client_url


@pytest.fixture
async def nc(nats_url: str) -> AsyncIterator[NATS]:
    client = await nats.connect(nats_url, max_reconnect_attempts=2, connect_timeout=5)
    try:
        yield client
    finally:
        await client.drain()


@pytest.fixture
def js(nc: NATS) -> JetStreamContext:
    return nc.jetstream()
