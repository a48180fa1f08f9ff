"""Finding the running stack, as kubectl finds its cluster: ``driftbus up`` writes a context file
(its NATS URL, kubeconfig, clusters and pid), and every command reads it when neither
``--nats-url`` nor ``NATS_URL`` says where the bus is.

A stack may serve several clusters (``up --cluster a --cluster b``): ``cluster`` is the first,
every command's default ``--cluster``; ``clusters`` lists them all (name, labels, kubeconfig
context). A context written before fleets has ``cluster`` only, which ``clusters()`` reads as a
one-cluster list.

The file is ``$DRIFTBUS_UP_CONTEXT`` (not ``DRIFTBUS_CONTEXT``: that is the services' kubeconfig
context), else ``$XDG_CONFIG_HOME/driftbus/context.json`` (default
``~/.config/driftbus/context.json``). A context whose ``up`` is no longer running is stale: a
command then says so in one line, naming the file, instead of trying an address nothing listens
on. ``up`` removes its context when it stops.

The bus of ``up`` is closed (``localbus``): the context also names the operator's NATS
credentials (``nats_auth``: user, password file, CA, client certificate — paths, no secret), which
a command takes with the URL (``fill_nats``), and those of the services a user may start beside
the stack (``nats_roles``: ``notify``). The file is owner-only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

CONTEXT_ENV = "DRIFTBUS_UP_CONTEXT"


class StaleContext(RuntimeError):
    """The context names a stack that is no longer running."""


def path() -> Path:
    if explicit := os.environ.get(CONTEXT_ENV):
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "driftbus" / "context.json"


def write(info: dict[str, Any]) -> Path:
    """Write the context of a stack ``up`` started (``info``: its stack.json)."""
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    tmp.touch(mode=0o600)  # it names the page's token and the operator's credential files
    tmp.write_text(json.dumps(info, indent=2))
    tmp.replace(p)
    return p


def remove(pid: int) -> None:
    """Remove the context if it is the one of process ``pid`` (another ``up`` may own it now)."""
    p = path()
    try:
        if json.loads(p.read_text()).get("pid") == pid:
            p.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def _alive(pid: int) -> bool:
    if pid <= 0:  # 0 and negatives name process groups, not a process
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read() -> dict[str, Any] | None:
    """The context of the running stack; None when there is none; StaleContext when the file
    names a stack that stopped."""
    p = path()
    try:
        info = json.loads(p.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StaleContext(f"the context {p} cannot be read ({exc}); remove it") from None
    if not isinstance(info, dict):
        raise StaleContext(f"the context {p} is not a JSON object; remove it")
    pid = info.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        raise StaleContext(
            f"the stack of the context {p} is not running (driftbus up, pid {pid}, stopped); "
            "start it again, or set NATS_URL"
        )
    return dict(info)


def _flag_or_running(flag: str | None, field: str) -> str | None:
    """The flag, else (when ``NATS_URL`` does not name another bus) the running stack's
    ``field``; None when neither says."""
    if flag or os.environ.get("NATS_URL"):
        return flag
    info = read()
    return str(info[field]) if info and info.get(field) else None


def nats_url(flag: str | None) -> str | None:
    """Where the bus is for a command: the flag, else ``NATS_URL``, else the running stack's
    (None: the settings' default)."""
    return _flag_or_running(flag, "nats_url")


AUTH_FIELDS = ("nats_user", "nats_password_file", "nats_ca", "nats_cert", "nats_key")
"""What ``up`` puts in ``nats_auth``: ``NatsSettings`` fields, paths and a user name."""


def fill_nats(args: argparse.Namespace, role: str = "") -> None:
    """Where the bus is for a command, and as whom: the flags, else ``NATS_URL`` (and the
    ``DRIFTBUS_NATS_*`` variables), else the running stack's URL and the operator's credentials
    from its context — or, for a service (``role``: ``notify``), that role's (``nats_roles``) —
    each credential unless a flag or variable gives it."""
    from_context = not (getattr(args, "nats_url", None) or os.environ.get("NATS_URL"))
    args.nats_url = nats_url(getattr(args, "nats_url", None))
    if not from_context or args.nats_url is None:
        return
    info = read() or {}
    roles = info.get("nats_roles")
    auth = (roles.get(role) if isinstance(roles, dict) else None) if role else info.get("nats_auth")
    if not isinstance(auth, dict):
        return
    for field in AUTH_FIELDS:
        given = getattr(args, field, None) or os.environ.get(f"DRIFTBUS_{field.upper()}")
        if not given and isinstance(auth.get(field), str):
            setattr(args, field, auth[field])
    # asyncio warns on every TLS connection nats-py closes; a command's output is no place
    logging.getLogger("asyncio").addFilter(_quiet_tls_eof)


def _quiet_tls_eof(record: logging.LogRecord) -> bool:
    return "eof_received() has no effect when using ssl" not in record.getMessage()


def add_cluster_arg(p: argparse.ArgumentParser, what: str) -> None:
    """``--cluster``, defaulting to the running stack's (``main`` fills it in: ``cluster``)."""
    p.add_argument(
        "--cluster",
        help=f"{what} (default: the cluster of the stack `driftbus up` runs, when NATS_URL "
        "is unset)",
    )
    p.set_defaults(cluster_from_context=True)


def clusters(info: dict[str, Any]) -> list[str]:
    """The names of the clusters of a context (or stack.json): ``clusters``, else the one
    ``cluster`` of a single-cluster stack."""
    rows = info.get("clusters")
    if isinstance(rows, list):
        names = [r["name"] for r in rows if isinstance(r, dict) and isinstance(r.get("name"), str)]
        if names:
            return names
    one = info.get("cluster")
    return [one] if isinstance(one, str) and one else []


def cluster(flag: str | None) -> str | None:
    """The cluster a command is about: the flag, else the running stack's when the bus is its
    own (``NATS_URL`` unset); None when neither says."""
    return _flag_or_running(flag, "cluster")
