"""The real stack for the end-to-end scenarios, and the peers measured against the same API server.

One etcd + kube-apiserver per scenario (``servers.Cluster``), a fresh nats-server per driftbus run
so every run starts from empty streams, and the services as real ``driftbus`` processes
(``harness.pipeline``). The peers talk to the same API server:

* ``kubectl apply --server-side -f DIR`` with the kubectl built from the same Kubernetes version;
* the physical limit: raw server-side-apply PATCHes from one aiohttp client, 16 in flight;
* a cache-less loop: that raw apply of every object, every reconcile.

Between runs every object is removed with one deletecollection per resource and namespace, so
each run creates the same objects from nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
import nats
import orjson
import yaml
from nats.aio.client import Client as NATS

from harness.pipeline import (
    FAST_HEARTBEATS,
    Pipeline,
    StatusWatch,
    planner_ready,
    write_counts,
)
from schemas.messages import BundlePhase, BundleStatus
from schemas.tenants import TenantPolicy
from services.common import bus
from services.controlplane import assets, servers
from services.core.manifest import FIELD_MANAGER, owned
from services.tenancy.store import put_policy

CRD_GROUP = "bench.driftbus.dev"
BUNDLE = "bench"

# kind -> (API path prefix, plural, share of the mix)
KINDS: dict[str, tuple[str, str, float]] = {
    "ConfigMap": ("/api/v1", "configmaps", 0.35),
    "Secret": ("/api/v1", "secrets", 0.15),
    "Service": ("/api/v1", "services", 0.15),
    "Deployment": ("/apis/apps/v1", "deployments", 0.15),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", 0.05),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", 0.05),
    "Widget": (f"/apis/{CRD_GROUP}/v1", "widgets", 0.10),
}

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{CRD_GROUP}"},
    "spec": {
        "group": CRD_GROUP,
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "size": {"type": "integer"},
                                    "color": {"type": "string"},
                                    "tags": {"type": "array", "items": {"type": "string"}},
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def namespaces_for(objects: int) -> list[str]:
    return [f"bench-{i}" for i in range(max(1, objects // 100))]


def manifests(objects: int, *, seed: int = 1) -> list[dict[str, Any]]:
    """A realistic, deterministic mix of ``objects`` manifests (see ``KINDS``)."""
    rng = random.Random(seed)
    nss = namespaces_for(objects)
    kinds = list(KINDS)
    weights = [KINDS[k][2] for k in kinds]
    out = []
    for i in range(objects):
        kind = rng.choices(kinds, weights)[0]
        ns = nss[i % len(nss)]
        out.append(_manifest(rng, kind, f"{kind.lower()}-{i}", ns))
    return out


def _manifest(rng: random.Random, kind: str, name: str, ns: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/name": name}}
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    if kind == "ConfigMap":
        data = {f"key-{k}": " ".join(rng.choices(words, k=rng.randint(3, 40))) for k in range(5)}
        return {"apiVersion": "v1", "kind": kind, "metadata": meta, "data": data}
    if kind == "Secret":
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "type": "Opaque",
            "stringData": {"password": f"{rng.getrandbits(128):032x}"},
        }
    if kind == "Service":
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": meta,
            "spec": {
                "selector": {"app.kubernetes.io/name": name},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        }
    if kind == "Deployment":
        labels = {"app.kubernetes.io/name": name}
        return {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": meta,
            "spec": {
                "replicas": rng.randint(1, 3),
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": f"registry.example/app:{rng.randint(1, 99)}",
                                "ports": [{"containerPort": 8080}],
                                "env": [{"name": "MODE", "value": rng.choice(words)}],
                                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                            }
                        ]
                    },
                },
            },
        }
    if kind == "Role":
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]},
            ],
        }
    if kind == "RoleBinding":
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": kind,
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}],
        }
    return {
        "apiVersion": f"{CRD_GROUP}/v1",
        "kind": "Widget",
        "metadata": meta,
        "spec": {"size": rng.randint(1, 100), "color": rng.choice(words), "tags": words[:3]},
    }


def object_path(obj: dict[str, Any]) -> str:
    prefix, plural, _ = KINDS[obj["kind"]]
    meta = obj["metadata"]
    return f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU time of the whole machine so far, from /proc/stat (all cores)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"{field} not in /proc/{pid}/status")


@dataclasses.dataclass
class Run:
    seconds: float
    apiserver_cpu: float
    """Share of the whole machine the API server used during the run (0..1)."""
    writes: int
    writes_by: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    machine_busy: float = 0.0
    """Share of the whole machine's CPU that was busy during the run (0..1)."""
    cpu_by_process: dict[str, float] = dataclasses.field(default_factory=dict)
    """CPU seconds (user + system) each of the given processes used during the run."""


def check_writes(runs: dict[str, list[Run]], objects: int) -> None:
    """Every contender created exactly the ``objects`` objects in every run, no more, no less."""
    for name, rs in runs.items():
        wrote = {r.writes for r in rs}
        assert wrote == {objects}, f"{name} wrote {[r.writes_by for r in rs]} for {objects} objects"


QUICK_CLAIM_EVERYWHERE = False
"""Set by the smoke tests (``tests/integration/test_bench_smoke.py``): every pipeline's planner
claims its cluster in ~1 s, as with ``quick_claim``. The warm-up is never measured, so no result
changes; the real runs keep the defaults, which ``up`` and its tests exercise too."""


class BenchStack:
    """A cluster for one scenario: API server, raw client, fresh pipelines, peers, cleanup."""

    def __init__(self, workdir: Path, cluster: servers.Cluster, http: aiohttp.ClientSession):
        self.workdir = workdir
        self.cluster = cluster
        self.http = http
        self.runs = 0

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        objects: int,
        *,
        controllers: bool = False,
        namespaces: list[str] | None = None,
        users: list[servers.User] | None = None,
    ) -> AsyncIterator[BenchStack]:
        """A fresh cluster (with kube-controller-manager, kube-scheduler and kwok when
        ``controllers``; with token ``users`` besides the admin), its ``namespaces`` (the mix's
        for ``objects`` by default) and the CRD."""
        workdir = Path(tempfile.mkdtemp(prefix="driftbus-bench-"))
        cluster = await asyncio.to_thread(
            servers.Cluster.start,
            "bench",
            workdir / "cluster",
            controllers=controllers,
            users=users or [],
        )
        api = cluster.apiserver
        connector = aiohttp.TCPConnector(ssl=api.ssl_context(), limit=64)
        headers = {"Authorization": f"Bearer {api.admin_token}"}
        try:
            async with aiohttp.ClientSession(api.url, connector=connector, headers=headers) as http:
                b = cls(workdir, cluster, http)
                await b.prepare(namespaces or namespaces_for(objects))
                yield b
        finally:
            await asyncio.to_thread(cluster.stop)
            shutil.rmtree(workdir, ignore_errors=True)

    @property
    def api(self) -> servers.KubeAPIServer:
        return self.cluster.apiserver

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        async with self.http.request(method, path, **kw) as r:
            body = await r.read()
            if r.status >= 400 and r.status != 409:
                raise RuntimeError(f"{method} {path}: {r.status} {body[:300]!r}")
            return orjson.loads(body) if body else None

    async def apply(
        self, path: str, obj: dict[str, Any], field_manager: str = "bench-setup"
    ) -> None:
        """One server-side apply of ``obj`` at ``path`` (forced)."""
        await self.request(
            "PATCH",
            path,
            params={"fieldManager": field_manager, "force": "true"},
            data=orjson.dumps(obj),
            headers={"Content-Type": "application/apply-patch+yaml"},
        )

    async def prepare(self, namespaces: list[str]) -> None:
        """Namespaces and the CRD exist before anything is timed (for every contender)."""
        for obj in [CRD] + [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in namespaces
        ]:
            path = (
                f"/api/v1/namespaces/{obj['metadata']['name']}"
                if obj["kind"] == "Namespace"
                else f"{CRDS_PATH}/{CRD['metadata']['name']}"
            )
            await self.apply(path, obj)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the CRD's resource is served when discovery has it
            async with self.http.get(f"/apis/{CRD_GROUP}/v1") as r:
                if r.status == 200 and "widgets" in (await r.text()):
                    return
            await asyncio.sleep(0.2)
        raise RuntimeError("the bench CRD was never served")

    async def cleanup(self, namespaces: Iterable[str]) -> None:
        """Remove every benchmark object (one deletecollection per resource and namespace)."""
        calls = [
            self.request("DELETE", f"{prefix}/namespaces/{ns}/{plural}")
            for ns in namespaces
            for prefix, plural, _ in KINDS.values()
        ]
        await asyncio.gather(*calls)

    # --- contenders -----------------------------------------------------------------------

    async def measured(self, work: Awaitable[Any], processes: dict[str, int] | None = None) -> Run:
        """Time ``work`` and what it cost the API server (and each of ``processes``, name → pid,
        in CPU seconds)."""
        pid = self.api.process.pid if self.api.process else 0
        writes0, cpu0, (busy0, total0) = write_counts(self.api), cpu_seconds(pid), machine_busy()
        procs0 = {name: cpu_seconds(p) for name, p in (processes or {}).items()}
        start = time.perf_counter()
        await work
        seconds = time.perf_counter() - start
        cpu = cpu_seconds(pid) - cpu0
        used = {name: cpu_seconds((processes or {})[name]) - c for name, c in procs0.items()}
        busy1, total1 = machine_busy()
        by = write_counts(self.api) - writes0
        return Run(
            seconds,
            cpu / seconds / (os.cpu_count() or 1),
            sum(by.values()),
            dict(by),
            (busy1 - busy0) / max(total1 - total0, 1e-9),
            used,
        )

    async def raw_apply(self, objs: list[dict[str, Any]], *, in_flight: int = 16) -> list[float]:
        """The physical limit: server-side apply of each object, ``in_flight`` at a time.

        Returns the latency of every PATCH.
        """
        queue = list(reversed(objs))
        latencies: list[float] = []

        async def worker() -> None:
            while queue:
                obj = queue.pop()
                start = time.perf_counter()
                await self.apply(object_path(obj), obj, FIELD_MANAGER)
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return latencies

    def manifest_dir(self, objs: list[dict[str, Any]]) -> Path:
        directory = self.workdir / f"manifests-{len(objs)}"
        if not directory.exists():
            directory.mkdir()
            (directory / "all.yaml").write_text(yaml.safe_dump_all(objs, sort_keys=False))
        return directory

    async def kubectl_apply(self, directory: Path) -> None:
        kubectl = await asyncio.to_thread(assets.ensure, "kubectl")
        proc = await asyncio.create_subprocess_exec(
            str(kubectl),
            "--kubeconfig",
            str(self.cluster.kubeconfig),
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            str(directory),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = await proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"kubectl apply failed ({proc.returncode}): {err[-2000:]!r}")

    @contextlib.asynccontextmanager
    async def pipeline(
        self,
        appliers: int,
        *,
        start: bool = True,
        sync_interval: str = "",
        bundle: str = BUNDLE,
        policy: TenantPolicy | None = None,
        role_env: dict[str, dict[str, str]] | None = None,
        quick_claim: bool = False,
    ) -> AsyncIterator[DriftbusRun]:
        """A fresh nats-server (JetStream fsync policy ``sync_interval``, the server's default
        when empty), the tenant ``policy`` in force if given, and (unless ``start=False``) the
        services, warmed up and idle; the run publishes ``bundle``. ``quick_claim`` shortens the
        planner's heartbeats as the tests do (it claims the cluster in ~1 s instead of ~10 s;
        nothing timed depends on it)."""
        self.runs += 1
        workdir = self.workdir / f"run-{self.runs}"
        nats_server = servers.NatsServer(workdir / "nats", sync_interval=sync_interval)
        await asyncio.to_thread(nats_server.start)
        stack = servers.Stack(workdir, self.cluster, nats_server)
        p = Pipeline(stack=stack, nats=nats_server, cluster="bench", workdir=workdir)
        p.log_level = "INFO"
        p.role_env = role_env or {}
        if quick_claim or QUICK_CLAIM_EVERYWHERE:
            p.planner_env = dict(FAST_HEARTBEATS)
        nc = await nats.connect(nats_server.client_url)
        try:
            run = DriftbusRun(p, nc, appliers, bundle)
            await bus.ensure_streams(run.js)
            if policy is not None:
                await put_policy(run.js, policy)
            if start:
                await run.start()
            yield run
        finally:
            await nc.drain()
            await asyncio.to_thread(p.stop_all)
            await asyncio.to_thread(nats_server.stop)


class DriftbusRun:
    def __init__(self, p: Pipeline, nc: NATS, appliers: int, bundle: str = BUNDLE) -> None:
        self.p = p
        self.bundle = bundle
        self.nc = nc
        self.js = nc.jetstream()
        self.appliers = appliers
        self.watch = StatusWatch()
        self.revisions = 0

    async def start(self) -> None:
        await self.watch.start(self.nc, self.p.cluster, self.bundle)
        self.p.start_all(appliers=self.appliers)
        # warm: every applier is waiting for intents and the planner is live
        deadline = time.monotonic() + 60
        consumer = bus.intent_consumer_name(self.p.cluster)
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                info = await self.js.consumer_info(bus.INTENTS, consumer)
                if info.num_waiting >= self.appliers and await planner_ready(self.js):
                    return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"driftbus never became ready\n{self.p.logs()}")

    async def publish(self, objs: list[dict[str, Any]], revision: str | None = None) -> str:
        if revision is None:
            self.revisions += 1
            revision = f"r{self.revisions}"
        await self.p.publish(self.js, self.bundle, objs, revision=revision, force=True)
        return revision

    async def applied(self, revision: str, total: int, within: float = 600) -> BundleStatus:
        """Until every object of ``revision`` is applied (Deployments never become Ready here:
        there is no controller-manager in the benchmark stack)."""

        def done(s: BundleStatus) -> bool:
            if s.revision == revision and s.phase is BundlePhase.FAILED:
                raise RuntimeError(f"bench bundle failed: {s.message} {s.failed_objects[:5]}")
            return s.revision == revision and s.counts.applied == total

        return await self.watch.until(done, within, self.p.logs)

    def pids(self) -> dict[str, int]:
        """The services' processes (watcher, planner, applier-N), name → pid."""
        return {name: p.pid for name, p in self.p.procs.items()}

    async def cold_apply(self, objs: list[dict[str, Any]]) -> None:
        revision = await self.publish(objs)
        # 600 s, or more for big bundles: 100,000 objects take ~13 min on two shared cores
        await self.applied(revision, len(objs), within=max(600.0, len(objs) / 50))


def labelled(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The peers apply exactly what driftbus applies: the manifests with the ownership label."""
    return [owned(o, BUNDLE) for o in objs]
