"""Sync windows (issue 34) on the real stack, through the user's commands: ``driftbus windows
apply`` puts a deny window in force; a new revision and a hand-made drift are held (the bundle
OutOfSync naming the window, nothing written) until it ends, then both are applied; a revision
published with ``--override-window`` is applied at once and its decisions say so; outside an
allow window nothing is written until the window is lifted. Assertions are what a user sees:
the cluster, the bundle status, ``driftbus status``/``windows`` and the decision log."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from schemas.decision import DecisionAction
from schemas.messages import BundlePhase
from services.clusters import registry
from services.common import bus
from services.controlplane import servers
from services.kube import KubeClient

from ..conftest import unique_name
from .fleet_site import until
from .manifests import namespace_of
from .test_cli import driftbus
from .test_tenancy import started
from .test_trust import cm
from .waits import until_object

ROOT = Path(__file__).resolve().parents[2]
CONFIGMAPS = {"configmaps"}
PARSER = (
    "import argparse, sys\n"
    "from services.cli import windows\n"
    "p = argparse.ArgumentParser(prog='driftbus')\n"
    "windows.add_parser(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.func(a))\n"
)


async def windows_cli(pipeline: Pipeline, *args: str) -> tuple[int, str, str]:
    """``driftbus windows ARGS``: through ``services.cli.main`` once it registers the verb,
    else through the verb's own parser (``services/cli/windows.py``: the same function)."""
    from services.cli import main

    if hasattr(main, "windows"):
        return await driftbus(pipeline, "windows", *args)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PARSER,
        "windows",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**pipeline.env(), "NATS_URL": pipeline.nats.client_url},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def open_now(seconds: int) -> tuple[str, str]:
    """A cron schedule that fired at the start of this minute (UTC) and a duration that ends
    the window ``seconds`` from now: a deny window in force now for exactly that long."""
    now = dt.datetime.now(dt.UTC)
    return f"{now.minute} {now.hour} {now.day} {now.month} *", f"{now.second + seconds}s"


async def apply_windows(pipeline: Pipeline, tmp_path: Path, windows: list[dict[str, Any]]) -> None:
    path = tmp_path / f"windows-{unique_name('w')}.yaml"
    path.write_text(yaml.safe_dump({"windows": windows}))
    code, out, err = await windows_cli(pipeline, "apply", str(path))
    assert code == 0, err
    assert f"{len(windows)} windows" in out


def deny_now(name: str, bundles: list[str], **more: Any) -> dict[str, Any]:
    """A deny window over ``bundles`` open now and for the next hour (it opens every minute,
    for an hour)."""
    return {
        "kind": "deny",
        "name": name,
        "schedule": "* * * * *",
        "duration": "1h",
        "bundles": bundles,
        **more,
    }


async def held_by(
    pipeline: Pipeline, watch: StatusWatch, bundle: str, revision: str, freeze: str, within: float
) -> str:
    """``revision`` of ``bundle`` is held by the deny window ``freeze``: its status OutOfSync,
    naming the window, and so does ``driftbus status`` (its output)."""
    status = await watch.until(
        lambda s: s.revision == revision and s.phase is BundlePhase.OUT_OF_SYNC,
        within,
        pipeline.logs,
    )
    assert status.message.startswith(f'deny window "{freeze}" until '), status.message
    code, out, err = await driftbus(
        pipeline, "status", "--cluster", pipeline.cluster, "--bundle", bundle
    )
    assert code == 0, err
    assert f'sync window: deny window "{freeze}" until ' in out, out
    return out


def data_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("data") or {})


async def test_a_deny_window_holds_a_revision_and_a_drift_until_it_ends(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    ns, bundle, freeze = unique_name("win"), unique_name("b"), unique_name("freeze")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a"), cm(ns, "b")], force=True)
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")

    schedule, duration = open_now(25)
    await apply_windows(
        pipeline,
        tmp_path,
        [{"kind": "deny", "name": freeze, "schedule": schedule, "duration": duration,
          "bundles": [bundle], "clusters": [pipeline.cluster]}],
    )  # fmt: skip
    code, out, err = await windows_cli(pipeline, "-o", "json")
    assert code == 0, err
    rows = json.loads(out)
    jsonschema.validate(
        rows, json.loads((ROOT / "schemas/json/cli-windows.schema.json").read_text())
    )
    assert [(r["name"], r["kind"], r["active"]) for r in rows] == [(freeze, "deny", True)]
    await settle(1)  # the planners follow the bucket
    before = write_counts(pipeline.api)

    # a new revision and a hand-made drift: both held, nothing written
    await pipeline.publish(
        js, bundle, [namespace_of(ns), cm(ns, "a"), cm(ns, "b", k="new"), cm(ns, "c")],
        revision="r2", force=True,
    )  # fmt: skip
    await kube.apply(cm(ns, "a", k="intruder"), field_manager="intruder", force=True)
    out = await held_by(pipeline, watch, bundle, "r2", freeze, 20)
    assert "OutOfSync" in out
    code, out, err = await driftbus(
        pipeline, "status", "--cluster", pipeline.cluster, "--bundle", bundle, "-o", "json"
    )
    assert code == 0, err
    said = json.loads(out)["windows"]
    assert (said["held"], said["window"]) == (True, freeze), said
    assert said["message"].startswith(f'deny window "{freeze}" until '), said
    await settle(2)
    assert writes_since(pipeline.api, before, CONFIGMAPS) == 1  # the intruder's, nothing else
    assert data_of(await kube.get(res, "a", ns)) == {"k": "intruder"}
    assert data_of(await kube.get(res, "b", ns)) == {"k": "b"}
    await until_object(kube, res, "c", ns, present=False, logs=pipeline.logs)
    # (once the window ends, the revision's own stages may hold an object a moment: "wave")
    held = [r for r in decisions.records if r.action is DecisionAction.HOLD]
    by_window = [r for r in held if str(r.reason) == "window"]
    assert {r.key.name for r in by_window} >= {"a", "b", "c"}, decisions.records
    assert {r.window for r in by_window} == {freeze}

    # the window ends: both are applied, with no publish and no restart
    await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.READY, 45, pipeline.logs
    )
    assert data_of(await kube.get(res, "a", ns)) == {"k": "a"}
    assert data_of(await kube.get(res, "b", ns)) == {"k": "new"}
    assert data_of(await kube.get(res, "c", ns)) == {"k": "c"}
    assert "apply:drift" in decisions.reasons("a")
    assert "apply:new" in decisions.reasons("c")


async def test_an_override_applies_at_once_and_is_recorded(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    ns, bundle, freeze = unique_name("ovr"), unique_name("b"), unique_name("freeze")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a")], force=True)
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    await apply_windows(pipeline, tmp_path, [deny_now(freeze, ["*"])])
    await settle(1)

    src = tmp_path / "src"
    src.mkdir()
    (src / "objects.yaml").write_text(
        yaml.safe_dump_all([namespace_of(ns), cm(ns, "a", k="hotfix"), cm(ns, "d")])
    )
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", pipeline.cluster, "--bundle", bundle,
        "--revision", "hotfix", "--override-window", "--force", "--wait", "--timeout", "45",
    )  # fmt: skip
    assert code == 0, err + out + pipeline.logs()
    assert data_of(await kube.get(res, "a", ns)) == {"k": "hotfix"}
    assert data_of(await kube.get(res, "d", ns)) == {"k": "d"}
    writes = [
        r for r in decisions.records if r.action is DecisionAction.APPLY and r.revision == "hotfix"
    ]
    assert {r.key.name for r in writes} == {"a", "d"}, decisions.records
    assert {r.window for r in writes} == {f"override: {freeze}"}
    code, out, err = await driftbus(
        pipeline, "why", f"ConfigMap/{ns}/a", "--cluster", pipeline.cluster
    )
    assert code == 0, err
    assert f"manifest (override: {freeze})" in out, out

    # drift of the overriding revision is corrected at once too, and recorded the same way
    await kube.apply(cm(ns, "d", k="intruder"), field_manager="intruder", force=True)
    deadline = time.monotonic() + 30
    while "apply:drift" not in decisions.reasons("d"):
        assert time.monotonic() < deadline, f"{decisions.records}\n{pipeline.logs()}"
        await asyncio.sleep(0.2)
    await settle(1)
    assert data_of(await kube.get(res, "d", ns)) == {"k": "d"}
    [drift] = [r for r in decisions.records if r.key.name == "d" and str(r.reason) == "drift"]
    assert drift.window == f"override: {freeze}"


async def test_a_held_bundle_names_the_window_in_force_when_another_takes_over(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path
) -> None:
    """(review) one deny window replaced by another, the bundle OutOfSync throughout with the
    same counts: its status names the new window (what a fleet rollout's step clock reads),
    not the one that ended."""
    ns, bundle = unique_name("swap"), unique_name("b")
    first, second = unique_name("wa"), unique_name("wb")
    watch, _ = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a")], force=True)
    await watch.ready("r1", 60, pipeline.logs)

    def deny(name: str) -> dict[str, Any]:
        return {"kind": "deny", "name": name, "schedule": "* * * * *", "duration": "1h",
                "bundles": [bundle]}  # fmt: skip

    try:
        await apply_windows(pipeline, tmp_path, [deny(first)])
        await settle(1)
        await pipeline.publish(
            js, bundle, [namespace_of(ns), cm(ns, "a", k="new")], revision="r2", force=True
        )
        await watch.until(
            lambda s: (
                s.revision == "r2" and s.phase is BundlePhase.OUT_OF_SYNC and s.window == first
            ),
            30,
            pipeline.logs,
        )
        await apply_windows(pipeline, tmp_path, [deny(second)])
        status = await watch.until(lambda s: s.window == second, 30, pipeline.logs)
        assert status.phase is BundlePhase.OUT_OF_SYNC
        assert status.message.startswith(f'deny window "{second}" until '), status.message
    finally:
        await apply_windows(pipeline, tmp_path, [])


async def test_a_deny_window_by_cluster_label_holds_only_where_the_labels_say(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    """Issue 41: a window's ``clusterSelector`` (besides its name globs). A deny window of
    ``env=prod`` lets a revision through while the cluster is labelled env=dev, holds the next
    one once it is relabelled env=prod (status and ``driftbus status`` name the window), and
    releases it when it is relabelled back, with no publish."""
    ns, bundle, freeze = unique_name("sel"), unique_name("b"), unique_name("prod-freeze")
    watch, _ = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a")], force=True)
    await watch.ready("r1", 60, pipeline.logs)

    async def registered() -> bool:
        return pipeline.cluster in await registry.records(js)

    await until("the cluster registered", registered, 60, pipeline.logs)
    await registry.relabel(js, pipeline.cluster, set_={"env": "dev"}, remove=[])
    try:
        await apply_windows(
            pipeline, tmp_path, [deny_now(freeze, [bundle], clusterSelector="env=prod")]
        )
        await settle(1)  # the planners follow the bucket
        # a dev cluster: not named, the revision goes through
        await pipeline.publish(
            js, bundle, [namespace_of(ns), cm(ns, "a", k="dev")], revision="r2", force=True
        )
        await watch.ready("r2", 60, pipeline.logs)
        assert data_of(await kube.get(res, "a", ns)) == {"k": "dev"}
        # relabelled prod: the next revision is held, named
        await registry.relabel(js, pipeline.cluster, set_={"env": "prod"}, remove=[])
        await settle(2)  # the planner follows its registry entry
        await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a", k="prod")], revision="r3")
        await held_by(pipeline, watch, bundle, "r3", freeze, 30)
        await settle(2)
        assert data_of(await kube.get(res, "a", ns)) == {"k": "dev"}
        # relabelled dev again: released at once, nothing republished
        await registry.relabel(js, pipeline.cluster, set_={"env": "dev"}, remove=[])
        await watch.ready("r3", 45, pipeline.logs)
        assert data_of(await kube.get(res, "a", ns)) == {"k": "prod"}
    finally:
        await apply_windows(pipeline, tmp_path, [])
        await registry.relabel(js, pipeline.cluster, set_={}, remove=["env"])


async def test_outside_an_allow_window_nothing_is_written_until_it_is_lifted(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    ns, bundle, office = unique_name("alw"), unique_name("b"), unique_name("office")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a")], force=True)
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    # open only at midnight on New Year's Day: not in force now (unless the test runs then)
    now = dt.datetime.now(dt.UTC)
    schedule = "0 0 1 1 *" if (now.month, now.day) != (1, 1) else "0 0 1 7 *"
    await apply_windows(
        pipeline,
        tmp_path,
        [{"kind": "allow", "name": office, "schedule": schedule, "duration": "1h",
          "bundles": [bundle], "timeZone": "Europe/Berlin"}],
    )  # fmt: skip
    await settle(1)
    await pipeline.publish(
        js, bundle, [namespace_of(ns), cm(ns, "a", k="new")], revision="r2", force=True
    )
    status = await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.OUT_OF_SYNC, 20, pipeline.logs
    )
    assert status.message.startswith(f'outside allow window "{office}" until '), status.message
    assert "+01:00" in status.message or "+02:00" in status.message  # shown in Berlin time
    await settle(2)
    assert data_of(await kube.get(res, "a", ns)) == {"k": "a"}
    code, out, err = await driftbus(pipeline, "status", "--cluster", pipeline.cluster)
    assert code == 0, err
    assert f'sync window allow "{office}" (bundles {bundle}): closed, opens ' in out, out

    # an unusable version on the bus (written around the CLI, which refuses it) is no reason
    # to drop a window: the last good ones stay in force, and the CLI says so
    await bus.kv_put(js, bus.WINDOWS_BUCKET, bus.WINDOWS_KEY, b'{"windows": [{"kind": "deny"}]}')
    await settle(2)
    assert data_of(await kube.get(res, "a", ns)) == {"k": "a"}
    code, out, err = await windows_cli(pipeline)
    assert code == 0, err
    assert "the latest windows on the bus are unusable" in err, err
    assert office in out
    assert "outside allow window" in (await watch.until(lambda s: True, 5)).message
    assert "stored windows: " in pipeline.all_logs_text()  # the planner logged why

    # lifting the windows (an empty file) releases what they held, at once
    await apply_windows(pipeline, tmp_path, [])
    await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.READY, 30, pipeline.logs
    )
    assert data_of(await kube.get(res, "a", ns)) == {"k": "new"}
    assert "hold:window" in decisions.reasons("a")


@pytest.mark.ui
async def test_the_page_shows_the_windows_and_no_hit_ratio_before_anything_could_hit(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    from .browser import Browser
    from .test_ui import opened, page_token

    ns, bundle, freeze = unique_name("page"), unique_name("b"), unique_name("freeze")
    port = servers.free_port()
    token, _ = page_token(pipeline)
    watch, _ = await started(pipeline, pnc, bundle)
    pipeline.start("ui", None, "--port", str(port))
    browser = Browser(tmp_path / "chromium")
    await browser.start()
    try:
        await opened(browser, f"http://127.0.0.1:{port}/?token={token}")
        await browser.until("document.querySelector('#live').textContent === 'live'", 30, "live")
        js = pnc.jetstream()
        # a fresh stack: only new objects' first applies, none of which could have been a hit
        await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a")], force=True)
        await watch.ready("r1", 60, pipeline.logs)
        ratio = "document.querySelector('#hit-ratio').textContent"
        await browser.until(f"{ratio} === 'no decisions that could hit yet'", 20, "no ratio")
        assert await browser.evaluate("!!document.querySelector('#windows-section').hidden")

        await apply_windows(pipeline, tmp_path, [deny_now(freeze, [bundle])])
        row = f"document.querySelector('#windows tr[data-window=\"{freeze}\"]')"
        await browser.until(f"{row} && {row}.dataset.active === 'true'", 20, "the window open")
        assert not await browser.evaluate("document.querySelector('#windows-section').hidden")
        notes = f"document.querySelector('tr[data-bundle$=\"/{bundle}\"] td:nth-child(8)')"
        await browser.until(
            f"{notes} && {notes}.textContent.startsWith('deny window \"{freeze}\" until')",
            20,
            "the bundle's row naming the window",
        )
        # held: the revision reported OutOfSync with the window named, on the page too
        await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a", k="2")], revision="r2")
        bundle_row = f"document.querySelector('tr[data-bundle$=\"/{bundle}\"]')"
        await browser.until(
            f"{bundle_row}.dataset.phase === 'OutOfSync' && "
            f"{bundle_row}.textContent.includes('deny window \"{freeze}\" until')",
            20,
            "the bundle OutOfSync naming the window",
        )
        # a changed manifest (written through the window by an override) could have been a hit
        # (the cache was asked about an object applied before): a ratio now
        await pipeline.publish(
            js, bundle, [namespace_of(ns), cm(ns, "a", k="2")], revision="r3",
            override_window=True, force=True,
        )  # fmt: skip
        await watch.ready("r3", 30, pipeline.logs)
        await browser.until(f"{ratio}.endsWith(' %')", 20, "a hit ratio")
        await browser.screenshot(ROOT / "test-artifacts" / "ui" / "sync-windows.png")
    finally:
        await browser.close()
