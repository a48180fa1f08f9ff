"""``driftbus notify``: run the notification service, or manage what it sends
(docs/notifications.md).

- ``driftbus notify`` — the service (``services/notify``), until a signal; with neither
  ``--nats-url`` nor ``NATS_URL``, on the bus of the running ``driftbus up`` as its ``notify``
  role (``context``);
- ``driftbus notify apply FILE [--tenant T]`` — check a notifications file and put it in force
  as the platform's (or tenant T's) configuration; a tenant's file naming another's bundles is
  refused, and nothing changes;
- ``driftbus notify show [--tenant T] [-o json|yaml]`` — the configurations in force (the admin
  sees every one; a tenant its own), with the paths of secret files, never their content;
- ``driftbus notify remove [--tenant T]`` — stop sending for that configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from schemas.notify import NotifyConfig, NotifyEntry, NotifyShow, Provider
from services.cli import exits, run
from services.common import settings
from services.notify import config as notify_config
from services.notify.service import NotifySettings
from services.notify.service import run as run_notify

SERVICE = run.Service(run_notify, NotifySettings, "send events to chat, webhooks, commit statuses")


def read_file(path: str, tenant: str) -> NotifyConfig:
    """The configuration of a notifications file (``-``: standard input); ConfigError or
    OSError."""
    text = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    return notify_config.load(text, "<stdin>" if path == "-" else path, tenant)


def document(configs: dict[str, NotifyConfig]) -> NotifyShow:
    return NotifyShow(
        [
            NotifyEntry(tenant=t, key=notify_config.key_of(t), config=c)
            for t, c in sorted(configs.items())
        ]
    )


def _target(p: Provider) -> str:
    """Where a provider sends, as ``show`` prints it: a path for anything secret."""
    if p.url:
        return str(p.url)
    if p.url_file:
        return f"urlFile {p.url_file}"
    where = p.api_url or ("https://api.github.com" if p.type == "github" else "https://gitlab.com")
    return f"{where} {p.repository or '(repository of the bundle source)'}"


def show(configs: dict[str, NotifyConfig], output: str) -> None:
    from services.cli import output as out
    from services.cli import table

    doc = document(configs)
    if output in ("json", "yaml"):
        out.dump(doc, output)
        return
    if not doc.configurations:
        print("no notifications configured (driftbus notify apply FILE)")
        return
    providers, alerts = [], []
    for e in doc.configurations:
        owner = e.tenant or "(platform)"
        for p in e.config.providers:
            secrets = [f for f in (p.secret_file, p.token_file) if f]
            providers.append(
                {
                    "configuration": owner,
                    "provider": p.name,
                    "type": str(p.type),
                    "sends to": _target(p),
                    "secret files": ",".join(secrets) or "-",
                }
            )
        for a in e.config.alerts:
            alerts.append(
                {
                    "configuration": owner,
                    "providers": ",".join(a.providers),
                    "bundles": ",".join(a.bundles) or "*",
                    "tenants": ",".join(a.tenants) or "*",
                    "clusters": ",".join(a.clusters) or a.cluster_selector or "*",
                    "events": ",".join(a.events) or "default",
                }
            )
    table.emit(
        providers, ["configuration", "provider", "type", "sends to", "secret files"], "table"
    )
    print()
    columns = ["configuration", "providers", "bundles", "tenants", "clusters", "events"]
    table.emit(alerts, columns, "table")


def cmd_notify(args: argparse.Namespace) -> int:
    from services.cli import reads as user
    from services.cli import table
    from services.notify import store as saved

    if args.action == "run":
        if args.file:
            return table.fail("notify", ValueError(f"unexpected argument {args.file!r}"))
        from services.cli import context

        try:  # beside `driftbus up`: its bus, as its notify role (as the commands find it)
            context.fill_nats(args, role="notify")
        except context.StaleContext as exc:
            return table.fail("notify", exc)
        return run.start("notify", SERVICE, args)
    tenant = args.tenant or ""
    new: NotifyConfig | None = None
    if args.action == "apply":
        if not args.file:
            return table.fail("notify apply", ValueError("name the notifications file (or -)"))
        try:
            new = read_file(args.file, tenant)
        except (notify_config.ConfigError, OSError) as exc:
            return table.fail("notify apply", exc)
    elif args.file:
        return table.fail(f"notify {args.action}", ValueError("takes no file"))

    async def main() -> int:
        async with user.connected(args) as nc:
            js = nc.jetstream()
            if args.action == "show":
                if args.tenant is None:
                    configs = await saved.read_all(js)
                else:
                    got = await saved.read(js, tenant)
                    configs = {tenant: got} if got is not None else {}
                show(configs, args.output)
                return 0
            if args.action == "remove":
                await saved.remove(js, tenant)
                print(f"notifications {notify_config.key_of(tenant)} removed")
                return 0
            assert new is not None
            revision = await saved.put(js, tenant, new)
            print(
                f"notifications {notify_config.key_of(tenant)} revision {revision} in force: "
                f"{len(new.providers)} providers, {len(new.alerts)} alerts"
            )
            return 0

    return exits.run_or_fail(f"notify {args.action}", main())


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "notify",
        help="send events to webhooks, Slack, Teams and commit statuses; apply or show what "
        "is sent (docs/notifications.md)",
        description="Without an action: run the notification service until a signal. "
        "`notify apply FILE` checks FILE (YAML or JSON; - reads standard input) and puts it in "
        "force as the platform's configuration, or with --tenant as that tenant's (which may "
        "name only the tenant's own bundles). `notify show` prints what is in force (paths of "
        "secret files, never their content); `notify remove` deletes a configuration.",
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["run", "apply", "show", "remove"],
        default="run",
        help="default: run (the service)",
    )
    p.add_argument("file", nargs="?", help="apply: the notifications file")
    p.add_argument(
        "--tenant",
        default=None,
        help="apply, show, remove: the tenant's configuration (default: the platform's; show "
        "without it: every configuration the identity may read)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=["table", "json", "yaml"],
        default="table",
        help="show: json or yaml as schemas/json/cli-notify.schema.json (default: table)",
    )
    settings.add_arguments(p, NotifySettings)
    p.set_defaults(func=cmd_notify)
