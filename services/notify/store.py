"""The notification configurations on the bus: one entry per configuration in the
``driftbus-notify`` bucket (``platform``, ``tenant.<tenant>``), written by ``driftbus notify
apply``, read by ``driftbus notify show``, followed live by ``driftbus notify``.

A tenant's NATS identity may write only its own key (services/access/permissions.py); the admin
writes any. The service checks every stored configuration again (``config.decode_stored``).
"""

from __future__ import annotations

from typing import Final

from schemas.notify import NotifyConfig
from services.common import bus
from services.notify import config
from services.stored.bucket import Kept, Unreadable

STREAM: Final = f"KV_{bus.NOTIFY_BUCKET}"
SUBJECTS: Final = f"$KV.{bus.NOTIFY_BUCKET}."


def kept(tenant: str) -> Kept[NotifyConfig]:
    """``tenant``'s configuration ("" the platform's) in the bucket."""
    key = config.key_of(tenant)
    return Kept(
        config.document(tenant),
        bucket=bus.NOTIFY_BUCKET,
        key=key,
        ensure=bus.ensure_config_buckets,
    )


async def put(js: bus.JetStream, tenant: str, cfg: NotifyConfig) -> int:
    """Store ``cfg`` as ``tenant``'s configuration ("" the platform's); its revision."""
    return await kept(tenant).put(js, cfg)


async def remove(js: bus.JetStream, tenant: str) -> None:
    """Delete ``tenant``'s configuration: nothing more is sent for it."""
    await bus.kv_delete(js, bus.NOTIFY_BUCKET, config.key_of(tenant))


async def read(js: bus.JetStream, tenant: str) -> NotifyConfig | None:
    """``tenant``'s configuration in force; None when there is none."""
    where = kept(tenant)
    data = await where.stored(js)
    return where.document.decode(data) if data else None


async def read_all(js: bus.JetStream) -> dict[str, NotifyConfig]:
    """Every configuration in force, by tenant ("" the platform's): the admin's view."""
    try:
        keys = await bus.kv_keys(js, bus.NOTIFY_BUCKET)
    except bus.BucketMissing:
        return {}
    except (bus.NatsTimeout, bus.NatsError) as exc:
        raise Unreadable(
            f"cannot list the {bus.NOTIFY_BUCKET} bucket ({type(exc).__name__}: {exc})"
        ) from None
    out: dict[str, NotifyConfig] = {}
    for key in sorted(keys):
        tenant = config.tenant_of(key)
        if tenant is None:
            continue
        got = await read(js, tenant)
        if got is not None:
            out[tenant] = got
    return out


def key_of_message(msg: bus.Message) -> str:
    """The configuration key a message of the bucket's stream is for."""
    return msg.subject.removeprefix(SUBJECTS)
