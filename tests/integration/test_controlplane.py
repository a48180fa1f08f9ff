"""The test control plane itself: real servers, isolated namespaces, a second cluster."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext

from services.controlplane import servers
from services.kube import KubeClient, NotFound

from ..conftest import unique_name


async def test_apiserver_serves_and_namespaces_are_fresh(kube: KubeClient, namespace: str) -> None:
    ns_res = await kube.discovery.resource("v1", "Namespace")
    got = await kube.get(ns_res, namespace)
    assert got["metadata"]["name"] == namespace
    cm = await kube.discovery.resource("v1", "ConfigMap")
    items, rv = await kube.list(cm, namespace=namespace)
    # kube-root-ca.crt would appear with a controller-manager; envtest-style, nothing runs.
    assert items == []
    assert int(rv) > 0


async def test_jetstream_is_enabled_and_persists(js: JetStreamContext) -> None:
    name = unique_name("probe").replace("-", "_").upper()
    await js.add_stream(name=name, subjects=[f"probe.{name}.>"])
    ack = await js.publish(f"probe.{name}.x", b"hello")
    assert ack.stream == name
    assert ack.seq == 1
    msg = await js.get_msg(name, 1)
    assert msg.data == b"hello"
    await js.delete_stream(name)


async def test_second_cluster_is_independent(
    kube: KubeClient, second_cluster: servers.Cluster
) -> None:
    assert second_cluster.apiserver.url != kube.host
    name = unique_name("only-here")
    async with await KubeClient.from_kubeconfig(str(second_cluster.kubeconfig)) as other:
        await other.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        ns = await other.discovery.resource("v1", "Namespace")
        assert (await other.get(ns, name))["metadata"]["name"] == name
    with pytest.raises(NotFound, match=f"Namespace/{name}"):
        await kube.get(ns, name)


def test_stack_can_be_started_and_stopped_without_orphans(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = tmp_path_factory.mktemp("standalone")
    stack = servers.Stack.start(root, cluster_name="standalone")
    pids = [
        p.pid
        for p in (stack.nats.process, stack.cluster.etcd.process, stack.cluster.apiserver.process)
        if p
    ]
    assert len(pids) == 3
    assert stack.cluster.kubeconfig.exists()
    stack.stop()
    assert servers.orphans(str(root)) == []
    for pid in pids:
        assert pid not in servers.RUNNING
