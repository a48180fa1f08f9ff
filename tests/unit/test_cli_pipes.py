"""What a person sees of the CLI's plain output: a closed pipe stops a verb quietly (as kubectl
does), and ``up``'s table reads as text, never a Python repr."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest

from services.cli.up import info as upinfo

VERBS = [["version"], ["--help"], ["assets"], ["publish", "--help"]]


@pytest.mark.parametrize("argv", VERBS, ids=" ".join)
def test_a_closed_pipe_stops_quietly(argv: list[str]) -> None:
    """``driftbus version | head -1``: the reader leaves after one line; the verb ends without a
    traceback on stderr, whatever it had left to write."""
    # each line flushed as written, so a write meets the closed pipe (as on a terminal pipe)
    with subprocess.Popen(
        [sys.executable, "-u", "-m", "services.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        rc = proc.wait(timeout=60)
    assert first, "the verb printed nothing"
    assert "Traceback" not in err, err
    assert "BrokenPipe" not in err, err
    assert rc in (0, 141), (rc, err)


def test_up_lists_its_services_as_text() -> None:
    info = {
        "cluster": "local",
        "clusters": [{"name": "local", "server": "https://127.0.0.1:6443"}],
        "services": {"watcher": 9166, "planner": 9167},
        "kubeconfig": "/tmp/kubeconfig",
        "context": "/tmp/context.json",
    }
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        upinfo.print_info(info, "table")
    line = next(ln for ln in out.getvalue().splitlines() if ln.strip().startswith("services"))
    assert line.split(None, 1)[1] == "watcher (pid 9166), planner (pid 9167)"
    assert "{" not in out.getvalue()


def test_the_fast_exit_keeps_what_an_exit_must_do() -> None:
    """``exit_now`` skips the interpreter's teardown, not the exit's duties: the code, the
    atexit handlers (logging's, OpenTelemetry's, a caller's) and buffered output all stay."""
    script = (
        "import atexit, logging, sys\n"
        "from services.cli.main import exit_now\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.stdout.write('buffered, ')\n"  # not flushed: a pipe is block-buffered
        "logging.getLogger('t').warning('logged')\n"
        "exit_now(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 3
    assert done.stdout == "buffered, atexit ran\n"
    assert "logged" in done.stderr


def test_the_executable_ends_through_the_fast_exit() -> None:
    """``driftbus`` (the console script) and ``python -m services.cli.main`` both end in
    ``exit_now``: a short command skips the ~0.2 s of CPU of tearing the interpreter down."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["driftbus"] == "services.cli.main:entry"
    main = (Path(__file__).parents[2] / "services/cli/main.py").read_text()
    assert main.rstrip().endswith('if __name__ == "__main__":\n    exit_now(main())')
