"""The sync windows on the bus: stored in the ``driftbus-windows`` bucket by ``driftbus windows
apply``, followed live — every stored version in order, the last good one in force — by every
planner, the status page and ``driftbus windows`` (docs/windows.md).
"""

from __future__ import annotations

from typing import Final

from schemas.windows import WindowsFile
from services.common import bus
from services.stored.bucket import Kept
from services.windows.document import WINDOWS

STORED: Final = Kept(
    WINDOWS,
    bucket=bus.WINDOWS_BUCKET,
    key=bus.WINDOWS_KEY,
    ensure=bus.ensure_config_buckets,
)
"""The windows in their bucket (``STORED.following(js)``: the one last-good follower)."""


async def put_windows(js: bus.JetStream, spec: WindowsFile) -> int:
    """Store ``spec`` as the windows in force; returns its revision (the KV sequence)."""
    return await STORED.put(js, spec)


async def read_windows(js: bus.JetStream) -> tuple[WindowsFile, str]:
    """The windows the planners hold — the last usable version stored — and why the latest
    stored version is unusable ("" when it is usable, or none was ever applied)."""
    good = await STORED.last_good(js)
    return good.value, good.problem
