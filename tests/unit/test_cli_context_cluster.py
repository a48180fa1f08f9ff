"""``--cluster`` defaults to the running stack's, as kubectl's current context does (context.py).

Found by a new user after ``driftbus up --detach``: ``driftbus bundles`` and ``status`` found the
bus through the context but still asked for ``--cluster``, which the context names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from services.cli import context
from services.cli.main import main


@pytest.fixture
def stack_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A context naming cluster ``edge`` of a live stack (this process stands in for its pid)."""
    file = tmp_path / "context.json"
    file.write_text(
        json.dumps({"cluster": "edge", "nats_url": "nats://127.0.0.1:1", "pid": os.getpid()})
    )
    monkeypatch.setenv(context.CONTEXT_ENV, str(file))
    monkeypatch.delenv("NATS_URL", raising=False)
    return file


@pytest.mark.parametrize(
    ("flag", "nats_url", "expected"),
    [
        (None, None, "edge"),  # the running stack's
        ("prod", None, "prod"),  # the flag wins
        (None, "nats://elsewhere:4222", None),  # another bus: the stack's cluster says nothing
        ("prod", "nats://elsewhere:4222", "prod"),
    ],
)
def test_the_cluster_comes_from_the_flag_else_the_running_stack(
    stack_context: Path,
    monkeypatch: pytest.MonkeyPatch,
    flag: str | None,
    nats_url: str | None,
    expected: str | None,
) -> None:
    if nats_url:
        monkeypatch.setenv("NATS_URL", nats_url)
    assert context.cluster(flag) == expected


def test_without_a_stack_or_flag_the_command_says_cluster_is_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(context.CONTEXT_ENV, str(tmp_path / "none.json"))
    monkeypatch.delenv("NATS_URL", raising=False)
    with pytest.raises(SystemExit) as stop:
        main(["bundles"])
    assert stop.value.code == 2
    assert "--cluster is required (no driftbus up is running)" in capsys.readouterr().err


def test_a_stopped_stack_is_named_not_a_traceback(
    stack_context: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack_context.write_text(json.dumps({"cluster": "edge", "pid": 2**22 + 12345}))
    assert main(["status"]) == 1
    assert "is not running" in capsys.readouterr().err
