"""What makes a bare API server a cluster that lives: kube-controller-manager (namespaces finish
terminating, garbage collection cascades, Deployments roll out to ReplicaSets and Pods, Jobs
run and are cleaned up, HPAs scale), kube-scheduler (Pods get a node) and kwok standing in for
kubelets (a fake Node; the Pods on it start and become Ready without containers).

Each is a real, pinned binary built like the API server (``assets``). They run under the admin
identity of the test API server; the controllers that need key material or a cloud are off.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from services.controlplane import assets
from services.controlplane.servers.apiserver import KubeAPIServer
from services.controlplane.servers.process import LOOPBACK, Process, free_port, wait_until

FAKE_NODE = "kwok-node-0"
# Off: tokens and CSR signing need key material of their own, node IPAM a pod CIDR, the cloud
# controllers, volume expansion and attach/detach infrastructure there is none of. The
# persistent-volume binder runs: a claim naming a static volume is bound, as in a real cluster.
_CONTROLLERS = (
    "*,-serviceaccount-token,-csrsigning,-csrapproving,-csrcleaner,-nodeipam,"
    "-cloud-node-lifecycle,-service-lb-controller,-node-route-controller,"
    "-persistentvolume-expander,-attachdetach"
)


# kwok's own "fast" stages (kwokctl's defaults): a node is initialised and keeps its lease, a
# Pod becomes Ready at once, a Job's Pod completes, a deleted Pod goes.
_KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def kwok_stages() -> list[Path]:
    """The Stage files of the pinned kwok module, read from the Go module cache it was built
    from (downloaded again when the cache was emptied since)."""
    module = f"sigs.k8s.io/kwok@{assets.ASSETS['kwok'].version}"
    cwd = assets.TOOLS_DIR / "kwok"
    env = assets.go_env()
    root = subprocess.run(
        ["go", "env", "GOMODCACHE"], cwd=cwd, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    stages = Path(root) / module / "kustomize" / "stage"
    if not stages.is_dir():
        subprocess.run(["go", "mod", "download", module], cwd=cwd, env=env, check=True)
    return [stages / name for name in _KWOK_STAGES]


@dataclasses.dataclass
class Controllers:
    """kube-controller-manager, kube-scheduler and kwok against one API server."""

    workdir: Path
    apiserver: KubeAPIServer
    kubeconfig: Path
    processes: list[Process] = dataclasses.field(default_factory=list)

    def start(self, *, timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        kc = str(self.kubeconfig)
        certs = self.apiserver.workdir / "certs"
        self._start(
            "kube-controller-manager",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                f"--controllers={_CONTROLLERS}",
                f"--root-ca-file={certs / 'apiserver.crt'}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={free_port()}",
                # controllers act fast on a test cluster (defaults are tuned for thousands of
                # nodes): the HPA syncs every 2 s, finished Jobs are collected at once
                "--horizontal-pod-autoscaler-sync-period=2s",
                "--concurrent-gc-syncs=5",
                "--v=0",
            ],
        )
        self._start(
            "kube-scheduler",
            [
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={free_port()}",
                "--v=0",
            ],
        )
        self._start(
            "kwok",
            [
                f"--kubeconfig={kc}",
                *(f"--config={stage}" for stage in kwok_stages()),
                "--node-lease-duration-seconds=40",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--cidr=10.0.0.1/24",
                f"--node-ip={LOOPBACK}",
                f"--server-address={LOOPBACK}:{free_port()}",
            ],
        )
        self._create_node()
        # ready when the controllers act: the root CA is published into every namespace, and
        # the fake node is Ready (kwok keeps its lease and conditions)
        wait_until(
            self.processes[0],
            lambda: self._ok("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"),
            timeout=timeout,
            what="publishing kube-root-ca.crt (controllers running)",
        )
        wait_until(
            self.processes[2], self._node_ready, timeout=timeout, what="keeping a Ready node"
        )

    def _start(self, name: str, args: list[str]) -> None:
        binary = assets.ensure(name)
        process = Process(name, [str(binary), *args], self.workdir / name)
        process.start()
        self.processes.append(process)

    def _request(self, method: str, path: str, body: object = None) -> dict[str, object]:
        req = urllib.request.Request(  # noqa: S310 - the test API server on loopback
            self.apiserver.url + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self.apiserver.admin_token}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(req, timeout=10, context=self.apiserver.ssl_context()) as r:  # noqa: S310
            decoded: dict[str, object] = json.loads(r.read())
            return decoded

    def _ok(self, path: str) -> bool:
        try:
            self._request("GET", path)
        except OSError:
            return False
        return True

    def _create_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": FAKE_NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake"},
                # the well-known labels a kubelet sets: real installs select on them
                # (Argo CD's and Flux's Deployments: nodeSelector kubernetes.io/os: linux)
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": FAKE_NODE,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "status": {
                "allocatable": {"cpu": "1000", "memory": "1Ti", "pods": "10000"},
                "capacity": {"cpu": "1000", "memory": "1Ti", "pods": "10000"},
            },
        }
        try:
            self._request("POST", "/api/v1/nodes", node)
        except urllib.error.HTTPError as exc:
            if exc.code != 409:  # there already (a --workdir used again keeps etcd's data)
                raise

    def _node_ready(self) -> bool:
        try:
            node = self._request("GET", f"/api/v1/nodes/{FAKE_NODE}")
        except OSError:
            return False
        status: Any = node.get("status") or {}
        conditions = status.get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in self.processes}
