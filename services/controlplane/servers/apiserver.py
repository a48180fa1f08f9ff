"""A kube-apiserver on loopback with an admin token, token users and its own service-account key.

No kubelet, no controllers (the envtest way): whoever needs ``status`` writes it through the
``/status`` subresource.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import ssl
import urllib.request
from pathlib import Path

from services.controlplane import assets
from services.controlplane.servers.process import LOOPBACK, Process, free_port, http_ok, wait_until

_BOOTSTRAPPED = (
    "/api/v1/namespaces/default",
    "/api/v1/namespaces/kube-system",
    "/api/v1/namespaces/kube-public",
    "/api/v1/namespaces/kube-node-lease",
    "/api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking",
    "/api/v1/namespaces/default/services/kubernetes",
)
"""What a new kube-apiserver writes itself after /readyz says ok."""


@dataclasses.dataclass(frozen=True)
class User:
    """A token identity for tests of restricted permissions (RBAC binds it by name)."""

    name: str
    token: str
    groups: tuple[str, ...] = ()


@dataclasses.dataclass
class KubeAPIServer:
    workdir: Path
    etcd_url: str
    port: int = 0
    extra_args: list[str] = dataclasses.field(default_factory=list)
    users: list[User] = dataclasses.field(default_factory=list)
    admin_token: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(32))
    process: Process | None = None

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    @property
    def ca_path(self) -> Path:
        return self.workdir / "certs" / "apiserver.crt"

    def _ca_written(self) -> bool:
        try:
            return b"-----END CERTIFICATE-----" in self.ca_path.read_bytes()
        except FileNotFoundError:
            return False

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_path))

    def start(self, *, timeout: float = 120.0) -> None:
        self.port = self.port or free_port()
        certs = self.workdir / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        _write_sa_key(certs / "sa.key")
        rows = [f'{self.admin_token},admin,admin-uid,"system:masters"']
        rows += [f'{u.token},{u.name},{u.name}-uid,"{",".join(u.groups)}"' for u in self.users]
        tokens = certs / "tokens.csv"
        tokens.write_text("\n".join(rows) + "\n")
        tokens.chmod(0o600)
        binary = assets.ensure("kube-apiserver")
        self.process = Process(
            "kube-apiserver",
            [
                str(binary),
                f"--etcd-servers={self.etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.port}",
                f"--cert-dir={certs}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.96.0.0/16",  # room for benchmark-sized bundles
                "--allow-privileged=true",
                "--disable-admission-plugins=ServiceAccount",
                f"--service-account-issuer=https://{LOOPBACK}:{self.port}",
                f"--service-account-key-file={certs / 'sa.key'}",
                f"--service-account-signing-key-file={certs / 'sa.key'}",
                "--v=0",
                # No kubelet or controllers: loopback endpoints for the kubernetes Service
                # are refused every 10 s otherwise (envtest does the same).
                "--endpoint-reconciler-type=none",
                *self.extra_args,
            ],
            self.workdir,
        )
        self.process.start()
        auth = {"Authorization": f"Bearer {self.admin_token}"}
        # The serving certificate is written during start-up; until then there is nothing to
        # trust. Wait for the whole file: a busy machine shows it half-written.
        wait_until(self.process, self._ca_written, timeout=timeout, what="serving TLS")
        ctx = self.ssl_context()
        wait_until(
            self.process,
            lambda: http_ok(f"{self.url}/readyz", headers=auth, context=ctx, expect=b"ok"),
            timeout=timeout,
            what="ready (/readyz)",
        )
        # Ready is not done: the server's own controllers still write objects counted like
        # anyone's (the token-tracking ConfigMap is retried with backoff while kube-system does
        # not exist: on a busy CI machine its write landed in a benchmark's window, 21 writes
        # for 20 objects). Wait for the last of them, so write counts see only their clients.
        for path in _BOOTSTRAPPED:
            wait_until(
                self.process,
                functools.partial(http_ok, f"{self.url}{path}", headers=auth, context=ctx),
                timeout=timeout,
                what=f"serving {path}",
            )

    def write_kubeconfig(
        self,
        path: Path,
        *,
        token: str | None = None,
        user: str = "admin",
        context: str = "driftbus-test",
    ) -> Path:
        import base64

        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": context, "cluster": {"server": self.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token or self.admin_token}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
            "current-context": context,
        }
        # JSON is valid YAML, so every kubeconfig reader accepts it.
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def metrics(self) -> str:
        """The API server's own /metrics text (request counters are the honest write count)."""
        req = urllib.request.Request(  # noqa: S310
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {self.admin_token}"}
        )
        with urllib.request.urlopen(req, timeout=10, context=self.ssl_context()) as resp:  # noqa: S310
            text: str = resp.read().decode()
            return text

    def stop(self) -> None:
        if self.process:
            self.process.stop(timeout=15)


def _write_sa_key(path: Path) -> None:
    if path.exists():
        return
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,  # PKCS8 is refused as a public key file
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
