"""Age keys made by the real age-keygen, for the SOPS tests (unit and integration)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.common import binaries


def age_key(path: Path) -> str:
    """A new age key in ``path`` (age-keygen); its recipient."""
    subprocess.run([binaries.require("age-keygen"), "-o", path], check=True, capture_output=True)
    return next(
        line.split(": ", 1)[1]
        for line in path.read_text().splitlines()
        if line.startswith("# public key: ")
    )
