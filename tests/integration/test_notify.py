"""``driftbus notify`` on the real stack (issue 34): a bundle published from Git, reconciled by
the real watcher, planner and applier against the real API server, and the notify service
telling real HTTP receivers on loopback — each checking the request as its API documents it
(the webhook's HMAC-SHA256 signature, Slack's ``text`` and ``blocks``, GitHub's and GitLab's
commit status paths, headers and fields).

Shown here: notifications reach a webhook, a Slack-compatible and two commit-status receivers
with the documented payloads, after a 503 and a 429 answered with Retry-After; a ConfigMap
changed by hand again and again (corrected every time) sends one message; a tenant's file
naming another tenant's bundles is refused, and another tenant's events never reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle
from schemas.codec import encode
from schemas.fleet import RolloutEvent, RolloutPhase
from schemas.messages import BundleCounts, BundlePhase, BundleStatus
from schemas.subjects import bundle_status_subject, rollout_event_subject
from services.access import permissions
from services.cli.main import build_parser
from services.clusters import registry
from services.common import bus
from services.kube import KubeClient
from services.notify import config as notify_config
from services.notify import service as notify_service
from services.notify import store
from tests.gitrepo import git

from ..conftest import unique_name
from .test_cli import driftbus
from .test_security import Secured, refused_publish

pytestmark = pytest.mark.integration

KEY = b"hmac-key-for-tests"
GH_TOKEN, GL_TOKEN = "ghp_test_token", "glpat-test-token"
SLACK_PATH = "/slack/T000/B000/XXXX"
TEAMS_PATH = "/teams/workflows/abc/triggers/manual/paths/invoke"


@dataclasses.dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Loopback HTTP receivers of every provider, checking each request as its API documents
    it; ``problems`` lists what was not."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.problems: list[str] = []
        self.answers: dict[str, list[tuple[int, dict[str, str]]]] = {}
        """path prefix → answers to give first (status, headers), before 200/201."""
        self.url = ""
        self._runner: web.AppRunner | None = None

    def _check(self, path: str, h: Any, body: bytes) -> None:
        def bad(what: str) -> None:
            self.problems.append(f"{path}: {what}")

        if h.get("Content-Type", "").split(";")[0] != "application/json":
            bad(f"Content-Type {h.get('Content-Type')!r}")
        doc = json.loads(body)
        if path.startswith(("/hook", "/tenant-", "/platform")):
            want = "sha256=" + hmac.new(KEY, body, hashlib.sha256).hexdigest()
            if path.startswith("/hook") and h.get("X-Driftbus-Signature") != want:
                bad("signature does not verify")
            if h.get("X-Driftbus-Event") != doc.get("kind"):
                bad("X-Driftbus-Event is not the body's kind")
        elif path.startswith("/slack/"):
            if not isinstance(doc.get("text"), str) or not doc["text"]:
                bad("no text")
            if not all(b.get("type") in ("section", "context") for b in doc.get("blocks", [])):
                bad("unknown block type")
        elif path.startswith("/teams/"):
            (card,) = doc.get("attachments", [None])
            if doc.get("type") != "message" or card.get("contentType") != (
                "application/vnd.microsoft.card.adaptive"
            ):
                bad("not a message with an Adaptive Card attachment")
            if card["content"].get("type") != "AdaptiveCard" or not card["content"].get("body"):
                bad("no Adaptive Card body")
        elif path.startswith("/repos/"):
            if h.get("Authorization") != f"Bearer {GH_TOKEN}":
                bad("Authorization is not the token as Bearer")
            if h.get("Accept") != "application/vnd.github+json":
                bad(f"Accept {h.get('Accept')!r}")
            if doc.get("state") not in ("pending", "success", "failure", "error"):
                bad(f"state {doc.get('state')!r}")
            if not isinstance(doc.get("context"), str) or len(doc.get("description", "")) > 140:
                bad("context or description")
        elif path.startswith("/api/v4/projects/"):
            if h.get("PRIVATE-TOKEN") != GL_TOKEN:
                bad("PRIVATE-TOKEN is not the token")
            if doc.get("state") not in ("pending", "running", "success", "failed", "canceled"):
                bad(f"state {doc.get('state')!r}")
            if not isinstance(doc.get("name"), str):
                bad("no name")
        else:
            bad("unknown path")

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        path = request.raw_path  # GitLab's project path stays URL-encoded
        try:
            self._check(path, request.headers, body)
        except (ValueError, AttributeError) as exc:
            self.problems.append(f"{path}: {exc}")
        status, headers = 201 if path.startswith(("/repos", "/api")) else 200, {}
        for prefix, queued in self.answers.items():
            if path.startswith(prefix) and queued:
                status, headers = queued.pop(0)
        self.seen.append(Seen(path, dict(request.headers), body, status, time.monotonic()))
        return web.json_response({}, status=status, headers=headers)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls) -> AsyncIterator[Receiver]:
        """Receivers started, stopped on leaving."""
        r = cls()
        await r.start()
        try:
            yield r
        finally:
            await r.stop()

    def delivered(self, prefix: str) -> list[Any]:
        """Bodies of the requests under ``prefix`` that were answered 2xx."""
        return [s.json() for s in self.seen if s.path.startswith(prefix) and s.status < 300]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver.running() as r:
        yield r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def notifier(
    pipeline: Pipeline | str,
    js: bus.JetStream,
    tenant_egress: tuple[str, ...] = ("127.0.0.1/32",),
    **overrides: Any,
) -> AsyncIterator[None]:
    """``driftbus notify`` in this process (of the pipeline's NATS, or that URL), once it
    follows every stream (its /readyz). The receivers are on loopback, which tenants reach only
    when the platform allows it."""
    await bus.ensure_streams(js, manage=False, within=60)  # the planner made them
    port = free_port()
    settings = notify_service.NotifySettings(
        **{
            "nats_url": pipeline if isinstance(pipeline, str) else pipeline.nats.client_url,
            "http_port": port,
            "retry_base": 0.3,
            "retry_cap": 2.0,
            "http_timeout": 5.0,
            "tenant_egress": tenant_egress,
            **overrides,
        }
    )
    task = asyncio.create_task(notify_service.run(settings))
    try:
        async with aiohttp.ClientSession() as http:
            await until(lambda: _ready(http, port), "notify ready", task=task)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _ready(http: aiohttp.ClientSession, port: int) -> bool:
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
            return resp.status == 200
    except aiohttp.ClientError:
        return False


async def until(
    pred: Callable[[], Any],
    what: str,
    *,
    within: float = 60.0,
    task: asyncio.Task[None] | None = None,
) -> None:
    deadline = time.monotonic() + within
    while True:
        got = pred()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        if task is not None and task.done():
            task.result()  # the service ended: its error
        assert time.monotonic() < deadline, f"{what} never happened"
        await asyncio.sleep(0.1)


async def notify_command(
    pipeline: Pipeline | str, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    url = pipeline if isinstance(pipeline, str) else pipeline.nats.client_url
    args = build_parser().parse_args(["notify", *argv, "--nats-url", url])
    capsys.readouterr()
    code = await asyncio.to_thread(args.func, args)
    out, err = capsys.readouterr()
    return code, out, err


def secret_files(tmp_path: Path, receiver: Receiver) -> dict[str, Path]:
    files = {
        "key": KEY.decode(),
        "slack": receiver.url + SLACK_PATH,
        "teams": receiver.url + TEAMS_PATH,
        "gh": GH_TOKEN,
        "gl": GL_TOKEN,
    }
    out = {}
    for name, value in files.items():
        out[name] = tmp_path / f"secret-{name}"
        out[name].write_text(value + "\n")
        out[name].chmod(0o600)
    return out


def config_file(tmp_path: Path, receiver: Receiver, bundle: str) -> Path:
    s = secret_files(tmp_path, receiver)
    text = f"""
providers:
- name: hook
  type: webhook
  url: {receiver.url}/hook
  secretFile: {s["key"]}
- name: chat
  type: slack
  urlFile: {s["slack"]}
- name: teams
  type: teams
  urlFile: {s["teams"]}
- name: silver
  type: webhook
  url: {receiver.url}/platform-silver
- name: github
  type: github
  apiUrl: {receiver.url}
  tokenFile: {s["gh"]}
  repository: acme/shop
  targetUrl: https://status.example/{bundle}
- name: gitlab
  type: gitlab
  apiUrl: {receiver.url}
  tokenFile: {s["gl"]}
  repository: acme/shop
alerts:
- providers: [hook, chat]
  bundles: ["{bundle}"]
  events: [Ready, Failed, Degraded, DriftCorrected]
- providers: [github, gitlab]
  bundles: ["{bundle}"]
  events: [Progressing, Ready, Failed, Degraded]
- providers: [teams]
  bundles: ["{bundle}"]
  clusterSelector: tier=gold
- providers: [silver]
  bundles: ["{bundle}"]
  clusterSelector: tier=silver
"""
    path = tmp_path / "notify.yaml"
    path.write_text(text)
    return path


def git_bundle(tmp_path: Path, namespace: str, name: str) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    (repo / "deploy").mkdir(parents=True)
    (repo / "deploy" / "cm.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        "data:\n  mode: fast\n"
    )
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    return repo, git(repo, "rev-parse", "HEAD")


async def test_notifications_reach_every_provider_and_a_flapping_object_sends_one(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bundle, name = unique_name("shop"), "settings"
    repo, sha = git_bundle(tmp_path, namespace, name)
    js = pnc.jetstream()
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    # the cluster's registry labels, for the alerts selecting clusters by label
    await bus.ensure_streams(js, manage=False, within=60)

    async def registered() -> bool:
        return pipeline.cluster in await registry.records(js)

    await until(registered, "the watcher registers its cluster")
    await registry.relabel(js, pipeline.cluster, set_={"tier": "gold"}, remove=())
    code, out, err = await notify_command(
        pipeline, capsys, "apply", str(config_file(tmp_path, receiver, bundle))
    )
    assert code == 0, err
    assert "notifications platform revision" in out
    # the first webhook request is answered 503, GitHub's first 429 with Retry-After: 1
    receiver.answers = {"/hook": [(503, {})], "/repos/": [(429, {"Retry-After": "1"})]}

    async with notifier(pipeline, js):
        code, out, err = await driftbus(
            pipeline,
            *("publish", "--git", str(repo), "--ref", "HEAD", "--path", "deploy", "--force"),
            *("--cluster", pipeline.cluster, "--bundle", bundle, "--wait", "--timeout", "90"),
        )
        assert code == 0, err + out

        def ready_everywhere() -> bool:
            return all(
                any(
                    d.get("kind") == "Ready"
                    or d.get("state") == "success"
                    or "Ready" in d.get("text", "")
                    or "Ready" in json.dumps(d.get("attachments", []))
                    for d in receiver.delivered(p)
                )
                for p in ("/hook", "/slack/", "/repos/", "/api/v4/", "/teams/")
            )

        await until(ready_everywhere, "Ready at every receiver", within=30)

        # the ConfigMap changed by hand again and again: corrected each time
        res = await kube.discovery.resource("v1", "ConfigMap")
        before_drifts = decisions.applies("ConfigMap", name).count("drift")
        for i in range(4):
            await kube.apply(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {"mode": f"slow-{i}"},
                },
                field_manager="intruder",
                force=True,
            )

            async def corrected() -> bool:
                return (await kube.get(res, name, namespace))["data"].get("mode") == "fast"

            await until(corrected, f"hand edit {i} corrected", within=30)
            await asyncio.sleep(0.3)
        await until(
            lambda: decisions.applies("ConfigMap", name).count("drift") - before_drifts >= 4,
            "four drift corrections decided",
        )
        await settle(3.0)

    assert receiver.problems == [], receiver.problems
    hook = receiver.delivered("/hook")
    drift = [d for d in hook if d["kind"] == "DriftCorrected"]
    assert len(drift) == 1, hook
    assert drift[0]["object"] == f"ConfigMap/{namespace}/{name}"
    assert drift[0]["bundle"] == bundle
    assert drift[0]["cluster"] == pipeline.cluster
    assert [d["kind"] for d in hook].count("Ready") == 1, hook
    assert hook[0]["revision"] == sha
    slack = receiver.delivered("/slack/")
    assert len([d for d in slack if "drifted, corrected" in d["text"]]) == 1, slack
    assert len([d for d in slack if d["text"].endswith(": Ready")]) == 1, slack
    # Teams: the cluster is labelled tier=gold; nothing for the tier=silver alert
    teams = receiver.delivered("/teams/")
    assert len(teams) == 2, teams  # Ready, and one drift corrected
    assert teams[0]["attachments"][0]["content"]["body"][0]["text"].endswith(": Ready")
    assert receiver.delivered("/platform-silver") == []

    # the 503 was retried with the same signed body; the 429 waited its Retry-After
    first, second, *_ = (s for s in receiver.seen if s.path == "/hook")
    assert (first.status, second.status) == (503, 200)
    assert first.body == second.body
    assert first.headers["X-Driftbus-Signature"] == second.headers["X-Driftbus-Signature"]
    gh = [s for s in receiver.seen if s.path.startswith("/repos/")]
    assert gh[0].status == 429
    assert gh[1].body == gh[0].body
    assert gh[1].at - gh[0].at >= 0.9

    # commit statuses name the commit the bundle was published from
    assert {s.path for s in gh} == {f"/repos/acme/shop/statuses/{sha}"}
    gh_states = [s.json()["state"] for s in gh if s.status < 300]
    assert gh_states[-1] == "success"
    assert set(gh_states) <= {"pending", "success"}
    assert gh[-1].json()["context"] == f"driftbus/{pipeline.cluster}/{bundle}"
    assert gh[-1].json()["target_url"] == f"https://status.example/{bundle}"
    gl = [s for s in receiver.seen if s.path.startswith("/api/v4/")]
    assert {s.path for s in gl} == {f"/api/v4/projects/acme%2Fshop/statuses/{sha}"}
    assert gl[-1].json()["state"] == "success"
    assert gl[-1].json()["name"] == f"driftbus/{pipeline.cluster}/{bundle}"

    # `notify show` names the secret files, never their content
    code, out, err = await notify_command(pipeline, capsys, "show", "-o", "json")
    assert code == 0, err
    shown = json.loads(out)["configurations"]
    assert [c["key"] for c in shown] == ["platform"]
    for secret in (KEY.decode(), GH_TOKEN, GL_TOKEN, SLACK_PATH):
        assert secret not in out
    assert str(tmp_path / "secret-slack") in out


async def test_a_tenant_is_told_only_of_its_own_bundles(
    pipeline: Pipeline,
    pnc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    js = pnc.jetstream()
    pipeline.start_all()
    a, b = unique_name("ta"), unique_name("tb")
    hook = "providers:\n- name: hook\n  type: webhook\n  url: {url}\nalerts:\n- providers: [hook]\n"

    # a file reaching another tenant's bundles is refused, and nothing is stored
    reach = tmp_path / "reach.yaml"
    reach.write_text(hook.format(url=f"{receiver.url}/tenant-a") + f'  bundles: ["{b}/*"]\n')
    code, _, err = await notify_command(pipeline, capsys, "apply", str(reach), "--tenant", a)
    assert code == 1
    assert f"bundles '{b}/*' reaches beyond tenant {a}'s own bundles" in err
    await bus.ensure_streams(js, manage=False, within=60)
    assert await store.read(js, a) is None

    # tenant a's own file: every event of its bundles (Failed included), none of b's
    own = tmp_path / "own.yaml"
    own.write_text(hook.format(url=f"{receiver.url}/tenant-a") + "  events: [Ready, Failed]\n")
    code, _, err = await notify_command(pipeline, capsys, "apply", str(own), "--tenant", a)
    assert code == 0, err
    # the platform is told of everything: proof that b's events happened and were seen
    every = tmp_path / "every.yaml"
    every.write_text(hook.format(url=f"{receiver.url}/platform") + "  events: [Ready, Failed]\n")
    code, _, err = await notify_command(pipeline, capsys, "apply", str(every))
    assert code == 0, err

    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}}
    async with notifier(pipeline, js):
        watch = StatusWatch()
        await watch.start(pnc, pipeline.cluster, f"{b}/web")
        for tenant in (b, a):
            await pipeline.publish(js, f"{tenant}/web", [cm])

        def told(prefix: str, tenant: str) -> bool:
            return any(d["tenant"] == tenant for d in receiver.delivered(prefix))

        await until(lambda: told("/platform", b), "the platform told of b's bundle", within=60)
        await until(lambda: told("/platform", a), "the platform told of a's bundle", within=60)
        await until(lambda: told("/tenant-a", a), "tenant a told of its bundle", within=60)
        await settle(2.0)

    assert receiver.problems == [], receiver.problems
    tenant_a = receiver.delivered("/tenant-a")
    assert tenant_a
    assert {d["tenant"] for d in tenant_a} == {a}, tenant_a
    assert {d["bundle"] for d in tenant_a} == {f"{a}/web"}

    code, out, err = await notify_command(pipeline, capsys, "show", "--tenant", a, "-o", "json")
    assert code == 0, err
    (entry,) = json.loads(out)["configurations"]
    assert (entry["tenant"], entry["key"]) == (a, f"tenant.{a}")


async def test_a_tenant_cannot_make_the_service_send_into_its_own_network(
    pipeline: Pipeline,
    pnc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Server-side request forgery: a tenant's webhook naming a loopback address — as an IP,
    or as a name resolving to one — is never sent (the log says which and why), while the
    platform's webhook to the same receiver is; once the platform allows the address
    (``--tenant-egress``), the tenant's next event is sent."""
    js = pnc.jetstream()
    pipeline.start_all()
    a = unique_name("te")
    port = receiver.url.rsplit(":", 1)[1]
    own = tmp_path / "own.yaml"
    own.write_text(
        f"providers:\n- name: byip\n  type: webhook\n  url: {receiver.url}/tenant-ip\n"
        f"- name: byname\n  type: webhook\n  url: http://localhost:{port}/tenant-name\n"
        # (review) an IPv6 literal with an empty zone: aiohttp connects without resolving
        f"- name: byzone\n  type: webhook\n  url: 'http://[::ffff:127.0.0.1%25]:{port}/tenant-zone'\n"
        # (review) a URL that does not parse: it once stopped the whole service
        "- name: broken\n  type: webhook\n  url: 'http://[::1'\n"
        # (issue 41) global to Python 3.11's ipaddress: 6to4 carrying 127.0.0.1, site-local
        f"- name: by6to4\n  type: webhook\n  url: 'http://[2002:7f00:1::1]:{port}/tenant-6to4'\n"
        f"- name: bysite\n  type: webhook\n  url: 'http://[fec0::1]:{port}/tenant-site'\n"
        "alerts:\n- providers: [byip, byname, byzone, broken, by6to4, bysite]\n"
        "  events: [Ready, Failed]\n"
    )
    code, _, err = await notify_command(pipeline, capsys, "apply", str(own), "--tenant", a)
    assert code == 0, err
    every = tmp_path / "every.yaml"
    every.write_text(
        f"providers:\n- name: hook\n  type: webhook\n  url: {receiver.url}/platform\n"
        f'alerts:\n- providers: [hook]\n  bundles: ["{a}/*"]\n  events: [Ready, Failed]\n'
    )
    code, _, err = await notify_command(pipeline, capsys, "apply", str(every))
    assert code == 0, err

    def cm(v: str) -> dict[str, Any]:
        meta = {"name": "c", "namespace": "default"}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": v}}

    def told(prefix: str, revision: int) -> bool:
        return sum(1 for d in receiver.delivered(prefix)) >= revision

    caplog.set_level(logging.INFO, logger="services.notify")
    async with notifier(pipeline, js, tenant_egress=()):
        await pipeline.publish(js, f"{a}/web", [cm("1")])
        await until(lambda: told("/platform", 1), "the platform told of the tenant's bundle")
        await settle(2.0)
    assert receiver.delivered("/tenant-") == [], receiver.seen
    refused = [r.getMessage() + " " + str(getattr(r, "why", "")) for r in caplog.records]
    said = "\n".join(refused)
    assert "127.0.0.1 is a loopback address" in said, said
    assert "localhost (127.0.0.1) is a loopback address" in said or (
        "localhost (::1) is a loopback address" in said
    ), said
    assert "2002:7f00:1::1 is a 6to4 address" in said, said
    assert "fec0::1 is a site-local address" in said, said

    async with notifier(pipeline, js, tenant_egress=("127.0.0.0/8", "localhost")):
        await pipeline.publish(js, f"{a}/web", [cm("2")], revision="r2")
        await until(lambda: told("/tenant-ip", 1), "the tenant told once allowed (by address)")
        await until(lambda: told("/tenant-name", 1), "the tenant told once allowed (by name)")
        await settle(1.0)
    assert receiver.problems == [], receiver.problems
    assert receiver.delivered("/tenant-zone") == []  # a zoned literal is never reached


async def test_a_restart_sends_nothing_again_and_a_rollout_step_is_sent(
    pipeline: Pipeline,
    pnc: NATS,
    tmp_path: Path,
    receiver: Receiver,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A restarted service learns each bundle's phase from the last status without sending it
    again; a rollout transition on the bus (what the rollout driver publishes) is a
    RolloutStep naming its clusters."""
    js = pnc.jetstream()
    pipeline.start_all()
    bundle = unique_name("fleet")
    f = tmp_path / "n.yaml"
    f.write_text(
        f"providers:\n- name: hook\n  type: webhook\n  url: {receiver.url}/platform\n"
        f'alerts:\n- providers: [hook]\n  bundles: ["{bundle}"]\n  clusters: ["prod-*"]\n'
        f'- providers: [hook]\n  bundles: ["{bundle}"]\n  events: [Failed]\n'
    )
    code, _, err = await notify_command(pipeline, capsys, "apply", str(f))
    assert code == 0, err
    refused = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]
    async with notifier(pipeline, js):
        # a namespaced kind naming no namespace: the revision fails
        await pipeline.publish(js, bundle, refused)
        await until(lambda: receiver.delivered("/platform"), "the Failed status sent")
        await settle(1.0)
    before = len(receiver.seen)
    async with notifier(pipeline, js):
        for event, clusters in (("started", ["prod-1"]), ("step", ["prod-2", "dev-1"])):
            r = RolloutEvent(
                bundle=bundle,
                revision="r2",
                seq=1,
                event=event,
                phase=RolloutPhase.PROGRESSING,
                step=1,
                clusters=clusters,
                message=f"rollout {event}",
            )
            await bus.publish(js, rollout_event_subject(bundle), encode(r))
        await until(lambda: len(receiver.delivered("/platform")) >= 3, "the rollout steps sent")
        await settle(2.0)
    assert receiver.problems == [], receiver.problems
    again = [s.json() for s in receiver.seen[before:]]
    assert [d["kind"] for d in again] == ["RolloutStep", "RolloutStep"], again
    assert [d["detail"] for d in again] == ["started", "step 1"]
    assert again[1]["clusters"] == ["prod-2", "dev-1"]
    assert again[1]["cluster"] == ""


async def test_the_notify_command_runs_until_a_signal(pipeline: Pipeline) -> None:
    pipeline.start("planner")
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "services.cli.main"),
        *("notify", "--http-port", str(port), "--retries", "2"),
        env={**pipeline.env(), "DRIFTBUS_NOTIFY_HTTP_TIMEOUT": "3"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                if proc.returncode is not None:  # it ended: what it said is the reason
                    assert proc.stdout is not None
                    said = (await proc.stdout.read()).decode()
                    raise AssertionError(f"notify exited {proc.returncode}: {said}")
                return await _ready(http, port)

            try:
                await until(ready, "driftbus notify ready", within=60)
            except AssertionError:
                if proc.returncode is None:
                    proc.kill()
                    said, _ = await proc.communicate()
                    raise AssertionError(f"notify never ready; it said: {said.decode()}") from None
                raise
        proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, out.decode()
    logs = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert any(rec["msg"] == "following" for rec in logs), out.decode()


async def test_notify_started_before_the_planner_made_its_bucket_waits_for_it(
    tmp_path: Path,
) -> None:
    """The planner creates the streams, then the buckets: a notify service started in between
    (streams there, its bucket not yet) waits for the bucket, as every service waits for the
    planner's streams, instead of exiting (CI saw it not become ready)."""
    from nats import connect

    from services.controlplane import servers

    nats_server = servers.NatsServer(tmp_path / "nats")
    nats_server.start()
    nc = await connect(nats_server.client_url)
    try:
        js = nc.jetstream()
        for cfg in bus.stream_configs():  # the streams only: the planner half-way
            await js.add_stream(cfg)
        port = free_port()
        settings = notify_service.NotifySettings(nats_url=nats_server.client_url, http_port=port)
        task = asyncio.create_task(notify_service.run(settings))
        try:
            async with aiohttp.ClientSession() as http:
                await asyncio.sleep(3)
                assert not task.done(), task.exception() if task.done() else ""
                assert not await _ready(http, port)
                await bus.ensure_config_buckets(js)  # the planner goes on
                await until(lambda: _ready(http, port), "notify ready", within=30, task=task)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    finally:
        await nc.close()
        nats_server.stop()


# --- the same on a locked-down bus: what each identity may do with the configurations ----------


class NotifyBus(Secured):
    """test_security's locked-down server (mutual TLS, a password per identity) serving tenants,
    a platform user, an admin and a notify service."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        users = permissions.fleet(
            ["c"],
            {"platform": ["c"]},
            tenants={"team-a": ["c"], "team-b": ["c"]},
            admins=["root"],
            notifiers=["notify"],
        )
        users = [dataclasses.replace(u, password=secrets.token_urlsafe(18)) for u in users]
        self.passwords = {u.name: u.password or "" for u in users}
        args = self.server.extra_args
        Path(args[args.index("-c") + 1]).write_text(permissions.authorization_conf(users))


@pytest.fixture
async def locked(tmp_path: Path) -> AsyncIterator[NotifyBus]:
    sec = NotifyBus(tmp_path)
    await asyncio.to_thread(sec.server.start)
    try:
        errors: list[str] = []
        planner = await sec.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
        try:
            await bus.ensure_streams(planner.jetstream(timeout=5))  # the buckets too
        finally:
            await planner.close()
        assert not errors, errors
        yield sec
    finally:
        sec.server.stop()


HOOK_ONLY = "providers:\n- name: hook\n  type: webhook\n  url: http://127.0.0.1:1/x\n"


async def test_on_a_locked_down_bus_a_tenant_writes_only_its_own_notifications(
    locked: NotifyBus,
) -> None:
    errors: list[str] = []
    cfg = notify_config.load(HOOK_ONLY, "n.yaml", "team-a")
    tenant = await locked.connect("tenant-team-a", errors)
    root = await locked.connect("root", errors)
    try:
        # what `driftbus notify apply --tenant team-a` does, as the tenant: accepted
        assert await store.put(tenant.jetstream(timeout=5), "team-a", cfg) > 0
        # the admin's, and the admin reads every configuration back
        rjs = root.jetstream(timeout=5)
        await store.put(rjs, "", notify_config.load(HOOK_ONLY, "n.yaml"))
        assert sorted(await store.read_all(rjs)) == ["", "team-a"]
        # the admin writes the sync windows; status readers read them
        await bus.kv_put(rjs, bus.WINDOWS_BUCKET, bus.WINDOWS_KEY, b"{}")
        for who in ("platform", "tenant-team-a"):
            reader = await locked.connect(who, errors)
            try:
                got = await bus.kv_get(reader.jetstream(timeout=5), bus.WINDOWS_BUCKET, "windows")
                assert got is not None, who
            finally:
                await reader.close()
        assert not errors, errors
    finally:
        await tenant.close()
        await root.close()

    kv = f"$KV.{bus.NOTIFY_BUCKET}"
    stream = f"KV_{bus.NOTIFY_BUCKET}"
    refusals = [
        await refused_publish(locked, "tenant-team-a", f"{kv}.tenant.team-b"),
        await refused_publish(locked, "tenant-team-a", f"{kv}.platform"),
        await refused_publish(locked, "tenant-team-b", f"{kv}.tenant.team-a"),
        await refused_publish(locked, "platform", f"{kv}.platform"),
        await refused_publish(locked, "notify", f"{kv}.platform"),
        # no read that would show another tenant's configuration
        await refused_publish(locked, "tenant-team-a", f"$JS.API.STREAM.MSG.GET.{stream}"),
        await refused_publish(locked, "tenant-team-a", f"$JS.API.CONSUMER.CREATE.{stream}"),
        await refused_publish(
            locked, "tenant-team-a", f"$JS.API.DIRECT.GET.{stream}.{kv}.tenant.team-b"
        ),
        # only the admin writes the sync windows
        await refused_publish(locked, "platform", f"$KV.{bus.WINDOWS_BUCKET}.windows"),
        await refused_publish(locked, "tenant-team-a", f"$KV.{bus.WINDOWS_BUCKET}.windows"),
    ]
    assert len(refusals) == 10


async def test_the_notify_identity_follows_everything_it_needs(
    locked: NotifyBus, receiver: Receiver
) -> None:
    """``driftbus notify`` as its own locked-down identity: ready (every stream followed, the
    configurations read) — a refused consumer would keep it from ever being ready — and a
    status the planner publishes is taken from its durable consumer, sent and acknowledged."""
    errors: list[str] = []
    root = await locked.connect("root", errors)
    planner = await locked.connect("planner", errors, inbox_prefix=bus.inbox_prefix("planner"))
    rjs = root.jetstream(timeout=5)
    hook = f"providers:\n- name: hook\n  type: webhook\n  url: {receiver.url}/platform\n"
    await store.put(rjs, "", notify_config.load(hook + "alerts:\n- providers: [hook]\n", "n.yaml"))
    port = free_port()
    settings = notify_service.NotifySettings(
        nats_url=locked.url,
        nats_user="notify",
        nats_password=locked.passwords["notify"],
        nats_ca=str(locked.ca.ca.cert),
        nats_cert=str(locked.client_pair.cert),
        nats_key=str(locked.client_pair.key),
        http_port=port,
    )
    task = asyncio.create_task(notify_service.run(settings))
    try:
        async with aiohttp.ClientSession() as http:
            await until(lambda: _ready(http, port), "notify ready", within=30, task=task)
        status = BundleStatus(
            cluster="c",
            bundle="web",
            revision="r1",
            phase=BundlePhase.READY,
            counts=BundleCounts(total=1, applied=1, ready=1),
        )
        await bus.publish(
            planner.jetstream(timeout=5), bundle_status_subject("c", "web"), encode(status)
        )
        await until(lambda: receiver.delivered("/platform"), "the status sent", task=task)
        name = bus.NOTIFY_CONSUMERS[bus.STATUS][0]
        notify = await locked.connect("notify", errors, inbox_prefix=bus.inbox_prefix("notify"))
        njs = notify.jetstream(timeout=5)

        async def acked() -> bool:
            info = await njs.consumer_info(bus.STATUS, name)
            return info.num_ack_pending == 0 and (info.delivered.stream_seq or 0) > 0

        await until(acked, "the status acknowledged by the notify identity", task=task)
        await notify.close()
        assert not errors, errors
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await root.close()
        await planner.close()
