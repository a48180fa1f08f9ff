"""The compositions: a Cluster (etcd + kube-apiserver, and optionally its controllers) and a Stack
(a cluster + a nats-server)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from services.controlplane.servers.apiserver import KubeAPIServer, User
from services.controlplane.servers.controllers import Controllers
from services.controlplane.servers.etcd import Etcd
from services.controlplane.servers.natsserver import NatsServer


@dataclasses.dataclass
class Cluster:
    """An etcd + kube-apiserver pair: one test Kubernetes cluster."""

    name: str
    workdir: Path
    etcd: Etcd
    apiserver: KubeAPIServer
    kubeconfig: Path
    controllers: Controllers | None = None
    """kube-controller-manager, kube-scheduler and kwok, when started with ``controllers``."""

    @classmethod
    def start(
        cls,
        name: str,
        workdir: Path,
        *,
        apiserver_args: list[str] | None = None,
        etcd_args: list[str] | None = None,
        users: list[User] | None = None,
        controllers: bool = False,
        etcd_tls: bool = False,
    ) -> Cluster:
        """``etcd_tls``: etcd requires a client certificate (its own CA), which only the API
        server is given (``driftbus up``: no other local process reaches the storage)."""
        etcd = Etcd(workdir / "etcd", extra_args=etcd_args or [], tls=etcd_tls)
        etcd.start()
        storage: list[str] = []
        if etcd.ca is not None and etcd.client is not None:
            storage = [
                f"--etcd-cafile={etcd.ca.ca.cert}",
                f"--etcd-certfile={etcd.client.cert}",
                f"--etcd-keyfile={etcd.client.key}",
            ]
        api = KubeAPIServer(
            workdir / "apiserver",
            etcd.url,
            extra_args=[*storage, *(apiserver_args or [])],
            users=users or [],
        )
        try:
            api.start()
        except BaseException:
            api.stop()
            etcd.stop()
            raise
        kubeconfig = api.write_kubeconfig(workdir / "kubeconfig", context=name)
        cluster = cls(name, workdir, etcd, api, kubeconfig)
        if controllers:
            cluster.controllers = Controllers(workdir / "controllers", api, kubeconfig)
            try:
                cluster.controllers.start()
            except BaseException:
                cluster.stop()
                raise
        return cluster

    def stop(self) -> None:
        if self.controllers is not None:
            self.controllers.stop()
        self.apiserver.stop()
        self.etcd.stop()

    def logs(self) -> dict[str, Path]:
        logs = {p.name: p.log_path for p in (self.etcd.process, self.apiserver.process) if p}
        if self.controllers is not None:
            logs.update(self.controllers.logs())
        return logs


@dataclasses.dataclass
class Stack:
    """What a test or `driftbus up` needs: one cluster and one JetStream server."""

    workdir: Path
    cluster: Cluster
    nats: NatsServer
    owns_workdir: bool = False

    @classmethod
    def start(
        cls, workdir: Path | None = None, *, cluster_name: str = "local", controllers: bool = False
    ) -> Stack:
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="driftbus-stack-")) if workdir is None else workdir
        nats = NatsServer(root / "nats")
        nats.start()
        try:
            cluster = Cluster.start(cluster_name, root / cluster_name, controllers=controllers)
        except BaseException:
            nats.stop()
            raise
        return cls(root, cluster, nats, owns)

    def stop(self) -> None:
        self.cluster.stop()
        self.nats.stop()
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self) -> dict[str, Path]:
        logs = self.cluster.logs()
        if self.nats.process:
            logs["nats-server"] = self.nats.process.log_path
        return logs

    def describe(self) -> dict[str, Any]:
        return {
            "nats_url": self.nats.client_url,
            "nats_monitor_url": self.nats.monitor_url,
            "kubeconfig": str(self.cluster.kubeconfig),
            "apiserver_url": self.cluster.apiserver.url,
            "workdir": str(self.workdir),
        }
