"""Finding server processes left behind: our own untracked children, and anything under a marker.

Reads ``/proc`` (Linux), so a test session can prove it left no orphan.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.controlplane.servers.process import RUNNING


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
        if marker in cmdline and pid_alive(int(entry.name)):
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
    return [f"{pid} {desc}" for pid, desc in RUNNING.items() if pid_alive(pid)]


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False
