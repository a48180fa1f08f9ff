"""``driftbus down`` finds a stack started with ``up --workdir`` elsewhere through the context,
as every other command does (it said "nothing running" before)."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from services.cli import context
from services.cli.up.detach import cmd_down


def test_down_stops_the_stack_the_context_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = subprocess.Popen(["sleep", "60"])  # stands in for the detached `up` process
    try:
        workdir = tmp_path / "elsewhere"
        workdir.mkdir()
        info = {"pid": stack.pid, "workdir": str(workdir), "clusters": []}
        (workdir / "stack.json").write_text(json.dumps(info))
        monkeypatch.setenv(context.CONTEXT_ENV, str(tmp_path / "context.json"))
        context.write(info)
        assert cmd_down(argparse.Namespace(workdir=None)) == 0
        assert stack.wait(timeout=10) is not None  # it got the SIGTERM
        assert "driftbus stopped" in capsys.readouterr().err
    finally:
        stack.kill()
        stack.wait()


def test_down_with_no_context_says_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(context.CONTEXT_ENV, str(tmp_path / "none.json"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cmd_down(argparse.Namespace(workdir=None)) == 1
    assert "nothing running" in capsys.readouterr().err
