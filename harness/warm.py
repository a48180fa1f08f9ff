"""Service processes started warm, for the test suite: forked from a server that imported
driftbus once, instead of a new interpreter importing it all again.

A cold start costs a service ~0.9 s of CPU before its first line of work (the interpreter, then
nats, aiohttp, OpenTelemetry and driftbus's own modules); the suite starts well over a thousand
service processes, and process accounting of a clean clone's ``make test`` (2026-11-30) put
Python processes at most of its CPU. A warm start forks a server (``python -m harness.warm``,
one per test process) that has the modules imported, so a service costs what its work costs.

A warm service is the same service as a cold one: ``services.cli.main.main`` run on the same
arguments, with its own environment, working directory and log file, in a process of its own
(its pid, signals, exit code, ``/proc``), talking to the real servers. What it skips is the
interpreter's start and the imports. Benchmarks start their processes cold (``Pipeline.warm``
is off by default): what they measure includes a start.

The server is this module's ``serve``: a line of JSON in (a command to start), a line out (its
pid), and a line out whenever a child ends (its exit code, negative for the signal that ended
it, as ``subprocess`` says). ``multiprocessing``'s fork server would do the forking, but it
re-runs the caller's main module in every child. The server dies with the process that started
it, and its children with it (``PR_SET_PDEATHSIG``), as cold ones die with their parent.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import traceback
from typing import IO, Any

from services.controlplane import servers
from services.controlplane.servers import RUNNING, die_with_parent

PRELOAD = (
    "services.cli.main",
    "services.cli.run",
    "services.watcher.service",
    "services.planner.service",
    "services.applier.service",
    "services.fleet.driver.drive",
    "services.notify.service",
)
"""What the server imports once: every service a test starts (what is missing here the service
imports itself, as a cold one does)."""


class Forked:
    """A warm child as ``subprocess.Popen`` shows a process (``poll``, ``wait``, ``kill``…), so
    ``servers.Process`` supervises it unchanged."""

    def __init__(self, server: _Server, pid: int, argv: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = argv

    @property
    def returncode(self) -> int | None:
        return self._server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._server.wait(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            # ended, and reaped by the server, before its exit code reached us
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmProcess(servers.Process):
    """``servers.Process`` of a ``driftbus`` command (``argv``: ``python -m services.cli.main
    COMMAND …``), forked from the warm server."""

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = self.argv[self.argv.index("services.cli.main") + 1 :]
        env = dict(os.environ if self.env is None else self.env)
        server = _Server.running()
        pid = server.start(command, env, str(self.workdir), str(self.log_path))
        self.proc = Forked(server, pid, self.argv)  # type: ignore[assignment]
        RUNNING[pid] = f"{self.name} (warm {self.argv[0]})"


class _Server:
    """The caller's side of the server: one per process, started with the first warm child."""

    _running: _Server | None = None
    _lock = threading.Lock()

    @classmethod
    def running(cls) -> _Server:
        with cls._lock:
            if cls._running is None or cls._running._ended:
                cls._running = cls()
            return cls._running

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "harness.warm"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=die_with_parent,
        )
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._requests: IO[bytes] = self._proc.stdin
        self._changed = threading.Condition()
        self._started: list[int] = []
        self._exits: dict[int, int] = {}
        self._ended = False
        self._asking = threading.Lock()  # one start request answered at a time
        threading.Thread(target=self._read, args=(self._proc.stdout,), daemon=True).start()

    def start(self, command: list[str], env: dict[str, str], cwd: str, log: str) -> int:
        request = {"command": command, "env": env, "cwd": cwd, "log": log}
        with self._asking:
            self._requests.write(json.dumps(request).encode() + b"\n")
            self._requests.flush()
            with self._changed:
                # the first start waits for the server's imports
                if not self._changed.wait_for(lambda: self._started or self._ended, 120):
                    raise servers.ServerError("the warm server answered no start in 120 s")
                if not self._started:
                    raise servers.ServerError("the warm server ended")
                return self._started.pop(0)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._ended, timeout)
            return self._exits.get(pid, -signal.SIGKILL if self._ended else None)

    def _read(self, replies: IO[bytes]) -> None:
        for line in replies:
            reply = json.loads(line)
            with self._changed:
                if "started" in reply:
                    self._started.append(reply["started"])
                else:
                    self._exits[reply["exited"]] = reply["code"]
                self._changed.notify_all()
        with self._changed:  # the server is gone, and its children with it
            self._ended = True
            self._changed.notify_all()


def serve() -> None:
    """The server: import, then fork a child per request and report how each ends."""
    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()  # what was imported is shared with every child, and never collected again
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a stray print of the server's own goes with its errors
    woken_r, woken_w = os.pipe()
    os.set_blocking(woken_r, False)
    os.set_blocking(woken_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(woken_w)
    events = selectors.DefaultSelector()
    events.register(requests, selectors.EVENT_READ, "request")
    events.register(woken_r, selectors.EVENT_READ, "child")

    def reply(message: dict[str, Any]) -> None:
        os.write(replies, json.dumps(message).encode() + b"\n")

    while True:
        for key, _ in events.select():
            if key.data == "child":
                while True:
                    try:
                        os.read(woken_r, 4096)
                    except BlockingIOError:
                        break
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})
                continue
            line = requests.readline()
            if not line:
                return  # the caller is gone
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                events.close()
                for fd in (woken_r, woken_w, replies, requests.fileno()):
                    os.close(fd)
                _child(**request)
            reply({"started": pid})


def _child(command: list[str], env: dict[str, str], cwd: str, log: str) -> None:
    """In the forked child: become the command's process, run it, and end with its code."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    die_with_parent()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    # the server's streams were made for a pipe (block-buffered): a log read while the service
    # runs must have every line in it, as PYTHONUNBUFFERED gives a cold one
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.argv = [os.path.join(os.path.dirname(sys.executable), "driftbus"), *command]
    from services.cli.main import exit_now, main

    try:
        code = main(command)
    except SystemExit as exc:  # argparse's refusal, a command's sys.exit: as Python ends it
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the traceback goes to the log, as a cold one's
        traceback.print_exc()
        code = 1
    exit_now(code)


if __name__ == "__main__":
    serve()
