"""``-o``: the same typed value as a table for people, or JSON / YAML for machines.

JSON and YAML are the typed Structs of ``schemas/cli.py`` (or wire messages) as they are: numbers
are numbers, times RFC 3339, absent values null; each command's help names its schema file in
``schemas/json/``. Tables are for reading, and may shorten or colour what they show.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

FORMATS = ("table", "json", "yaml")


def add_output_arg(p: argparse.ArgumentParser, schema: str) -> None:
    """``-o table|json|yaml``; ``schema``: the file under schemas/json/ its JSON follows."""
    p.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help=f"table (default), json or yaml: typed, as schemas/json/{schema}.schema.json",
    )


def dump(value: Any, fmt: str) -> None:
    """Print ``value`` (Structs, lists of them, builtins) as JSON or YAML."""
    if fmt == "yaml":
        import yaml

        print(
            yaml.safe_dump(msgspec.to_builtins(value), sort_keys=False, allow_unicode=True), end=""
        )
    else:
        print(msgspec.json.format(msgspec.json.encode(value)).decode())


def rows(values: list[Any]) -> list[dict[str, Any]]:
    """Typed rows as the dicts ``table.render`` takes (times as they would be in JSON)."""
    return [msgspec.to_builtins(v) for v in values]
