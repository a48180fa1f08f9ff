"""A JetStream-enabled nats-server on loopback; a restart comes back on the same client port."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from services.controlplane import assets
from services.controlplane.servers.process import (
    LOOPBACK,
    Process,
    ServerError,
    http_ok,
    wait_until,
)


@dataclasses.dataclass
class NatsServer:
    workdir: Path
    extra_args: list[str] = dataclasses.field(default_factory=list)
    client_url: str = ""
    monitor_url: str = ""
    process: Process | None = None
    port: int = 0
    """Client port; 0 picks a free one at the first start, which a restart then reuses."""
    sync_interval: str = ""
    """JetStream's fsync policy (``always``, or a duration); the server's default (2 min) when
    empty. Only settable in a configuration file, which this then writes."""

    @property
    def store_dir(self) -> Path:
        return self.workdir / "jetstream"

    def start(self, *, timeout: float = 60.0) -> None:
        binary = assets.ensure("nats-server")
        ports_dir = self.workdir / "ports"
        ports_dir.mkdir(parents=True, exist_ok=True)
        for old in ports_dir.glob("*.ports"):
            old.unlink()
        config: list[str] = []
        if self.sync_interval:
            if "-c" in self.extra_args:
                raise ServerError("nats-server: sync_interval with a -c config: put it there")
            conf = self.workdir / "jetstream.conf"
            conf.write_text(f"jetstream {{\n  sync_interval: {self.sync_interval}\n}}\n")
            config = ["-c", str(conf)]
        self.process = Process(
            "nats-server",
            [
                str(binary),
                *config,
                "-a",
                LOOPBACK,
                "-p",
                str(self.port or -1),
                "-m",
                "-1",
                "-js",
                "-sd",
                str(self.store_dir),
                "--ports_file_dir",
                str(ports_dir),
                *self.extra_args,
            ],
            self.workdir,
        )
        self.process.start()
        ports_file = ports_dir / f"nats-server_{self.process.pid}.ports"
        wait_until(self.process, ports_file.exists, timeout=timeout, what="listening")
        ports = json.loads(ports_file.read_text())
        self.client_url = ports["nats"][0]
        self.monitor_url = ports["monitoring"][0]
        self.port = int(self.client_url.rsplit(":", 1)[1])  # a restart comes back here
        wait_until(
            self.process,
            lambda: http_ok(f"{self.monitor_url}/healthz?js-enabled-only=true"),
            timeout=timeout,
            what="JetStream-ready",
        )

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def kill(self) -> None:
        if self.process:
            self.process.kill()
