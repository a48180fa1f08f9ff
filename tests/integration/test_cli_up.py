"""`driftbus up` (what `make up` runs): the whole pipeline, the example bundle Ready, and
Ctrl-C stopping every process it started."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
from aiohttp import web
from nats.aio.client import Client as NATS

from services.cli import reads as user
from services.common import bus
from services.controlplane import servers
from services.kube import KubeClient

from ..gitrepo import git
from ..loopback import serve_posts

UP_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "json" / "cli-up.schema.json"


async def test_up_reconciles_the_example_and_stops_cleanly(tmp_path: Path) -> None:
    workdir = tmp_path / "up"
    ui_port = servers.free_port()
    repo = tmp_path / "repo"  # `up --git`: a local repository followed into bundle "fromgit"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-git\ndata:\n  v: '1'\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    head = git(repo, "rev-parse", "HEAD")
    # (issue 41) `up --notify FILE`: notify runs as its own role, and tells a webhook
    hooks: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        hooks.append(await request.json())
        return web.json_response({})

    runner, hook_port = await serve_posts(hook, "/hook")
    notify_file = tmp_path / "notify.yaml"
    notify_file.write_text(
        f"providers:\n- name: hook\n  type: webhook\n  url: http://127.0.0.1:{hook_port}/hook\n"
        "alerts:\n- providers: [hook]\n  bundles: [hello]\n  events: [Ready]\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "up", "--workdir", str(workdir), "-o", "json",
        "--ui-port", str(ui_port), "--notify", str(notify_file),
        "--git", str(repo), "--path", "deploy", "-n", "default", "--git-bundle", "fromgit",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=240)
        assert line, f"up ended (exit {await proc.wait()}) before describing the stack"
        info = json.loads(line)
        assert set(info["services"]) == {
            *("watcher", "planner", "applier-0", "applier-1", "ui", "source", "notify")
        }
        # as Jupyter prints it: the address with the page's token
        assert info["ui"].startswith(f"http://127.0.0.1:{ui_port}/?token="), info["ui"]
        assert len(info["ui"].partition("token=")[2]) >= 32
        nc = await operator(info)
        try:
            (hello,) = await user.bundle_statuses(nc.jetstream(), "local", "hello")
            assert str(hello.phase) == "Ready"
            assert hello.counts.ready == hello.counts.total == 9
            for _ in range(300):
                got = await user.bundle_statuses(nc.jetstream(), "local", "fromgit")
                if got and got[0].revision == head and str(got[0].phase) == "Ready":
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"the followed repository never became Ready: {got}")
        finally:
            await nc.close()
        async with await KubeClient.from_kubeconfig(info["kubeconfig"]) as kube:
            cr = await kube.discovery.resource("example.driftbus.dev/v1", "Greeting")
            assert (await kube.get(cr, "world", "hello"))["spec"]["text"] == "hello, world"
        for _ in range(300):
            if any(h.get("bundle") == "hello" and h.get("kind") == "Ready" for h in hooks):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"up's notify never told the webhook hello is Ready: {hooks}")
        await notify_beside_up()
        pids = [info["pid"], *info["services"].values()]
        assert all(servers.pid_alive(p) for p in pids)
    finally:
        await runner.cleanup()
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
    assert servers.orphans(str(workdir)) == []
    assert not [p for p in pids if servers.pid_alive(p)]


async def test_detach_leaves_it_running_and_down_stops_it(
    tmp_path: Path, stack: servers.Stack
) -> None:
    workdir = tmp_path / "detached"

    async def driftbus(*args: str) -> tuple[int, str]:
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", *args, "--workdir", str(workdir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
        out, _ = await asyncio.wait_for(p.communicate(), timeout=240)
        assert p.returncode is not None
        return p.returncode, out.decode()

    # --kubeconfig: an existing cluster instead of a local control plane
    kubeconfig = str(stack.cluster.kubeconfig)
    code, out = await driftbus(
        "up",
        "--detach",
        "--no-example",
        "--kubeconfig",
        kubeconfig,
        "-o",
        "json",
        "--ui-port",
        "0",
    )
    assert code == 0, out
    info = json.loads(out.strip().splitlines()[-1])
    jsonschema.validate(info, json.loads(UP_SCHEMA.read_text()))
    assert info["kubeconfig"] == kubeconfig
    assert info["context"] == str(context_file())
    pids = [info["pid"], *info["services"].values()]
    assert all(servers.pid_alive(p) for p in pids)
    code, out = await driftbus("up", "--detach", "--no-example", "--ui-port", "0")
    assert code == 1
    assert "already running" in out
    # no NATS_URL: commands find the running stack through the context `up` wrote
    code, out = await command("bundles", "--cluster", "local", "-o", "json")
    assert (code, json.loads(out)) == (0, []), out
    code, out = await driftbus("down")
    assert code == 0, out
    assert not [p for p in pids if servers.pid_alive(p)]
    assert servers.orphans(str(workdir)) == []
    assert not context_file().exists(), "down removes the context"


async def notify_beside_up() -> None:
    """``driftbus notify`` started in another terminal, with no NATS settings: it finds the
    stack as the commands do, and its role follows everything it needs (a second replica)."""
    port = servers.free_port()
    env = {
        k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("DRIFTBUS_NATS")
    }
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "notify", "--http-port", str(port), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                assert p.returncode is None, "driftbus notify beside up exited"
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                        if r.status == 200:
                            break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError("driftbus notify beside up never ready")
    finally:
        if p.returncode is None:
            p.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(p.communicate(), 30)
    said = out.decode()
    assert "Connection refused" not in said, said
    assert "permissions violation" not in said, said


def context_file() -> Path:
    return Path(os.environ["DRIFTBUS_UP_CONTEXT"])


async def operator(info: dict[str, object]) -> NATS:
    """A connection to the stack's closed bus as its operator, with what the context names
    (mutual TLS, a password file): how every `driftbus` command reaches it."""
    ctx = json.loads(context_file().read_text())
    assert ctx["nats_url"] == info["nats_url"]
    assert str(info["nats_url"]).startswith("tls://127.0.0.1:"), info
    assert context_file().stat().st_mode & 0o077 == 0, "the context is the owner's only"
    settings = bus.NatsSettings(**ctx["nats_auth"], nats_url=ctx["nats_url"])
    return await bus.connect(settings, name="test-operator")


async def command(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``driftbus ARGS`` with no NATS_URL (unless ``env`` gives one): exit code, output."""
    base = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env={**base, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    out, _ = await asyncio.wait_for(p.communicate(), timeout=60)
    assert p.returncode is not None
    return p.returncode, out.decode()


async def test_a_stale_context_or_a_dead_bus_is_one_line_naming_it(tmp_path: Path) -> None:
    dead = await asyncio.create_subprocess_exec("true")
    await dead.wait()
    stale = tmp_path / "context.json"
    stale.write_text(json.dumps({"pid": dead.pid, "nats_url": "nats://127.0.0.1:1"}))
    for verb in (("status", "--cluster", "local"), ("bundles", "--cluster", "local")):
        code, out = await command(*verb, env={"DRIFTBUS_UP_CONTEXT": str(stale)})
        assert code == 1, out
        assert out.count("\n") == 1, out
        assert f"the stack of the context {stale} is not running" in out
    port = servers.free_port()
    (empty := tmp_path / "empty").mkdir()
    for verb in (
        ("status", "--cluster", "local"),
        ("suspend", "web", "--cluster", "local"),
        ("publish", str(empty), "--cluster", "local", "--bundle", "b", "--allow-empty"),
    ):
        code, out = await command(*verb, env={"NATS_URL": f"nats://127.0.0.1:{port}"})
        assert code == 1, out
        assert "Traceback" not in out
        assert f"no NATS server answered at nats://127.0.0.1:{port}" in out, out
    # credentials written into the URL are never printed
    code, out = await command(
        "status", "--cluster", "local", env={"NATS_URL": f"nats://alice:s3cret@127.0.0.1:{port}"}
    )
    assert code == 1, out
    assert "s3cret" not in out, out
    assert f"no NATS server answered at nats://***@127.0.0.1:{port}" in out, out


def test_ctrl_c_during_start_up_stops_everything_within_5_seconds(tmp_path: Path) -> None:
    """Ctrl-C typed in the terminal while `up` is still starting (the control plane is coming
    up): every process it started is gone within 5 s, with one line and no traceback."""
    import fcntl
    import pty
    import subprocess
    import termios
    import threading
    import time

    workdir = tmp_path / "up"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "up", "--workdir", str(workdir)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        # the pty is its controlling terminal: the line discipline turns ^C into SIGINT to it
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    said = bytearray()

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            said.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any("kube-apiserver" in p for p in servers.orphans(str(workdir))):
            assert proc.poll() is None, said.decode(errors="replace")
            assert time.monotonic() < deadline, "the API server never started"
            time.sleep(0.05)
        assert not (workdir / "stack.json").exists(), "meant to interrupt the start-up"
        os.write(master, b"\x03")
        interrupted = time.monotonic()
        while (proc.poll() is None or servers.orphans(str(workdir))) and (
            time.monotonic() - interrupted < 5
        ):
            time.sleep(0.05)
        took = time.monotonic() - interrupted
        left = servers.orphans(str(workdir))
        assert proc.poll() is not None, f"up still running {took:.1f}s after Ctrl-C"
        assert left == [], f"{took:.1f}s after Ctrl-C: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        reader.join(timeout=2)
        os.close(master)
    text = said.decode(errors="replace")
    assert proc.returncode == 130, text
    assert "interrupted; everything it started is stopped" in text
    assert "Traceback" not in text, text


async def test_status_follow_says_when_the_bus_goes_and_gives_up_or_stops_when_told(
    tmp_path: Path,
) -> None:
    async def follow(nats_url: str) -> asyncio.subprocess.Process:
        base = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "services.cli.main", "status", "--cluster", "local", "-f",
            "--reconnect-for", "3", env={**base, "NATS_URL": nats_url},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip

    nats_server = servers.NatsServer(tmp_path / "nats")
    nats_server.start()
    try:
        told = await follow(nats_server.client_url)
        assert told.stdout is not None
        assert (await asyncio.wait_for(told.stdout.readline(), 30)).strip() == b"(nothing)"
        told.send_signal(signal.SIGINT)  # exits when told, at once
        assert await asyncio.wait_for(told.wait(), 5) == 0

        gone = await follow(nats_server.client_url)
        assert gone.stdout is not None
        assert gone.stderr is not None
        assert (await asyncio.wait_for(gone.stdout.readline(), 30)).strip() == b"(nothing)"
    finally:
        nats_server.stop()  # the stack stops under it
    said = (await asyncio.wait_for(gone.stderr.read(), 20)).decode()
    assert await asyncio.wait_for(gone.wait(), 5) == 1, said
    assert "lost the bus at" in said, said
    assert "has been away for 3s; giving up (is the stack stopped?)" in said, said
    assert "Traceback" not in said, said


def test_status_follow_reads_nothing_more_once_it_has_shown_the_state(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A stack stopped the moment the current state is on the screen is the follow's to report
    (lost, giving up), never a failed read: everything `status -f` shows first (the bundles,
    the sync windows) is read before its first line is written."""
    import io

    from services.cli.main import main

    nats_server = servers.NatsServer(tmp_path / "nats")
    nats_server.start()

    class Terminal(io.StringIO):
        """Whoever watches stops the stack as soon as the first line is shown."""

        stopped = False

        def write(self, text: str) -> int:
            wrote = super().write(text)
            if "\n" in self.getvalue() and not self.stopped:
                self.stopped = True
                nats_server.stop()
            return wrote

    out, err = Terminal(), io.StringIO()
    monkeypatch.setenv("NATS_URL", nats_server.client_url)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = main(["status", "--cluster", "local", "-f", "--reconnect-for", "3"])
    finally:
        nats_server.stop()
    said = err.getvalue()
    assert out.getvalue().strip() == "(nothing)", said
    assert code == 1, said
    assert "has been away for 3s; giving up (is the stack stopped?)" in said, said
    assert "timeout" not in said, said


async def test_a_taken_page_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import socket

    workdir = tmp_path / "up"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for detach in ([], ["--detach"]):
            code, out = await command(
                "up", "--workdir", str(workdir), "--ui-port", str(port), *detach
            )
            assert code == 1, out
            assert f"port {port} for the status page is taken" in out, out
            assert "Traceback" not in out
            assert servers.orphans(str(workdir)) == []
            assert not (workdir / "nats").exists(), "nothing was started"


async def test_ctrl_c_while_a_detached_up_starts_stops_the_background_stack(
    tmp_path: Path,
) -> None:
    import time

    workdir = tmp_path / "up"
    base = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", "up", "--detach", "--workdir", str(workdir),
        "--ui-port", "0", env=base,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 120
    # the first server the background up starts: Ctrl-C lands early in the start, however
    # fast the rest of it is on the day (after the API server it once finished first)
    first = ("nats-server", "etcd", "kube-apiserver")
    while not any(s in p for p in servers.orphans(str(workdir)) for s in first):
        assert proc.returncode is None
        assert time.monotonic() < deadline, "no server of the stack ever started"
        await asyncio.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout is not None
    out = (await asyncio.wait_for(proc.stdout.read(), 60)).decode()
    assert await proc.wait() == 130, out
    assert "interrupted; the background stack is stopped" in out
    assert "Traceback" not in out, out
    assert servers.orphans(str(workdir)) == []
