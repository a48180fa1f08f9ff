"""How a service run by ``driftbus`` stops on signals (``services/cli/run.py``): the first
SIGTERM stops it, a second one does not interrupt the shutdown under way (it did: landing in the
NATS client's drain, it cancelled a flush and the drain waited out its 10 s timeout until
SIGKILL), and a third one ends the process at once, so a shutdown that hangs can be broken."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap

import pytest

SERVICE = textwrap.dedent(
    """
    import asyncio, sys
    from services.cli.run import Service, _until_signal

    async def run(config):
        print("up", flush=True)  # the signal handlers are in place once this runs
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            print("stopping", flush=True)
            await asyncio.sleep(float(sys.argv[1]))  # the shutdown: a drain, say
            print("stopped cleanly", flush=True)
            raise

    sys.exit(asyncio.run(_until_signal(Service(run, object, "test"), None)))
    """
)


async def _stopped_by(signals: int, shutdown: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVICE, str(shutdown),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )  # fmt: skip
    assert proc.stdout is not None
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"up\n"
    for n in range(signals):
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        if n == 0:  # the next signal lands during the shutdown
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line == b"stopping\n"
        else:  # two signals pending at once are one: let each be handled
            await asyncio.sleep(0.2)
    out, _ = await asyncio.wait_for(proc.communicate(), 20)
    return proc.returncode or 0, out.decode()


@pytest.mark.parametrize(
    ("signals", "code", "clean"),
    [
        pytest.param(1, 0, True, id="one-stops-cleanly"),
        pytest.param(2, 0, True, id="a-second-does-not-cut-the-shutdown-short"),
        pytest.param(3, 1, False, id="a-third-ends-it-at-once"),
    ],
)
async def test_signals_stop_a_service(signals: int, code: int, clean: bool) -> None:
    returncode, out = await _stopped_by(signals, shutdown=1.5)
    assert returncode == code, out
    assert ("stopped cleanly" in out) is clean, out
