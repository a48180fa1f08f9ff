"""Start and stop real etcd, kube-apiserver and nats-server processes on loopback ports.

Used by the test suite (session fixtures) and by ``driftbus up``. It is the envtest way: no
kubelet, no controllers, so whoever needs ``status`` writes it through the ``/status``
subresource. Every process logs to a file in its own directory so a failing test can show the
tail; children get ``PR_SET_PDEATHSIG`` so they die with the process that started them, and every
live child is tracked in ``RUNNING`` so the suite can prove it left no orphan.

Synchronous on purpose (subprocess + urllib): it runs in pytest fixtures and before an event loop
exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from services.controlplane import assets

LOOPBACK = "127.0.0.1"
RUNNING: dict[int, str] = {}
"""pid → description of every child started here and not yet reaped."""


class ServerError(RuntimeError):
    """A server failed to start or to become ready; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:
    # Linux: deliver SIGKILL to the child when the thread that spawned it exits, so a killed
    # test run or `driftbus up` cannot leave servers behind.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


@dataclasses.dataclass
class Process:
    """One supervised server process with its log file."""

    name: str
    argv: list[str]
    workdir: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env=self.env,
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        RUNNING[self.proc.pid] = f"{self.name} ({self.argv[0]})"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; always reaps the child."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        RUNNING.pop(self.proc.pid, None)

    def kill(self) -> None:
        """SIGKILL now (fault injection)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc is not None:
            RUNNING.pop(self.proc.pid, None)

    def failure(self, why: str) -> ServerError:
        return ServerError(
            f"{self.name}: {why}\n--- last lines of {self.log_path} ---\n{log_tail(self.log_path)}"
        )


def _wait_until(proc: Process, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise proc.failure(
                f"exited with code {proc.proc.returncode if proc.proc else '?'}"
                f" before it was {what}"
            )
        if ready():
            return
        time.sleep(0.1)
    raise proc.failure(f"not {what} after {timeout:.0f}s")


def _http_ok(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    expect: bytes | None = None,
) -> bool:
    req = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback URLs we built
    try:
        with urllib.request.urlopen(req, timeout=2, context=context) as resp:  # noqa: S310
            body: bytes = resp.read()
            return resp.status == 200 and (expect is None or body.strip() == expect)
    except urllib.error.HTTPError as exc:
        exc.close()  # an HTTPError is an open response: close it or its socket leaks
        return False
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


# --- etcd ---------------------------------------------------------------------------------------


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
        _wait_until(
            self.process, lambda: _http_ok(f"{self.url}/health"), timeout=timeout, what="healthy"
        )

    def stop(self) -> None:
        if self.process:
            self.process.stop()


# --- kube-apiserver -----------------------------------------------------------------------------


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
        _wait_until(self.process, self._ca_written, timeout=timeout, what="serving TLS")
        ctx = self.ssl_context()
        _wait_until(
            self.process,
            lambda: _http_ok(f"{self.url}/readyz", headers=auth, context=ctx, expect=b"ok"),
            timeout=timeout,
            what="ready (/readyz)",
        )
        _wait_until(
            self.process,
            lambda: _http_ok(f"{self.url}/api/v1/namespaces/default", headers=auth, context=ctx),
            timeout=timeout,
            what="serving namespace default",
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


# --- nats-server --------------------------------------------------------------------------------


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
        _wait_until(self.process, ports_file.exists, timeout=timeout, what="listening")
        ports = json.loads(ports_file.read_text())
        self.client_url = ports["nats"][0]
        self.monitor_url = ports["monitoring"][0]
        self.port = int(self.client_url.rsplit(":", 1)[1])  # a restart comes back here
        _wait_until(
            self.process,
            lambda: _http_ok(f"{self.monitor_url}/healthz?js-enabled-only=true"),
            timeout=timeout,
            what="JetStream-ready",
        )

    def stop(self) -> None:
        if self.process:
            self.process.stop()

    def kill(self) -> None:
        if self.process:
            self.process.kill()


# --- compositions -------------------------------------------------------------------------------


@dataclasses.dataclass
class Cluster:
    """An etcd + kube-apiserver pair: one test Kubernetes cluster."""

    name: str
    workdir: Path
    etcd: Etcd
    apiserver: KubeAPIServer
    kubeconfig: Path

    @classmethod
    def start(
        cls,
        name: str,
        workdir: Path,
        *,
        apiserver_args: list[str] | None = None,
        etcd_args: list[str] | None = None,
        users: list[User] | None = None,
    ) -> Cluster:
        etcd = Etcd(workdir / "etcd", extra_args=etcd_args or [])
        etcd.start()
        api = KubeAPIServer(
            workdir / "apiserver", etcd.url, extra_args=apiserver_args or [], users=users or []
        )
        try:
            api.start()
        except BaseException:
            api.stop()
            etcd.stop()
            raise
        kubeconfig = api.write_kubeconfig(workdir / "kubeconfig", context=name)
        return cls(name, workdir, etcd, api, kubeconfig)

    def stop(self) -> None:
        self.apiserver.stop()
        self.etcd.stop()

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in (self.etcd.process, self.apiserver.process) if p}


@dataclasses.dataclass
class Stack:
    """What a test or `driftbus up` needs: one cluster and one JetStream server."""

    workdir: Path
    cluster: Cluster
    nats: NatsServer
    owns_workdir: bool = False

    @classmethod
    def start(cls, workdir: Path | None = None, *, cluster_name: str = "local") -> Stack:
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="driftbus-stack-")) if workdir is None else workdir
        nats = NatsServer(root / "nats")
        nats.start()
        try:
            cluster = Cluster.start(cluster_name, root / cluster_name)
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


def orphans(marker: str) -> list[str]:
    """Live processes whose command line contains ``marker`` — the unique temp root a test
    session or stack puts all its servers under — whoever their parent is now. ``pid cmdline``
    strings; empty when all is clean."""
    found = []
    mine = _ancestors(os.getpid())  # our own command line (or a wrapper's) may name the marker
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and _pid_alive(int(entry.name)):
            found.append(f"{entry.name} {cmdline[:160]}")
    return found


def _ancestors(pid: int) -> set[int]:
    chain = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return chain


def still_running() -> list[str]:
    """Children started here and never stopped."""
    return [f"{pid} {desc}" for pid, desc in RUNNING.items() if _pid_alive(pid)]


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


@contextlib.contextmanager
def running_stack(workdir: Path | None = None) -> Iterator[Stack]:
    stack = Stack.start(workdir)
    try:
        yield stack
    finally:
        stack.stop()
