"""An etcd on loopback ports: the storage behind one test kube-apiserver.

With ``tls`` (what ``driftbus up`` runs) it serves its client and peer ports over TLS and
requires a client certificate signed by its own CA: another local process cannot read or write
the cluster's storage behind the API server's back (docs/security.md). The API server gets the
client pair (``client``).
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

from services.controlplane import assets
from services.controlplane.servers.process import LOOPBACK, Process, free_port, http_ok, wait_until
from services.controlplane.tls import Authority, Pair


@dataclasses.dataclass
class Etcd:
    workdir: Path
    client_port: int = 0
    extra_args: list[str] = dataclasses.field(default_factory=list)
    process: Process | None = None
    tls: bool = False
    """Serve TLS and require client certificates (``ca``, ``client``) on both ports."""
    ca: Authority | None = None
    client: Pair | None = None
    """The client certificate the API server presents (with ``tls``, once started)."""

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{LOOPBACK}:{self.client_port}"

    def _tls_args(self) -> list[str]:
        """A CA of its own, a serving pair for both ports and the API server's client pair;
        both ports refuse a client without a certificate of that CA."""
        self.ca = self.ca or Authority.create(self.workdir / "pki", name="driftbus etcd CA")
        serving = self.ca.issue("etcd", server=True, client=True)
        self.client = self.ca.issue("apiserver-etcd-client")
        ca = str(self.ca.ca.cert)
        return [
            *("--cert-file", str(serving.cert), "--key-file", str(serving.key)),
            *("--client-cert-auth", "--trusted-ca-file", ca),
            *("--peer-cert-file", str(serving.cert), "--peer-key-file", str(serving.key)),
            *("--peer-client-cert-auth", "--peer-trusted-ca-file", ca),
        ]

    def ssl_context(self) -> ssl.SSLContext | None:
        """How a client (the health check) talks to it: None without ``tls``."""
        if not self.tls or self.ca is None or self.client is None:
            return None
        ctx = ssl.create_default_context(cafile=str(self.ca.ca.cert))
        ctx.load_cert_chain(str(self.client.cert), str(self.client.key))
        return ctx

    def start(self, *, timeout: float = 60.0) -> None:
        self.client_port = self.client_port or free_port()
        scheme = "https" if self.tls else "http"
        peer = f"{scheme}://{LOOPBACK}:{free_port()}"
        binary = assets.ensure("etcd")
        tls = self._tls_args() if self.tls else []
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
                *tls,
                *self.extra_args,
            ],
            self.workdir,
        )
        self.process.start()
        ctx = self.ssl_context()
        wait_until(
            self.process,
            lambda: http_ok(f"{self.url}/health", context=ctx),
            timeout=timeout,
            what="healthy",
        )

    def stop(self) -> None:
        if self.process:
            self.process.stop()
