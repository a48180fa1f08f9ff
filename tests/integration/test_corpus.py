"""Real install manifests other projects ship (``../shared/corpus/``), published as a user would,
on a cluster whose controllers run (kube-controller-manager, kube-scheduler, kwok for kubelets).

Each directory is one bundle, published with the real CLI (``driftbus publish DIR -n NS``, the
namespace its README names) to a fresh API server + nats-server of its own — the webhooks these
installs register (Gatekeeper's on Namespaces, ingress-nginx's on Ingresses) would otherwise
refuse other tests' objects, since no webhook server runs here. Every object must be applied and
the bundle must become Ready, except for the objects ``NOT_READY_HERE`` names, each with the
health reason a user would accept on a cluster like this one (no cloud load balancer, no GPU, no
storage provisioner). Then an identical republish and a quiet period of running controllers must
cost zero driftbus writes: its apply/delete decisions are counted (the API server's counters
include the controllers' own writes). Objects, writes and time per directory go to the
measurements summary.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest

from harness.pipeline import FAST_HEARTBEATS, DecisionLog, Pipeline, StatusWatch, settle
from schemas.messages import BundlePhase, BundleStatus
from services.controlplane import servers
from services.inputs.load import load_paths

from ..conftest import kube_client
from .test_trust_cli import driftbus

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
NAMESPACE_FROM_README = {"argo-cd": "argocd", "kubernetes-examples": "default"}
"""Directories whose objects name no namespace: the one their README says to apply them to."""
NOT_READY_HERE: dict[str, dict[str, str]] = {
    "ingress-nginx": {
        # type LoadBalancer: only a cloud's load-balancer controller gives it an address
        "Service/ingress-nginx/ingress-nginx-controller": "waiting for a load balancer address",
    },
    "kubernetes-examples": {
        # asks for nvidia.com/gpu: the fake node has none, its Pod stays Pending
        "Deployment.apps/default/vllm-gemma-deployment": "ready: 0/1",
        # its volumeClaimTemplates use StorageClass "fast" (provisioner k8s.io/minikube-hostpath):
        # no provisioner runs here, the claims and so the Pods stay Pending
        "StatefulSet.apps/default/cassandra": "ready: 0/3",
    },
}
"""Directory → object → a part of the health reason it must give for not being Ready here."""
QUIET = float(os.environ.get("DRIFTBUS_CORPUS_QUIET", "15"))
"""Seconds of running controllers after the republish in which driftbus must not write (600 in
the one-off run the issue asks for: ``DRIFTBUS_CORPUS_QUIET=600``)."""
DIRECTORIES = (
    sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) if CORPUS.is_dir() else ["none"]
)  # "none": one case, reported skipped with the reason below


@pytest.fixture
async def own_stack(tmp_path: Path) -> AsyncIterator[servers.Stack]:
    stack = await asyncio.to_thread(
        servers.Stack.start, tmp_path / "stack", cluster_name="corpus", controllers=True
    )
    try:
        yield stack
    finally:
        await asyncio.to_thread(stack.stop)


def applied_all(st: BundleStatus) -> bool:
    c = st.counts
    return c.total > 0 and c.applied == c.total and c.failed == 0 and c.pruning == 0


def settled(directory: str) -> Callable[[BundleStatus], bool]:
    """Ready, or every object that is not is one ``NOT_READY_HERE`` accepts, for its reason."""
    accepted = NOT_READY_HERE.get(directory, {})

    def done(st: BundleStatus) -> bool:
        if st.phase is BundlePhase.READY:
            return True
        if st.phase is not BundlePhase.RECONCILING or not applied_all(st):
            return False
        if st.counts.ready + len(accepted) != st.counts.total:
            return False
        return all(
            any(line.startswith(f"{obj}: not ready") and why in line for line in st.failed_objects)
            for obj, why in accepted.items()
        )

    return done


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS} (../shared/corpus)")
@pytest.mark.parametrize("directory", DIRECTORIES)
async def test_every_object_of_a_real_install_is_applied_and_a_republish_writes_nothing(
    directory: str, own_stack: servers.Stack, tmp_path: Path, measured: Any
) -> None:
    pipeline = Pipeline(
        stack=own_stack, nats=own_stack.nats, cluster="corpus", workdir=tmp_path / "services"
    )
    pipeline.workdir.mkdir()
    pipeline.planner_env = dict(FAST_HEARTBEATS)
    namespace = NAMESPACE_FROM_README.get(directory)
    # As a user does first (`kubectl create namespace argocd`): the namespaces the objects are
    # for that the directory does not create itself. kubectl apply would fail without them too.
    loaded = load_paths([str(CORPUS / directory)])
    declared = {m.obj["metadata"]["name"] for m in loaded.manifests if m.obj["kind"] == "Namespace"}
    needed = {m.obj["metadata"].get("namespace") for m in loaded.manifests} | {namespace}
    async with kube_client(own_stack) as kube:
        for ns in sorted(n for n in needed - declared - {None, "default"} if n):
            await kube.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                field_manager="corpus-test",
            )
    nc = await nats.connect(own_stack.nats.client_url)
    try:
        watch = StatusWatch()
        await watch.start(nc, "corpus", directory)
        decisions = DecisionLog()
        await decisions.start(nc, "corpus")
        pipeline.start_all(appliers=2)
        started = time.monotonic()
        args = ["publish", str(CORPUS / directory), "--cluster", "corpus", "--bundle", directory]
        if namespace:
            args += ["-n", namespace]
        code, out, err = await driftbus(own_stack.nats.client_url, *args)
        assert code == 0, f"{out}\n{err}"
        await watch.until(applied_all, 240, pipeline.logs)
        applied_in = time.monotonic() - started
        done = await watch.until(settled(directory), 180, pipeline.logs)
        took = time.monotonic() - started
        first = decisions.writes()
        assert len(first) == done.counts.total, f"not one write per object: {first}"

        mark = len(decisions.records)
        await settle(3)
        code, out, err = await driftbus(own_stack.nats.client_url, *args)
        assert code == 0, f"{out}\n{err}"
        # the republish was taken in: a hit for every object (or this would prove nothing)
        hits = await decisions.until_hits(done.counts.total, since=mark, within=60)
        assert hits == done.counts.total, hits
        await asyncio.sleep(QUIET)
        again = decisions.writes(since=mark)
        assert not again, f"an identical republish of {directory} and {QUIET:.0f} s: {again}"
        not_ready = (
            f", not ready here: {', '.join(NOT_READY_HERE[directory])}"
            if (directory in NOT_READY_HERE)
            else ""
        )
        measured(
            f"corpus {directory} (controllers running): {done.counts.total} objects applied in "
            f"{applied_in:.1f} s ({len(first)} driftbus writes), {done.phase} with "
            f"{done.counts.ready} ready after {took:.1f} s{not_ready}; identical republish + "
            f"{QUIET:.0f} s of running controllers: 0 driftbus writes"
        )
    finally:
        pipeline.stop_all()
        await nc.drain()
