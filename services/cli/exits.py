"""How a command that talks to the bus ends: its coroutine run to an exit code, any failure
(the bus refused or is away, a bad name) one line naming the command, exit 1, no trace."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_or_fail(command: str, main: Coroutine[Any, Any, int]) -> int:
    """``main``'s exit code, or 1 after ``driftbus COMMAND: reason`` on stderr."""
    from services.cli import table

    try:
        return asyncio.run(main)
    except Exception as exc:  # noqa: BLE001 - one line, naming the command
        return table.fail(command, exc)
