"""What ``driftbus up`` does on its bus as the operator: put the tenant policy in force and
publish ``examples/hello`` with live progress, then print its table."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from services.common import bus
from services.controlplane import assets

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "hello"


def say(text: str) -> None:
    print(f"\033[1m{text}\033[0m" if sys.stderr.isatty() else text, file=sys.stderr, flush=True)


async def publish_example(nats: bus.NatsSettings, cluster: str, within: float) -> Any:
    from services.cli import reads as user
    from services.inputs import load
    from services.revisions.publish import publish_bundle

    loaded = load.load_paths([str(EXAMPLE)], locate=assets.ensure)
    revision = loaded.content_revision()
    nc = await bus.connect(nats, name="driftbus-up", reconnect=False)
    try:
        waiter = user.BundleWait(nc, cluster, "hello")
        await waiter.start()
        await publish_bundle(
            nc.jetstream(),
            cluster=cluster,
            bundle="hello",
            revision=revision,
            manifests=[m.obj for m in loaded.manifests],
            # force: a hand edit (kubectl edit/patch) makes kubectl a field manager; healing it
            # means taking the field back. Without force driftbus reports a Conflict instead.
            options=user.BundleOptions(force=True),
            source=loaded.source,
        )
        say(f"published examples/hello ({len(loaded.manifests)} objects) as hello@{revision}")
        status = await waiter.wait(revision, within=within, progress=True)
        rows = await user.object_rows(nc.jetstream(), cluster, "hello")
    finally:
        await nc.drain()
    return status, rows


async def apply_policy(nats: bus.NatsSettings, tenant_policy: Any) -> None:
    from services.tenancy import store as policy

    nc = await bus.connect(nats, name="driftbus-up", reconnect=False)
    try:
        await policy.put_policy(nc.jetstream(), tenant_policy)
    finally:
        await nc.drain()


async def apply_notifications(nats: bus.NatsSettings, config: Any) -> None:
    """``up --notify FILE``: the platform's notifications, in force before notify starts."""
    from services.notify.store import put as put_notifications

    nc = await bus.connect(nats, name="driftbus-up", reconnect=False)
    try:
        await put_notifications(nc.jetstream(), "", config)
    finally:
        await nc.drain()


async def notify_following(nats: bus.NatsSettings, within: float) -> bool:
    """Whether ``driftbus notify`` (connecting as ``nats``: its own role) made its consumers
    within ``within`` seconds: from then on every status is kept for it."""
    inbox = bus.inbox_prefix("notify")  # the role's own replies, as the service's
    nc = await bus.connect(nats, name="driftbus-up", reconnect=False, inbox=inbox)
    try:
        deadline = asyncio.get_running_loop().time() + within
        while asyncio.get_running_loop().time() < deadline:
            if await bus.durables_exist(nc.jetstream(), bus.NOTIFY_CONSUMERS):
                return True
            await asyncio.sleep(0.3)
        return False
    finally:
        await nc.drain()


def print_example(status: Any, rows: list[Any], fmt: str) -> None:
    from services.cli import output, table

    if fmt == "json":
        return
    if status is None:
        print("example bundle: no status yet (see the service logs)")
    else:
        print(f"hello@{status.revision}: {table.colour(str(status.phase))} — {status.message}")
    columns = ["kind", "namespace", "name", "phase", "health", "message"]
    print(table.render(output.rows(rows), columns))
