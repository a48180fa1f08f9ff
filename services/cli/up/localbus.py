"""The closed bus of ``driftbus up``: the project's locked-down mode (docs/security.md), generated
per stack.

``up`` never runs an open nats-server: it makes a throwaway CA, a server certificate and one
client certificate per identity (``tls.Authority``), a fresh password per identity, and the
permission sets of ``permissions`` (a planner; a watcher and an applier of each of its clusters,
``watcher-<cluster>`` and ``applier-<cluster>``; a Git source of the first cluster, the status page
as a read-only ``viewer``, the notification service as ``notify``, and the person who ran it
as an ``operator``: an admin who also reads). nats-server then requires mutual TLS and a
password from every client and enforces each role's subjects. The operator's credentials go
into the context every ``driftbus`` command reads (``context.fill_nats``), so commands keep
working with no exports; so do the notify role's, for a ``driftbus notify`` started beside.

Everything lives in one owner-only directory; no password is ever printed or put in an
environment variable (the services read theirs from a file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from services.access import permissions
from services.cli.security import new_password
from services.common import bus
from services.controlplane.servers import process
from services.controlplane.tls import Authority, Pair

OPERATOR = "operator"
"""The user of the stack (its commands: publish, status, why, tenants…)."""
PAGE = "page"
"""The status page's identity: reads, never publishes."""
SOURCE = "gitops"
"""``up --git``'s ``driftbus source``."""
NOTIFIER = "notify"
"""``driftbus notify``: its own role (``permissions.notify``), never the operator's."""


class LocalBusError(RuntimeError):
    """The credentials of the local bus could not be written (the message names the path)."""


@dataclasses.dataclass(frozen=True)
class Identity:
    """One NATS user of the stack: its name, password file and client certificate."""

    user: str
    password_file: Path
    pair: Pair


@dataclasses.dataclass(frozen=True)
class LocalBus:
    directory: Path
    ca: Path
    server: Pair
    conf: Path
    identities: dict[str, Identity]
    """By role: planner, ``watcher-<cluster>`` and ``applier-<cluster>`` per cluster, source,
    ui (the page), notify, cli (the operator)."""

    def server_args(self) -> list[str]:
        """nats-server's flags: the users of ``conf``, TLS that requires a client certificate
        of this stack's CA (loopback only: ``NatsServer`` binds 127.0.0.1)."""
        return [
            *("-c", str(self.conf), "--tls", "--tlscert", str(self.server.cert)),
            *("--tlskey", str(self.server.key), "--tlscacert", str(self.ca), "--tlsverify"),
        ]

    @staticmethod
    def url(port: int) -> str:
        return f"tls://{process.LOOPBACK}:{port}"

    def settings(self, role: str) -> dict[str, str]:
        """The ``NatsSettings`` fields (``nats_user``…) of ``role``: paths, never a secret."""
        who = self.identities[role]
        return {
            "nats_user": who.user,
            "nats_password_file": str(who.password_file),
            "nats_ca": str(self.ca),
            "nats_cert": str(who.pair.cert),
            "nats_key": str(who.pair.key),
        }

    def nats(self, role: str, port: int) -> bus.NatsSettings:
        """How ``role`` connects to the stack's nats-server on ``port``."""
        s = self.settings(role)
        return bus.NatsSettings(
            nats_url=self.url(port),
            nats_user=s["nats_user"],
            nats_password_file=s["nats_password_file"],
            nats_ca=s["nats_ca"],
            nats_cert=s["nats_cert"],
            nats_key=s["nats_key"],
        )

    def env(self, role: str) -> dict[str, str]:
        """The environment of a service run as ``role`` (``DRIFTBUS_NATS_*``)."""
        return {f"DRIFTBUS_{k.upper()}": v for k, v in self.settings(role).items()}


def _private_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        raise LocalBusError(f"{path}: {exc.strerror}") from None
    return path


def create(directory: Path, clusters: Sequence[str]) -> LocalBus:
    """Fresh credentials for a stack serving ``clusters`` (its Git source: the first one),
    written under ``directory``."""
    _private_dir(directory)
    ca = Authority.create(_private_dir(directory / "tls"), name="driftbus up CA")
    server = ca.issue("nats-server", server=True)
    users = permissions.fleet(clusters, sources={SOURCE: clusters[:1]}, notifiers=[NOTIFIER])
    users += [
        permissions.NatsUser(OPERATOR, permissions.operator()),
        permissions.NatsUser(PAGE, permissions.viewer()),
    ]
    roles = {"planner": "planner", "source": SOURCE, "ui": PAGE, "cli": OPERATOR}
    roles["notify"] = NOTIFIER
    for c in clusters:
        roles |= {f"watcher-{c}": f"watcher-{c}", f"applier-{c}": f"applier-{c}"}
    passwords = _private_dir(directory / "passwords")
    written = []
    identities: dict[str, Identity] = {}
    by_name = {u.name: u for u in users}
    for role, name in roles.items():
        password = new_password()
        written.append(dataclasses.replace(by_name[name], password=password))
        f = passwords / name
        f.touch(mode=0o600)
        f.write_text(password)
        identities[role] = Identity(name, f, ca.issue(f"client-{name}"))
    conf = directory / "auth.conf"
    conf.touch(mode=0o600)
    # the literal passwords nats-server checks; owner-only, like the password files
    conf.write_text(permissions.authorization_conf(written))
    # the CA's key signed everything the stack needs: no later certificate can be made with it
    ca.ca.key.unlink()
    return LocalBus(directory, ca.ca.cert, server, conf, identities)


__all__ = ["OPERATOR", "PAGE", "Identity", "LocalBus", "LocalBusError", "create"]
