"""Settings models: one frozen dataclass per service, read from flags and the environment.

Each field declares its documentation once (``setting(default, "why", env=...)``); the same
declaration produces the ``--flag``, the ``DRIFTBUS_*`` environment variable, the ``--help`` text
and the table in ``docs/settings.md``. Precedence: flag > environment > default. A value that
does not parse fails loudly at start-up, naming the variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names it."""


def replica_id() -> str:
    """Default name of a service replica: unique per process, readable in events and logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


def setting(
    default: Any,
    doc: str,
    *,
    env: str | None = None,
    flag: str | None = None,
    secret: bool = False,
) -> Any:
    """A settings field. ``secret`` keeps the value out of ``repr`` (and so out of any log line
    that prints the settings)."""
    return dataclasses.field(
        default=default, repr=not secret, metadata={"doc": doc, "env": env, "flag": flag}
    )


def _env_name(prefix: str, f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("env") or f"DRIFTBUS_{prefix}{f.name.upper()}"


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _base_type(tp: Any) -> Any:
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def _parse(tp: Any, raw: str, where: str) -> Any:
    base = _base_type(tp)
    try:
        if base is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if base in (int, float):
            return base(raw)
        if typing.get_origin(base) is tuple:
            return tuple(x.strip() for x in raw.split(",") if x.strip())
        return raw
    except ValueError as exc:
        raise SettingsError(f"{where}={raw!r}: {exc}") from None


def add_arguments(
    parser: argparse.ArgumentParser,
    cls: type[Any],
    *,
    prefix: str = "",
    skip: Collection[str] = (),
) -> None:
    """A flag per field of ``cls``; ``skip`` names fields another model already gives the flag
    of (one setting read by two models: one flag, one variable)."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        env = _env_name(prefix, f)
        default = f.default if f.default is not dataclasses.MISSING else None
        parser.add_argument(
            _flag(f),
            dest=f.name,
            default=None,
            metavar=f.name.upper(),
            # argparse formats help with %: a literal one ("N%") is doubled
            help=f"{f.metadata.get('doc', '')} [env {env}; default {default!r}]".replace("%", "%%"),
            type=str,
        )


def load(
    cls: type[T],
    args: argparse.Namespace | None = None,
    *,
    prefix: str = "",
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build ``cls`` from flags (``args``), then environment, then defaults."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        raw = getattr(args, f.name, None) if args is not None else None
        where = _flag(f)
        if raw is None:
            where = _env_name(prefix, f)
            raw = environ.get(where)
        if raw is not None:
            values[f.name] = _parse(hints[f.name], raw, where)
    return cls(**values)


def document(cls: type[Any], *, prefix: str = "") -> str:
    """A Markdown table of the settings of ``cls``."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        rows.append(
            f"| `{_flag(f)}` | `{_env_name(prefix, f)}` | `{f.default!r}` "
            f"| {f.metadata.get('doc', '')} |"
        )
    return "\n".join(rows)
