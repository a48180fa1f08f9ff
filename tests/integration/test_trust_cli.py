"""The CLI a user can trust (issue 13): it publishes what the path holds from wherever it is run,
never an empty revision by accident, says when nobody serves the cluster, tells by its exit code
how a ``--wait`` ended, and ``status -f`` shows every change exactly once.

Everything runs the real ``driftbus`` command against a real nats-server. Where the outcome
must not depend on the services (being exercised elsewhere), the test plays their part on the
bus: it answers a bundle with the statuses a planner would publish, or publishes the members'
heartbeats itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline
from schemas.codec import decode, encode
from schemas.messages import (
    Bundle,
    BundleCounts,
    BundlePhase,
    BundleStatus,
    MemberHeartbeat,
)
from schemas.subjects import bundle_status_subject, bundle_subject, member_subject
from services.access import permissions
from services.common import bus
from services.controlplane import servers

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n"


async def driftbus(
    nats_url: str, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """Run the real command (this checkout's, wherever ``cwd`` is) to completion."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": nats_url, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def bundles_on_stream(nc: NATS, cluster: str, bundle: str) -> list[Bundle]:
    """Every message the BUNDLES stream holds for the bundle, oldest first."""
    js = nc.jetstream()
    out = []
    async for m in bus.Follower(
        js, bus.BUNDLES, bundle_subject(cluster, bundle), history=True
    ).snapshot():
        out.append(decode(m.data, Bundle))
    return out


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
async def streams(pnc: NATS) -> NATS:
    """The pipeline's nats-server with the streams a planner creates (no service runs)."""
    await bus.ensure_streams(pnc.jetstream())
    return pnc


# --- paths ------------------------------------------------------------------------------------


async def test_a_parent_relative_path_below_a_hidden_directory_publishes_its_objects(
    pipeline: Pipeline, streams: NATS, tmp_path: Path
) -> None:
    work = tmp_path / ".work"  # hidden, but above the given directory: it does not count
    for i in range(3):
        write(work, f"mydir/sub{i}/cm.yaml", CM.format(name=f"up-{i}", ns="default"))
    write(work, "mydir/.hidden/skip.yaml", CM.format(name="hidden", ns="default"))
    (work / "elsewhere").mkdir()
    c = pipeline.cluster
    code, out, err = await driftbus(
        pipeline.nats.client_url,
        *("publish", "../mydir", "--cluster", c, "--bundle", "rel"),
        cwd=work / "elsewhere",
    )
    assert code == 0, err + out
    assert "3 objects" in err
    (msg,) = await bundles_on_stream(streams, c, "rel")
    assert sorted(m["metadata"]["name"] for m in msg.manifests) == ["up-0", "up-1", "up-2"]

    code, out, err = await driftbus(
        pipeline.nats.client_url,
        *("publish", str((work / "mydir").resolve()), "--cluster", c, "--bundle", "abs"),
        cwd=tmp_path,
    )
    assert code == 0, err + out
    (msg,) = await bundles_on_stream(streams, c, "abs")
    assert len(msg.manifests) == 3


# --- empty revisions ------------------------------------------------------------------------


async def test_an_empty_directory_is_refused_and_nothing_lands_on_the_bundle_subject(
    pipeline: Pipeline, streams: NATS, tmp_path: Path
) -> None:
    c = pipeline.cluster
    (tmp_path / "empty").mkdir()
    write(tmp_path, "typo/README.md", "manifests live elsewhere")
    landed: list[Any] = []

    async def on_msg(msg: Any) -> None:
        landed.append(msg)

    sub = await streams.subscribe(bundle_subject(c, "nothing"), cb=on_msg)
    for path in ("empty", "typo"):
        code, out, err = await driftbus(
            pipeline.nats.client_url,
            *("publish", path, "--cluster", c, "--bundle", "nothing"),
            cwd=tmp_path,
        )
        assert code != 0, err + out
        assert err.count("\n") == 1, err  # one clear line, no traceback
        assert f"{path}:" in err
        assert "would prune every object of bundle nothing" in err
        assert "--allow-empty" in err
    await streams.flush()
    await asyncio.sleep(0.5)
    await sub.unsubscribe()
    assert landed == []
    info = await streams.jetstream().stream_info(
        bus.BUNDLES, subjects_filter=bundle_subject(c, "nothing")
    )
    assert info.state.messages == 0


async def test_allow_empty_publishes_an_empty_revision_with_the_options_given(
    pipeline: Pipeline, streams: NATS, tmp_path: Path
) -> None:
    c = pipeline.cluster
    (tmp_path / "empty").mkdir()
    code, out, err = await driftbus(
        pipeline.nats.client_url,
        *("publish", str(tmp_path / "empty"), "--cluster", c, "--bundle", "gone"),
        *("--allow-empty", "--take-over", "--prune-propagation", "Foreground"),
    )
    assert code == 0, err + out
    assert "0 objects" in err
    (msg,) = await bundles_on_stream(streams, c, "gone")
    assert msg.manifests == []
    assert msg.manifests_ref is None
    assert msg.options.allow_empty is True
    assert msg.options.take_over is True
    assert msg.options.propagation == "Foreground"
    assert msg.options.prune is True


# --- is anybody serving the cluster? -----------------------------------------------------------


async def beat(nc: NATS, cluster: str, role: str, age: float = 0.0) -> None:
    hb = MemberHeartbeat(
        cluster=cluster,
        role=role,  # type: ignore[arg-type]
        id=f"{role}-test",
        at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age),
    )
    await nc.jetstream().publish(member_subject(cluster, role), encode(hb))


async def test_publishing_to_a_cluster_nobody_serves_warns_and_still_publishes(
    pipeline: Pipeline, streams: NATS, tmp_path: Path
) -> None:
    c = pipeline.cluster
    write(tmp_path, "src/cm.yaml", CM.format(name="a", ns="default"))
    argv = ("publish", str(tmp_path / "src"), "--cluster", c, "--bundle", "lonely")

    code, out, err = await driftbus(pipeline.nats.client_url, *argv)
    assert code == 0, err + out
    assert f"warning: no watcher for cluster {c} has ever announced itself" in err
    assert f"warning: no applier for cluster {c} has ever announced itself" in err
    assert len(await bundles_on_stream(streams, c, "lonely")) == 1

    await beat(streams, c, "watcher")
    await beat(streams, c, "applier", age=300)  # an applier that went away
    code, out, err = await driftbus(pipeline.nats.client_url, *argv)
    assert code == 0, err + out
    assert "no watcher" not in err
    assert re.search(rf"warning: no applier for cluster {c} \(last seen \d+s ago\)", err), err
    assert len(await bundles_on_stream(streams, c, "lonely")) == 2

    await beat(streams, c, "applier")
    code, out, err = await driftbus(pipeline.nats.client_url, *argv)
    assert code == 0, err + out
    assert "warning" not in err
    assert len(await bundles_on_stream(streams, c, "lonely")) == 3


async def test_a_user_who_may_not_read_the_members_gets_no_warning_and_no_delay(
    tmp_path: Path,
) -> None:
    """A locked-down bus whose user permissions predate the MEMBERS stream: the direct get is
    refused (and would time out); publish stays quiet about it and is not held up."""
    cluster = "locked"
    passwords = {"planner": secrets.token_urlsafe(12), "carol": secrets.token_urlsafe(12)}
    allowed = permissions.user([cluster])
    older = permissions.Permissions(
        publish=tuple(p for p in allowed.publish if f"DIRECT.GET.{bus.MEMBERS}" not in p),
        subscribe=allowed.subscribe,
    )
    users = [
        permissions.NatsUser("planner", permissions.planner(), passwords["planner"]),
        permissions.NatsUser("carol", older, passwords["carol"]),
    ]
    conf = tmp_path / "nats.conf"
    conf.write_text(permissions.authorization_conf(users))
    server = servers.NatsServer(tmp_path / "nats", extra_args=["-c", str(conf)])
    server.start()
    try:
        planner = await nats.connect(
            server.client_url,
            user="planner",
            password=passwords["planner"],
            inbox_prefix=bus.inbox_prefix("planner"),
        )
        try:
            await bus.ensure_streams(planner.jetstream())
        finally:
            await planner.drain()
        write(tmp_path, "src/cm.yaml", CM.format(name="a", ns="default"))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "services.cli.main", "publish", str(tmp_path / "src")),
            *("--cluster", cluster, "--bundle", "b"),
            stderr=asyncio.subprocess.PIPE,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "NATS_URL": server.client_url,
                "DRIFTBUS_NATS_USER": "carol",
                "DRIFTBUS_NATS_PASSWORD": passwords["carol"],
            },
        )
        assert proc.stderr is not None
        first = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
        published = time.monotonic()
        rest = await asyncio.wait_for(proc.stderr.read(), timeout=60)
        code = await proc.wait()
        after = time.monotonic() - published  # the refused request held nothing up
        err = (first + rest).decode()
        assert code == 0, err
        assert "published b@" in err
        assert "warning" not in err, err
        assert "error" not in err.lower(), err
        assert err.count("\n") == 1, err
        assert after < 2.0, f"publish ended {after:.1f}s after it had published"
    finally:
        server.stop()


# --- publish --wait ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def fake_planner(
    nc: NATS, cluster: str, bundle: str, phases: Sequence[BundlePhase]
) -> AsyncIterator[None]:
    """Answer each publish of the bundle with these bundle statuses, as a planner would."""

    async def on_bundle(msg: Any) -> None:
        b = decode(msg.data, Bundle)
        for i, phase in enumerate(phases):
            st = BundleStatus(
                cluster=cluster,
                bundle=bundle,
                revision=b.revision,
                phase=phase,
                counts=BundleCounts(total=2, applied=i, failed=1 if i else 0),
                message=f"step {i}: {phase}",
                failed_objects=[] if phase is BundlePhase.READY else ["ConfigMap/ns/b: why not"],
                at=dt.datetime.now(dt.UTC),
            )
            await nc.publish(bundle_status_subject(cluster, bundle), encode(st))
            await asyncio.sleep(0.2)

    sub = await nc.subscribe(bundle_subject(cluster, bundle), cb=on_bundle)
    try:
        yield
    finally:
        await sub.unsubscribe()


R, F, D, C, OOS = (
    BundlePhase.RECONCILING,
    BundlePhase.FAILED,
    BundlePhase.DEGRADED,
    BundlePhase.CONFLICT,
    BundlePhase.OUT_OF_SYNC,
)


@pytest.mark.parametrize(
    ("phases", "code", "ends"),
    [
        ([R, R, BundlePhase.READY], 0, "Ready"),
        ([R, F], 1, "Failed"),
        ([R, D], 1, "Degraded"),
        ([R, C], 1, "Conflict"),
        ([R, OOS], 2, "OutOfSync"),  # drift being corrected: waited through, then time ran out
        ([R], 2, "Reconciling"),
        ([], 2, None),
    ],
    ids=["ready", "failed", "degraded", "conflict", "out-of-sync", "reconciling", "silence"],
)
async def test_publish_wait_exits_non_zero_unless_ready(
    pipeline: Pipeline,
    streams: NATS,
    tmp_path: Path,
    phases: list[BundlePhase],
    code: int,
    ends: str | None,
) -> None:
    c = pipeline.cluster
    write(tmp_path, "src/cm.yaml", CM.format(name="a", ns="default"))
    timeout = 6 if code == 2 else 60
    started = time.monotonic()
    async with fake_planner(streams, c, "w", phases):
        got, out, err = await driftbus(
            pipeline.nats.client_url,
            *("publish", str(tmp_path / "src"), "--cluster", c, "--bundle", "w"),
            *("--wait", "--timeout", str(timeout)),
        )
    took = time.monotonic() - started
    assert got == code, err + out
    if code == 1:
        assert took < 30, f"a {ends} bundle ends the wait at once, not at the timeout"
    if ends is None:
        assert "no status" in err
        return
    assert f"{ends}: step {len(phases) - 1}" in out
    if code != 0:
        assert "ConfigMap/ns/b: why not" in out  # the objects that keep it from Ready
    if code == 2:
        assert f"not Ready within {timeout}s (last status: {ends})" in err


# --- status -f --------------------------------------------------------------------------------


async def publish_status(
    nc: NATS, cluster: str, bundle: str, phase: BundlePhase, message: str
) -> None:
    st = BundleStatus(
        cluster=cluster,
        bundle=bundle,
        revision="r1",
        phase=phase,
        counts=BundleCounts(total=1),
        message=message,
        at=dt.datetime.now(dt.UTC),
    )
    await nc.jetstream().publish(bundle_status_subject(cluster, bundle), encode(st))


class Follow:
    """``driftbus status ... -f`` running, its output lines collected."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    @classmethod
    async def start(cls, nats_url: str, *args: str) -> Follow:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "services.cli.main",
            "status",
            *args,
            "-f",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": nats_url},
        )
        return cls(proc)

    async def until(self, pred: Any, within: float = 30) -> None:
        assert self.proc.stdout is not None

        async def read() -> None:
            while not pred(self.lines):
                line = await self.proc.stdout.readline()  # type: ignore[union-attr]
                assert line, f"status -f ended early; output: {self.lines}"
                self.lines.append(line.decode())

        await asyncio.wait_for(read(), timeout=within)

    async def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(self.proc.wait(), timeout=10) == 0
        assert self.proc.stdout is not None
        self.lines += (await self.proc.stdout.read()).decode().splitlines(keepends=True)


async def test_status_follow_shows_every_bundle_phase_change_once(
    pipeline: Pipeline, streams: NATS
) -> None:
    c = pipeline.cluster
    await publish_status(streams, c, "one", BundlePhase.READY, "start")
    f = await Follow.start(pipeline.nats.client_url, "--cluster", c)
    await f.until(lambda lines: any("start" in x for x in lines))  # the table first
    changes = [
        ("one", BundlePhase.RECONCILING, "change-1"),
        ("two", BundlePhase.RECONCILING, "change-2"),
        ("one", BundlePhase.CONFLICT, "change-3"),
        ("two", BundlePhase.OUT_OF_SYNC, "change-4"),
        ("one", BundlePhase.READY, "change-5"),
    ]
    for bundle, phase, message in changes:
        await publish_status(streams, c, bundle, phase, message)
    await f.until(lambda lines: any("change-5" in x for x in lines))
    await asyncio.sleep(1)  # a duplicate would arrive about now
    await f.stop()
    shown = [x for x in f.lines if "change-" in x]
    assert len(shown) == len(changes), shown
    for line, (bundle, phase, message) in zip(shown, changes, strict=True):
        assert f"{bundle}@r1: {phase} {message}" in line


async def test_status_follow_with_a_bundle_in_json_keeps_following(
    pipeline: Pipeline, streams: NATS
) -> None:
    c = pipeline.cluster
    await publish_status(streams, c, "j", BundlePhase.RECONCILING, "start")
    f = await Follow.start(pipeline.nats.client_url, "--cluster", c, "--bundle", "j", "-o", "json")
    await f.until(lambda lines: any("start" in x for x in lines))
    await publish_status(streams, c, "j", BundlePhase.READY, "done")
    await f.until(lambda lines: any('"done"' in x for x in lines))
    await f.stop()
    (line,) = [x for x in f.lines if '"done"' in x]
    assert json.loads(line)["phase"] == "Ready"


async def test_status_follow_misses_no_change_made_while_it_starts(
    pipeline: Pipeline, streams: NATS
) -> None:
    """Statuses keep coming while ``status -f`` reads the current state and subscribes: after
    the state it shows, every later step appears, in order, once."""
    c = pipeline.cluster
    await publish_status(streams, c, "busy", BundlePhase.RECONCILING, "step 0")
    stop = asyncio.Event()

    async def planner() -> None:
        i = 1
        while not stop.is_set():
            await publish_status(streams, c, "busy", BundlePhase.RECONCILING, f"step {i}")
            i += 1
            await asyncio.sleep(0.002)

    task = asyncio.create_task(planner())
    try:
        f = await Follow.start(pipeline.nats.client_url, "--cluster", c, "--bundle", "busy")
        await f.until(lambda lines: sum("step" in x for x in lines) > 100)
    finally:
        stop.set()
        await task
    await f.stop()
    steps = [int(m.group(1)) for x in f.lines if (m := re.search(r"step (\d+)", x))]
    first = steps[0]  # the current state
    assert steps == list(range(first, first + len(steps))), steps
