"""The bus locked down (issue 6): every process authenticates as its role over mutual TLS, the
stack still reconciles, and every publish/subscribe outside a role's permissions is refused by
nats-server itself. The configuration under test is the one ``driftbus nats-config`` ships."""

from __future__ import annotations

import asyncio
import re
import secrets
import ssl
import sys
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError
from nats.js import api as js_api

from harness.pipeline import Pipeline, StatusWatch
from schemas.subjects import encode_token
from services.access import permissions
from services.common import bus
from services.controlplane import servers
from services.controlplane.tls import Authority

from ..conftest import unique_name
from ..gitrepo import git
from .test_scaling import configmaps

pytestmark = pytest.mark.reliability

A, B = unique_name("alpha"), unique_name("beta")


class Secured:
    """nats-server with the shipped permission sets, TLS that requires client certificates,
    and a password per identity."""

    def __init__(self, workdir: Path) -> None:
        self.ca = Authority.create(workdir / "pki")
        self.server_pair = self.ca.issue("nats-server", server=True)
        self.client_pair = self.ca.issue("driftbus-client")
        names = ["planner", f"watcher-{A}", f"applier-{A}", f"watcher-{B}", f"applier-{B}"]
        people = ["alice", "bob", "gitops"]
        self.passwords = {n: secrets.token_urlsafe(18) for n in [*names, *people]}
        users = permissions.fleet(
            [A, B], {"alice": [A], "bob": [B]}, self.passwords, sources={"gitops": [A]}
        )
        conf = workdir / "nats.conf"
        conf.write_text(permissions.authorization_conf(users))
        self.server = servers.NatsServer(
            workdir / "nats",
            extra_args=[
                "-c",
                str(conf),
                "--tls",
                "--tlscert",
                str(self.server_pair.cert),
                "--tlskey",
                str(self.server_pair.key),
                "--tlscacert",
                str(self.ca.ca.cert),
                "--tlsverify",
            ],
        )

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.server.port}"

    def tls_env(self) -> dict[str, str]:
        return {
            "NATS_URL": self.url,
            "DRIFTBUS_NATS_CA": str(self.ca.ca.cert),
            "DRIFTBUS_NATS_CERT": str(self.client_pair.cert),
            "DRIFTBUS_NATS_KEY": str(self.client_pair.key),
        }

    def identity(self, name: str) -> dict[str, str]:
        return {"DRIFTBUS_NATS_USER": name, "DRIFTBUS_NATS_PASSWORD": self.passwords[name]}

    def tls(self, *, client_cert: bool = True) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.ca.cert))
        if client_cert:
            ctx.load_cert_chain(str(self.client_pair.cert), str(self.client_pair.key))
        return ctx

    async def connect(self, name: str, errors: list[str], **kw: Any) -> NATS:
        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        return await nats.connect(
            self.url,
            user=name,
            password=self.passwords[name],
            tls=self.tls(),
            error_cb=on_error,
            max_reconnect_attempts=0,
            **kw,
        )


async def _violation(errors: list[str], what: str, within: float = 5.0) -> str:
    deadline = asyncio.get_running_loop().time() + within
    while asyncio.get_running_loop().time() < deadline:
        for e in errors:
            if "permissions violation" in e and what.lower() in e:
                return e
        await asyncio.sleep(0.05)
    raise AssertionError(f"no permissions violation for {what!r}; errors seen: {errors}")


async def refused_publish(sec: Secured, who: str, subject: str) -> str:
    errors: list[str] = []
    nc = await sec.connect(who, errors)
    try:
        await nc.publish(subject, b"{}")
        await nc.flush()
        return await _violation(errors, f'publish to "{subject}"')
    finally:
        await nc.close()


async def refused_subscribe(sec: Secured, who: str, subject: str) -> str:
    errors: list[str] = []
    nc = await sec.connect(who, errors)
    try:
        await nc.subscribe(subject)
        await nc.flush()
        return await _violation(errors, f'subscription to "{subject}"')
    finally:
        await nc.close()


async def test_locked_down_bus_works_and_refuses_every_forbidden_operation(
    stack: servers.Stack, tmp_path: Path, namespace: str, measured: Any
) -> None:
    sec = Secured(tmp_path)
    await asyncio.to_thread(sec.server.start)
    p = Pipeline(stack=stack, nats=sec.server, cluster=A, workdir=tmp_path)
    p.extra_env = sec.tls_env()
    p.role_env = {
        "planner": sec.identity("planner"),
        "watcher": sec.identity(f"watcher-{A}"),
        "applier": sec.identity(f"applier-{A}"),
    }
    alice: NATS | None = None
    try:
        # 1. the locked-down stack reconciles: services and the user's CLI, all over mTLS
        p.start_all()
        alice_errors: list[str] = []
        alice = await sec.connect("alice", alice_errors)
        watch = StatusWatch()
        await watch.start(alice, A, "locked")  # alice may read her cluster's status
        src = tmp_path / "src"
        src.mkdir()
        (src / "cms.yaml").write_text(yaml.safe_dump_all(configmaps(namespace, 20)))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.cli.main",
            "publish",
            str(src),
            "--cluster",
            A,
            "--bundle",
            "locked",
            "--revision",
            "r1",
            "--wait",
            "--timeout",
            "120",
            env={**p.env(), **sec.identity("alice")},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, f"{out.decode()}\n{p.logs()}"
        await watch.ready("r1", 60, p.logs)
        assert not alice_errors, alice_errors

        # a Git source under its own identity publishes a bundle and its own status
        repo = tmp_path / "repo"
        repo.mkdir()
        ours = configmaps(namespace, 3)
        for cm in ours:
            cm["metadata"]["name"] = "git-" + cm["metadata"]["name"]
        (repo / "cms.yaml").write_text(yaml.safe_dump_all(ours))
        git(repo, "init", "-q")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "three")
        head = git(repo, "rev-parse", "HEAD")
        git_watch = StatusWatch()
        await git_watch.start(alice, A, "locked-git")
        p.role_env["source"] = sec.identity("gitops")
        p.start("source", None, "--cluster", A, "--bundle", "locked-git", "--git", str(repo))
        await git_watch.ready(head, 60, p.logs)
        await git_watch.source_status(lambda st: st.commit == head, 30, p.logs)

        server_log = sec.server.process.log_path.read_text() if sec.server.process else ""
        assert "Violation" not in server_log, server_log[-3000:]  # no service needed more

        # 2. what each identity may not do, refused by nats-server
        ta, tb = encode_token(A), encode_token(B)
        refusals = [
            # a watcher publishes only its own cluster's server facts
            await refused_publish(sec, f"watcher-{A}", f"driftbus.server.{tb}.=.ConfigMap.ns.x"),
            await refused_publish(sec, f"watcher-{A}", f"driftbus.intent.{ta}.=.ConfigMap.ns.x"),
            await refused_publish(sec, f"watcher-{A}", f"driftbus.bundle.{ta}.=.b"),
            await refused_publish(sec, f"watcher-{A}", f"driftbus.applied.{ta}.=.ConfigMap.ns.x"),
            await refused_subscribe(sec, f"watcher-{A}", "driftbus.>"),
            # an applier consumes only its own cluster's intents, publishes applied/status
            await refused_subscribe(sec, f"applier-{A}", f"driftbus.intent.{ta}.>"),
            # it follows its own cluster's planner claim as it is written, not another's
            await refused_subscribe(sec, f"applier-{A}", bus.claim_subject(B)),
            await refused_publish(
                sec,
                f"applier-{A}",
                f"$JS.API.CONSUMER.MSG.NEXT.{bus.INTENTS}.{bus.intent_consumer_name(B)}",
            ),
            await refused_publish(sec, f"applier-{A}", f"driftbus.applied.{tb}.=.ConfigMap.ns.x"),
            await refused_publish(sec, f"applier-{A}", f"driftbus.status.{tb}.=.b.bundle"),
            await refused_publish(sec, f"applier-{A}", f"driftbus.server.{ta}.=.ConfigMap.ns.x"),
            await refused_publish(sec, f"applier-{A}", f"driftbus.intent.{ta}.=.ConfigMap.ns.x"),
            await refused_publish(sec, f"applier-{A}", f"$JS.API.STREAM.DELETE.{bus.INTENTS}"),
            # a user publishes bundles to and reads status of their clusters only
            await refused_publish(sec, "alice", f"driftbus.bundle.{tb}.=.b"),
            await refused_subscribe(sec, "alice", f"driftbus.status.{tb}.>"),
            await refused_subscribe(sec, "alice", "driftbus.status.>"),
            await refused_publish(sec, "alice", f"driftbus.intent.{ta}.=.ConfigMap.ns.x"),
            await refused_publish(sec, "alice", f"driftbus.server.{ta}.=.ConfigMap.ns.x"),
            await refused_subscribe(sec, "alice", "_DRIFTBUS.planner.>"),
            await refused_publish(sec, "alice", f"$JS.API.STREAM.DELETE.{bus.BUNDLES}"),
            await refused_publish(sec, "alice", f"$JS.API.CONSUMER.CREATE.{bus.INTENTS}"),
            await refused_publish(sec, "bob", f"driftbus.bundle.{ta}.=.b"),
            # a Git source reports its own status, never a bundle's or an object's
            await refused_publish(sec, "gitops", f"driftbus.status.{ta}.=.b.bundle"),
            await refused_publish(sec, "gitops", f"driftbus.status.{ta}.=.b.object.=.CM.ns.x"),
            await refused_publish(sec, "gitops", f"driftbus.status.{tb}.=.b.source"),
            await refused_publish(sec, "gitops", f"driftbus.bundle.{tb}.=.b"),
            await refused_publish(sec, "alice", f"driftbus.status.{ta}.=.b.source"),
        ]
        # An applier of A creating a consumer that reads B's intents: the filter-bearing API
        # subject is how appliers create theirs, and B's filter is not theirs to use.
        errors: list[str] = []
        nc = await sec.connect(f"applier-{A}", errors, inbox_prefix=bus.inbox_prefix("applier", A))
        try:
            with pytest.raises((NatsError, TimeoutError)):
                await nc.jetstream(timeout=2).add_consumer(
                    bus.INTENTS,
                    config=js_api.ConsumerConfig(
                        name=bus.intent_consumer_name(A),
                        durable_name=bus.intent_consumer_name(A),
                        filter_subject=f"driftbus.intent.{tb}.>",
                        ack_policy=js_api.AckPolicy.EXPLICIT,
                    ),
                )
            refusals.append(await _violation(errors, "publish to"))
        finally:
            await nc.close()

        # 3. no way in without the right credentials, a client certificate and TLS
        for label, kwargs in [
            ("no credentials", {"tls": sec.tls()}),
            ("wrong password", {"tls": sec.tls(), "user": "alice", "password": "guess"}),
            (
                "no client certificate",
                {**sec_identity(sec, "alice"), "tls": sec.tls(client_cert=False)},
            ),
            (
                "untrusted server CA",
                {**sec_identity(sec, "alice"), "tls": ssl.create_default_context()},
            ),
        ]:
            why = await connect_refused([sec.url], **kwargs)
            refusals.append(f"{label}: {why}")
        refusals.append(f"plain text: {await plain_text_refused(sec.server.port)}")
        await alice.close()
        print("\n".join(refusals))
        measured(
            f"locked-down bus (mTLS + per-role users): 20 objects Ready via the CLI; "
            f"{len(refusals)} forbidden operations refused by nats-server"
        )
    finally:
        if alice is not None:
            await alice.close()
        p.stop_all()
        sec.server.stop()


def sec_identity(sec: Secured, name: str) -> dict[str, str]:
    return {"user": name, "password": sec.passwords[name]}


async def connect_refused(urls: list[str], **kwargs: Any) -> str:
    """Why a connection attempt failed (it must fail)."""
    try:
        nc = await nats.connect(
            urls, max_reconnect_attempts=0, connect_timeout=3, allow_reconnect=False, **kwargs
        )
    except Exception as exc:  # noqa: BLE001 - each way in fails differently: auth, TLS, protocol
        return f"{type(exc).__name__}: {exc}"
    await nc.close()
    raise AssertionError(f"connected with {sorted(kwargs)} to {urls}")


async def plain_text_refused(port: int) -> str:
    """A client that skips TLS altogether gets the server's refusal, not a session."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        info = await reader.readline()
        assert b'"tls_required":true' in info, info
        writer.write(b'CONNECT {"verbose":false,"user":"alice","pass":"x"}\r\nPING\r\n')
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(1024), 10)
        assert b"PONG" not in reply, reply
        return reply.decode(errors="replace").strip() or "connection closed"
    finally:
        writer.close()


def _compose() -> dict[str, Any]:
    return yaml.safe_load((Path(__file__).resolve().parents[2] / "compose.yaml").read_text())


def _local(value: str, etc: Path) -> str:
    """A compose value as it would be inside the containers (``${VAR:-default}`` with nothing
    set in the environment), mapped onto this machine."""
    value = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)
    return value.replace("/etc/nats", str(etc))


async def test_compose_recipe_for_the_locked_down_bus_works(
    stack: servers.Stack, tmp_path: Path, namespace: str
) -> None:
    """compose.yaml's own commands, run here: nats-init generates users, passwords and certs;
    nats-server starts with the compose flags; the services connect with the compose
    environment (password files, mutual TLS) and reconcile a bundle."""
    doc = _compose()
    etc = tmp_path / "etc-nats"
    init = doc["services"]["nats-init"]
    script = init["command"][0].replace("$$", "$").replace("chown -R 10001", "true")
    proc = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        _local(script, etc),
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "DRIFTBUS_CLUSTER": "local",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()
    args = [_local(a, etc) for a in doc["services"]["nats"]["command"]]
    for flag in ("-m", "-sd"):  # the harness picks a free port and its own store
        i = args.index(flag)
        del args[i : i + 2]
    nats_server = servers.NatsServer(tmp_path / "nats", extra_args=args)
    await asyncio.to_thread(nats_server.start)
    p = Pipeline(stack=stack, nats=nats_server, cluster="local", workdir=tmp_path)

    def env(service: str) -> dict[str, str]:
        e = {k: _local(str(v), etc) for k, v in doc["services"][service]["environment"].items()}
        e["NATS_URL"] = f"tls://127.0.0.1:{nats_server.port}"
        del e["KUBECONFIG"]  # the session's cluster instead of a mounted kubeconfig
        return e

    p.role_env = {s: env(s) for s in ("watcher", "planner", "applier")}
    try:
        p.start_all()
        user = settings_for(etc, nats_server.port)
        nc = await bus.connect(user, name="test-user")
        try:
            watch = StatusWatch()
            await watch.start(nc, "local", "compose")
            js = nc.jetstream()
            await p.publish(js, "compose", configmaps(namespace, 5), as_user=True)
            await watch.ready("r1", 120, p.logs)
        finally:
            await nc.close()
        log = nats_server.process.log_path.read_text() if nats_server.process else ""
        assert "Violation" not in log, log[-3000:]
    finally:
        p.stop_all()
        nats_server.stop()


def settings_for(etc: Path, port: int) -> bus.NatsSettings:
    """The `platform` user of compose's header, connecting from the host."""
    return bus.NatsSettings(
        nats_url=f"tls://127.0.0.1:{port}",
        nats_user="platform",
        nats_password_file=str(etc / "passwords" / "platform"),
        nats_ca=str(etc / "tls" / "ca.crt"),
        nats_cert=str(etc / "tls" / "client.crt"),
        nats_key=str(etc / "tls" / "client.key"),
    )
