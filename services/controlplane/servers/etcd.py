"""An etcd on loopback ports: the storage behind one test kube-apiserver."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from services.controlplane import assets
from services.controlplane.servers.process import LOOPBACK, Process, free_port, http_ok, wait_until


@dataclasses.dataclass
class Etcd:
    workdir: Path
    client_port: int = 0
    extra_args: list[str] = dataclasses.field(default_factory=list)
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.client_port}"

    def start(self, *, timeout: float = 60.0) -> None:
        self.client_port = self.client_port or free_port()
        peer = f"http://{LOOPBACK}:{free_port()}"
        binary = assets.ensure("etcd")
        self.process = Process(
            "etcd",
            [
                str(binary),
                "--name",
                "driftbus-test",
                "--data-dir",
                str(self.workdir / "data"),
                "--listen-client-urls",
                self.url,
                "--advertise-client-urls",
                self.url,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"driftbus-test={peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
                *self.extra_args,
            ],
            self.workdir,
        )
        self.process.start()
        wait_until(
            self.process, lambda: http_ok(f"{self.url}/health"), timeout=timeout, what="healthy"
        )

    def stop(self) -> None:
        if self.process:
            self.process.stop()
