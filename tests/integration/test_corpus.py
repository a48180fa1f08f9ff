"""Real install manifests other projects ship (``../shared/corpus/``), published as a user would.

Each directory is one bundle, published with the real CLI (``driftbus publish DIR -n NS``, the
namespace its README names) to a fresh API server + nats-server of its own — the webhooks these
installs register (Gatekeeper's on Namespaces, ingress-nginx's on Ingresses) would otherwise
refuse other tests' objects, since no webhook server runs here. Every object must be applied
(health may stay InProgress: no controllers run), and an identical republish must cost zero API
writes. Objects, writes and time per directory go to the measurements summary.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from schemas.messages import BundleStatus
from services.common.kube import KubeClient
from services.common.load import load_paths
from services.controlplane import servers

from .test_trust_cli import driftbus

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
NAMESPACE_FROM_README = {"argo-cd": "argocd", "kubernetes-examples": "default"}
"""Directories whose objects name no namespace: the one their README says to apply them to."""
DIRECTORIES = (
    sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else ["none"]
)  # "none": one case, reported skipped with the reason below


@pytest.fixture
async def own_stack(tmp_path: Path) -> AsyncIterator[servers.Stack]:
    stack = await asyncio.to_thread(servers.Stack.start, tmp_path / "stack", cluster_name="corpus")
    try:
        yield stack
    finally:
        await asyncio.to_thread(stack.stop)


def applied_all(st: BundleStatus) -> bool:
    c = st.counts
    return c.total > 0 and c.applied == c.total and c.failed == 0 and c.pruning == 0


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS} (../shared/corpus)")
@pytest.mark.parametrize("directory", DIRECTORIES)
async def test_every_object_of_a_real_install_is_applied_and_a_republish_writes_nothing(
    directory: str, own_stack: servers.Stack, tmp_path: Path, measured: Any
) -> None:
    pipeline = Pipeline(
        stack=own_stack, nats=own_stack.nats, cluster="corpus", workdir=tmp_path / "services"
    )
    pipeline.workdir.mkdir()
    pipeline.planner_env = {"DRIFTBUS_HEARTBEAT_INTERVAL": "0.5", "DRIFTBUS_HEARTBEAT_TIMEOUT": "3"}
    namespace = NAMESPACE_FROM_README.get(directory)
    # As a user does first (`kubectl create namespace argocd`): the namespaces the objects are
    # for that the directory does not create itself. kubectl apply would fail without them too.
    loaded = load_paths([str(CORPUS / directory)])
    declared = {m.obj["metadata"]["name"] for m in loaded.manifests if m.obj["kind"] == "Namespace"}
    needed = {m.obj["metadata"].get("namespace") for m in loaded.manifests} | {namespace}
    kube = await KubeClient.from_kubeconfig(str(own_stack.cluster.kubeconfig))
    try:
        for ns in sorted(n for n in needed - declared - {None, "default"} if n):
            await kube.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                field_manager="corpus-test",
            )
    finally:
        await kube.close()
    nc = await nats.connect(own_stack.nats.client_url)
    try:
        watch = StatusWatch()
        await watch.start(nc, "corpus", directory)
        pipeline.start_all(appliers=2)
        before = write_counts(own_stack.cluster.apiserver)
        started = time.monotonic()
        args = ["publish", str(CORPUS / directory), "--cluster", "corpus", "--bundle", directory]
        if namespace:
            args += ["-n", namespace]
        code, out, err = await driftbus(own_stack.nats.client_url, *args)
        assert code == 0, f"{out}\n{err}"
        done = await watch.until(applied_all, 240, pipeline.logs)
        took = time.monotonic() - started
        writes = writes_since(own_stack.cluster.apiserver, before)
        await settle(3)

        quiet = write_counts(own_stack.cluster.apiserver)
        code, out, err = await driftbus(own_stack.nats.client_url, *args)
        assert code == 0, f"{out}\n{err}"
        await settle(5)
        again = writes_since(own_stack.cluster.apiserver, quiet)
        assert again == 0, f"an identical republish of {directory} wrote {again} times"
        measured(
            f"corpus {directory}: {done.counts.total} objects applied in {took:.1f} s with "
            f"{writes} API writes (all clients, status subresources not counted) "
            f"(phase {done.phase}, {done.counts.ready} ready); "
            f"identical republish: {again} writes"
        )
    finally:
        pipeline.stop_all()
        await nc.drain()
