"""No server outlives what started it, and the orphan check really finds leftovers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from services.controlplane import servers

REPO = Path(__file__).resolve().parents[2]


def _wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not servers.pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_server_dies_when_its_starter_is_sigkilled(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from services.controlplane import servers\n"
        "n = servers.NatsServer(Path(sys.argv[1]))\n"
        "n.start()\n"
        "print(n.process.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    starter = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "nats")],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    nats_pid = int(starter.stdout.readline())
    assert servers.pid_alive(nats_pid)
    assert servers.orphans(str(tmp_path)) != []  # the check sees the live server...

    starter.kill()  # no chance to clean up: only PR_SET_PDEATHSIG can save us
    starter.wait()
    starter.stdout.close()
    assert _wait_dead(nats_pid), f"nats-server {nats_pid} outlived its SIGKILLed starter"
    assert servers.orphans(str(tmp_path)) == []  # ...and sees it gone


def test_orphan_check_finds_a_leftover_process(tmp_path: Path) -> None:
    marker = str(tmp_path / "leftover")
    sleeper = subprocess.Popen(["sh", "-c", f"sleep 60; : {marker}"])
    try:
        # until the child has exec'd sh, its command line is still this Python's
        deadline = time.monotonic() + 10
        while marker not in Path(f"/proc/{sleeper.pid}/cmdline").read_text(errors="replace"):
            assert time.monotonic() < deadline, "the sleeper never exec'd"
            time.sleep(0.01)
        found = servers.orphans(marker)
        assert len(found) == 1
        assert found[0].startswith(f"{sleeper.pid} ")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert servers.orphans(marker) == []
