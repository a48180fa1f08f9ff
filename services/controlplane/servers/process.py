"""One supervised server process: start with a log file, stop, reap, and wait until it is ready.

Every live child is tracked in ``RUNNING``; children get ``PR_SET_PDEATHSIG`` so they die with us.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import random
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

LOOPBACK = "127.0.0.1"
RUNNING: dict[int, str] = {}
"""pid → description of every child started here and not yet reaped."""


class ServerError(RuntimeError):
    """A server failed to start or to become ready; the message carries the tail of its log."""


def ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections (Linux's ip_local_port_range)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


_HANDED_OUT: set[int] = set()
"""Ports this process chose already: one found free again before its server bound it (etcd's
client and peer ports are chosen together) must not be handed out twice."""


def _share(ports: range) -> range:
    """The part of ``ports`` this process picks from: a pytest-xdist worker (``gwN``) its own
    slice, so three workers starting servers at once never choose the same free port (etcd
    exited with "bind: address already in use" so in CI, 2026-11-29); anyone else all of it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 2:
        return ports
    size = len(ports) // count
    start = ports.start + int(worker[2:]) % count * size
    return range(start, start + size)


def free_port() -> int:
    """A loopback port free now, for a server about to start, chosen outside the ephemeral
    range: a port found free there can be handed to any process's outgoing connection before
    the server binds it (etcd exited with "bind: address already in use" so in a test run)."""
    ephemeral = ephemeral_ports()
    below = _share(range(10000, ephemeral.start)) if ephemeral.start > 12000 else range(0)
    for _ in range(100 if below else 0):
        port = random.choice(below)  # noqa: S311 - spread, not secrecy: workers pick apart
        if port in _HANDED_OUT:
            continue
        _HANDED_OUT.add(port)
        with socket.socket() as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue  # in use (or lingering): another
            return port
    with socket.socket() as s:  # no room below the ephemeral range: the kernel's choice
        s.bind((LOOPBACK, 0))
        chosen: int = s.getsockname()[1]
        return chosen


def die_with_parent() -> None:
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
                preexec_fn=die_with_parent,
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

    def terminate(self) -> None:
        """SIGTERM without waiting: ``stop`` afterwards waits (many processes stop together)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

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


def wait_until(proc: Process, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
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


def http_ok(
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
