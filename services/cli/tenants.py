"""``driftbus tenants`` (show the policy in force) and ``driftbus tenants apply FILE`` (check a
tenants file and make it the policy in force): the policy is state on the bus, followed live by
every planner (docs/tenancy.md). An invalid file is refused with FILE:LINE and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import msgspec

from schemas.tenants import Tenant, TenantPolicy
from services.common import settings
from services.common.bus import NatsSettings


def read_file(path: str) -> TenantPolicy:
    """The policy of a tenants file (``-``: standard input); PolicyError or OSError."""
    from services.core import tenancy

    text = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    return tenancy.load_policy(text, "<stdin>" if path == "-" else path)


def rows(policy: TenantPolicy) -> list[dict[str, Any]]:
    """One row per tenant, as ``-o json`` prints them (the file's own key names)."""
    return [
        {"tenant": name, **msgspec.to_builtins(t)} for name, t in sorted(policy.tenants.items())
    ]


def _cell(t: Tenant, key: str) -> str:
    value = msgspec.to_builtins(t).get(key)
    if value is None:
        return "any" if key == "namespaces" else "-"
    if isinstance(value, list):
        return ",".join(value) or "-"
    return str(value)


def show(policy: TenantPolicy, output: str) -> None:
    from services.cli import table

    if output == "json":
        print(msgspec.json.encode(msgspec.to_builtins(policy)).decode())
        return
    print(f"lockdown: {'on' if policy.lockdown else 'off'}")
    table.emit(
        [
            {
                "tenant": name,
                "service account": t.service_account,
                "namespaces": _cell(t, "namespaces"),
                "cluster-scoped": "yes" if tenant_cluster_scoped(t) else "no",
                "allow": ",".join(t.kinds.allow) or "-",
                "deny": ",".join(t.kinds.deny) or "-",
                "clusters": ",".join(t.clusters),
            }
            for name, t in sorted(policy.tenants.items())
        ],
        ["tenant", "service account", "namespaces", "cluster-scoped", "allow", "deny", "clusters"],
        "table",
    )


def tenant_cluster_scoped(t: Tenant) -> bool:
    from services.core import tenancy

    return tenancy.may_manage_cluster_scoped(t)


def cmd_tenants(args: argparse.Namespace) -> int:
    from services.cli import table, user
    from services.common import policy
    from services.core.tenancy import PolicyError

    new: TenantPolicy | None = None
    if args.action == "apply":
        if not args.file:
            return table.fail("tenants apply", ValueError("name the tenants file (or -)"))
        try:
            new = read_file(args.file)
        except (PolicyError, OSError) as exc:
            return table.fail("tenants apply", exc)

    async def run() -> int:
        nc = await user.connect(args)
        try:
            js = nc.jetstream()
            if new is None:
                show(await policy.read_policy(js), args.output)
                return 0
            revision = await policy.put_policy(js, new)
            print(
                f"tenant policy revision {revision} in force: {len(new.tenants)} tenants, "
                f"lockdown {'on' if new.lockdown else 'off'}"
            )
            return 0
        finally:
            await nc.close()

    try:
        return asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the bus refused or is away: one line, not a trace
        return table.fail(f"tenants {args.action or ''}".strip(), exc)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser(
        "tenants",
        help="show the tenant policy in force, or apply a tenants file (docs/tenancy.md)",
        description="Without arguments: the tenant policy in force. `tenants apply FILE` checks "
        "FILE (YAML or JSON; - reads standard input) and makes it the policy every planner "
        "enforces, at once and without a restart. Only the admin NATS identity may apply.",
    )
    t.add_argument(
        "action", nargs="?", choices=["show", "apply"], default="show", help="default: show"
    )
    t.add_argument("file", nargs="?", help="the tenants file to apply (apply only)")
    t.add_argument("-o", "--output", choices=["table", "json"], default="table")
    settings.add_arguments(t, NatsSettings)
    t.set_defaults(func=cmd_tenants)
