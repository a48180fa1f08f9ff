"""Generate the committed JSON Schema files from the msgspec Structs: every wire message, and
the files users write (the tenants file).

python -m schemas.generate          # rewrite schemas/json/
python -m schemas.generate --check  # exit 1 if the committed files differ
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import msgspec
import orjson

from schemas.cli import (
    BundleRow,
    FleetPlanDocument,
    PlanDocument,
    ShardsDocument,
    StatusDocument,
    UpInfo,
    VersionDocument,
    WhyRow,
)
from schemas.fleet import ClusterList, FleetStatus, RolloutHistory
from schemas.messages import MESSAGE_TYPES
from schemas.notify import NotifyConfig, NotifyShow
from schemas.replay import ReplayDocument
from schemas.tenants import TenantPolicy
from schemas.windows import WindowRow, WindowsFile

OUT_DIR = Path(__file__).parent / "json"
FILE_TYPES: dict[str, Any] = {
    "tenants": TenantPolicy,
    "windows": WindowsFile,
    "notify": NotifyConfig,
}
"""Files users write, by schema name (docs/tenancy.md, docs/windows.md, docs/notifications.md)."""
CLI_TYPES: dict[str, Any] = {
    "cli-bundles": list[BundleRow],
    "cli-status-bundle": StatusDocument,
    "cli-why": list[WhyRow],
    "cli-shards": ShardsDocument,
    "cli-plan": PlanDocument,
    "cli-plan-fleet": FleetPlanDocument,
    "cli-version": VersionDocument,
    "cli-up": UpInfo,
    "cli-clusters": ClusterList,
    "cli-rollout-status": FleetStatus,
    "cli-rollout-history": RolloutHistory,
    "cli-windows": list[WindowRow],
    "cli-notify": NotifyShow,
    "cli-replay": ReplayDocument,
}
"""What ``-o json`` of a command prints, by schema name."""


def rendered() -> dict[str, bytes]:
    """File name → exact bytes of each schema file."""
    files = {}
    for name, kind in {**MESSAGE_TYPES, **FILE_TYPES, **CLI_TYPES}.items():
        schema = msgspec.json.schema(kind)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"https://driftbus.dev/schemas/{name}.schema.json"
        body = orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
        files[f"{name}.schema.json"] = body
    return files


def drift() -> list[str]:
    """Names of schema files that are missing, stale, or no longer generated."""
    want = rendered()
    have = {p.name: p.read_bytes() for p in OUT_DIR.glob("*.schema.json")}
    return sorted(n for n in want.keys() | have.keys() if want.get(n) != have.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m schemas.generate")
    parser.add_argument("--check", action="store_true", help="fail if committed files differ")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift()
        for name in stale:
            print(f"schemas/json/{name} is out of date", file=sys.stderr)
        return 1 if stale else 0
    OUT_DIR.mkdir(exist_ok=True)
    for old in OUT_DIR.glob("*.schema.json"):
        old.unlink()
    for name, body in rendered().items():
        (OUT_DIR / name).write_bytes(body)
        print(f"wrote schemas/json/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
