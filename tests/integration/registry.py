"""The real CNCF distribution registry (v3, built from its pinned Go module like the other
servers) on a loopback port, for the OCI tests: storage on the filesystem under a temporary
directory, plain HTTP (loopback), optionally behind ``auth: htpasswd``.

With ``auth``, the registry is given an htpasswd path that does not exist: distribution then
writes one itself with the user ``docker`` and a random password (bcrypt, which neither Python's
standard library nor this project's dependencies can make), and logs the password once; the
helper reads it from the log. So the credentials are the registry's own, checked by its own
bcrypt.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

from services.common import binaries
from services.controlplane.servers import Process, ServerError, free_port, log_tail


@dataclasses.dataclass
class Registry:
    workdir: Path
    auth: bool = False
    port: int = 0
    username: str = ""
    password: str = ""
    process: Process | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.workdir / "storage"

    def start(self) -> None:
        self.port = free_port()
        config = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "json"},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}},
            "http": {"addr": self.host, "secret": "driftbus-test-upload-secret"},
        }
        if self.auth:
            config["auth"] = {
                "htpasswd": {"realm": "driftbus-test", "path": str(self.workdir / "htpasswd")}
            }
        self.workdir.mkdir(parents=True, exist_ok=True)
        path = self.workdir / "config.yml"
        path.write_text(json.dumps(config))  # JSON is YAML
        name = "registry-auth" if self.auth else "registry"
        self.process = Process(
            name, [str(binaries.require("registry")), "serve", str(path)], self.workdir
        )
        self.process.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.process.alive():
                raise self.process.failure("exited before it listened")
            lines = self._log_lines()
            if self.auth and not self.password:
                for line in lines:
                    if line.get("user") == "docker" and line.get("password"):
                        self.username, self.password = "docker", str(line["password"])
            listening = any(str(line.get("msg", "")).startswith("listening on") for line in lines)
            if listening and (not self.auth or self.password):
                return
            time.sleep(0.1)
        raise ServerError(f"registry did not start:\n{log_tail(self.process.log_path)}")

    def _log_lines(self) -> list[dict[str, object]]:
        assert self.process is not None
        out = []
        try:
            text = self.process.log_path.read_text()
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def blobs(self) -> Iterator[Path]:
        """Every blob's data file in the registry's storage."""
        yield from (self.storage / "docker/registry/v2/blobs").rglob("data")

    def blob_path(self, digest: str) -> Path:
        hexa = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexa[:2] / hexa / "data"

    def logs(self) -> str:
        return log_tail(self.process.log_path) if self.process else ""
