"""How a process reaches NATS: its settings (URL, credentials, TLS, and the limits of what it
reads from the Object Store), reply inbox and connection."""

from __future__ import annotations

import dataclasses
import logging
import ssl
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from schemas.subjects import encode_token
from services.common.bus import objects
from services.common.bus.streams import BusError
from services.common.settings import setting
from services.core import manifest

log = logging.getLogger("driftbus.bus")


@dataclasses.dataclass(frozen=True)
class NatsSettings:
    """How a process reaches NATS: shared by every service's settings and by the CLI."""

    nats_url: str = setting(
        "nats://127.0.0.1:4222",
        "NATS server URL (tls://... for TLS); a cluster's nodes comma-separated",
        env="NATS_URL",
    )
    nats_user: str = setting("", "NATS user name (see docs/security.md for the roles)")
    nats_password: str = setting(
        "",
        "NATS password; set it in the environment, not as a flag (flags show in `ps`)",
        secret=True,
    )
    nats_password_file: str = setting(
        "", "file holding the NATS password (a mounted secret); instead of --nats-password"
    )
    nats_ca: str = setting("", "CA bundle that signed the NATS server's certificate (TLS)")
    nats_cert: str = setting("", "client certificate for mutual TLS with NATS")
    nats_key: str = setting("", "private key of --nats-cert")
    bundle_max_bytes: int = setting(
        manifest.DEFAULT_BUNDLE_MAX_BYTES,
        "most bytes of stored manifests (JSON) one bundle may have: a bigger Object Store "
        "reference is refused before it is fetched, a stored object holding more is refused as "
        "soon as the bytes read pass it; the same limit refuses a publish",
        env=manifest.BUNDLE_LIMIT_SETTING,
    )
    object_store_max_bytes: int = setting(
        objects.DEFAULT_STORE_MAX_BYTES,
        "most bytes the Object Store bucket of big bundles may hold (the planner creates it so; "
        "when full, a big bundle's publish is refused and nothing stored is dropped)",
    )
    publish_retry: float = setting(
        90.0,
        "seconds a publish is retried through a NATS outage before the caller is told (at most "
        "the 120 s dedupe window less the ack timeout); facts not published by then are "
        "published again later (the watcher relists, the planner re-sends)",
    )


def connected(nc: NATS | None) -> bool:
    """Whether the connection is up now (None: no connection to ask; taken as up)."""
    return nc is None or bool(nc.is_connected)


def inbox_prefix(role: str, cluster: str = "") -> str:
    """Where replies to this process's requests arrive. Each role gets its own prefix so the
    NATS permissions can let a process read its own replies and nobody else's
    (``_INBOX.>`` stays with users)."""
    return f"_DRIFTBUS.{role}" + (f".{encode_token(cluster)}" if cluster else "")


def tls_context(s: NatsSettings) -> ssl.SSLContext | None:
    """A client TLS context when a CA or client certificate is configured, else None."""
    if not (s.nats_ca or s.nats_cert):
        return None
    ctx = ssl.create_default_context(cafile=s.nats_ca or None)
    if s.nats_cert:
        ctx.load_cert_chain(s.nats_cert, s.nats_key or None)
    return ctx


def credentials(s: NatsSettings) -> dict[str, Any]:
    """nats-py's user/password arguments from the settings (read at start-up, once)."""
    if not s.nats_user:
        return {}
    password = s.nats_password
    if s.nats_password_file:
        try:
            password = Path(s.nats_password_file).read_text().strip()
        except OSError as exc:
            raise BusError(f"--nats-password-file: {exc.strerror}: {exc.filename}") from None
    return {"user": s.nats_user, "password": password}


async def connect(
    s: NatsSettings, *, name: str, inbox: str = "_INBOX", reconnect: bool = True, **kwargs: Any
) -> NATS:
    """Connect with the credentials and TLS of ``s``. Services reconnect forever; the CLI
    (``reconnect=False``) fails fast with the server's reason. ``error_cb`` replaces the
    default (a warning per error) for a caller that reports errors itself."""

    async def on_error(exc: Exception) -> None:
        # permission violations arrive here: they name the subject, never a credential
        log.warning("nats connection error", extra={"error": str(exc)})

    try:
        objects.configure(objects.StoreLimits(s.bundle_max_bytes, s.object_store_max_bytes))
    except ValueError as exc:
        raise BusError(str(exc)) from None
    auth = credentials(s)
    tls = tls_context(s)
    if tls is not None:
        auth["tls"] = tls
    return await nats.connect(
        [u.strip() for u in s.nats_url.split(",") if u.strip()],  # a cluster: any of its nodes
        name=name,
        inbox_prefix=inbox,
        max_reconnect_attempts=-1 if reconnect else 3,
        reconnect_time_wait=0.5,
        connect_timeout=5,
        error_cb=kwargs.pop("error_cb", on_error),
        **auth,
        **kwargs,
    )
