"""``driftbus replay`` on recorded history (issue 45): the real pipeline decides (a publish, a
republish with a change, drift and an out-of-band delete corrected, a prune), then replay re-runs
every recorded decision through this build's rule — no difference, exit 0 — and through a build
whose rule no longer corrects drift — the drift decisions differ, exit 2, the objects named.

One pipeline for the module: the history is made once (a planner restart included), both
replays read it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import nats
import pytest

from harness.pipeline import FAST_HEARTBEATS, DecisionLog, Pipeline, StatusWatch
from schemas.decision import DecisionAction
from schemas.subjects import ObjectKey
from services.controlplane import servers
from services.kube import KubeClient
from services.stored import facts as stored_facts

from ..conftest import empty_namespace, kube_client, unique_name
from .waits import until_object

BUNDLE = unique_name("replayed")
SCHEMA = json.loads(
    (Path(__file__).parents[2] / "schemas" / "json" / "cli-replay.schema.json").read_text()
)

# a test build of the rule: drift is never corrected (a hit instead of the apply)
CHANGED_RULE = textwrap.dedent(
    """
    import sys
    from schemas.decision import DecisionReason
    from services.planner.rule import decide

    original = decide.evaluate

    def evaluate(e, *, republished=False):
        d = original(e, republished=republished)
        if d is not None and d.reason in (DecisionReason.DRIFT, DecisionReason.DELETED):
            return decide.HIT
        return d

    decide.evaluate = evaluate
    from services.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


def cm(ns: str, name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data or {"k": name},
    }


async def replay(p: Pipeline, *args: str, rule: str | None = None) -> tuple[int, str, str]:
    """``driftbus replay ARGS`` of this build, or (``rule``) of a build with that rule."""
    head = ["-c", rule] if rule else ["-m", "services.cli.main"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *head,
        "replay",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=p.env(),
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
async def history(
    stack: servers.Stack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Pipeline]:
    """A pipeline with recorded history of every kind of decision a user's day brings."""
    tmp = tmp_path_factory.mktemp("replay")
    nats_server = servers.NatsServer(tmp / "nats")
    nats_server.start()
    p = Pipeline(stack=stack, nats=nats_server, cluster=unique_name("c"), workdir=tmp)
    p.planner_env = dict(FAST_HEARTBEATS)
    ns = unique_name("replay")
    async with kube_client(stack) as kube:
        try:
            await kube.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                field_manager="test",
            )
            await _record_history(p, kube, ns)
            yield p
        finally:
            p.stop_all()
            nats_server.stop()
            await empty_namespace(kube, ns)


async def _record_history(p: Pipeline, kube: KubeClient, ns: str) -> None:
    nc = await nats.connect(p.nats.client_url)
    try:
        js = nc.jetstream()
        watch, decisions = StatusWatch(), DecisionLog()
        await watch.start(nc, p.cluster, BUNDLE)
        await decisions.start(nc, p.cluster)
        p.start_all()
        objects = [cm(ns, f"obj-{i}") for i in range(4)]
        await p.publish(js, BUNDLE, objects, force=True)  # new
        await watch.ready("r1", 60, p.logs)
        await p.publish(js, BUNDLE, objects, revision="r1", force=True)  # hits
        await watch.ready("r1", 60, p.logs)
        changed = [*objects[:3], cm(ns, "obj-3", k="changed")]
        await p.publish(js, BUNDLE, changed, revision="r2", force=True)  # manifest
        await watch.ready("r2", 60, p.logs)
        res = await kube.discovery.resource("v1", "ConfigMap")
        # drift: someone else changes obj-1; driftbus puts it back
        await kube.apply(cm(ns, "obj-1", k="intruder"), field_manager="intruder", force=True)
        await _until(
            lambda: "apply:drift" in decisions.reasons("obj-1"), "drift of obj-1 decided", p
        )
        # deleted out of band: driftbus re-creates it
        await kube.delete(res, "obj-2", ns)
        await _until(
            lambda: "apply:deleted" in decisions.reasons("obj-2"), "re-creation of obj-2", p
        )
        await until_object(kube, res, "obj-2", ns, logs=p.logs)
        # prune: obj-0 leaves the bundle
        await p.publish(js, BUNDLE, changed[1:], revision="r3", force=True)
        await until_object(kube, res, "obj-0", ns, present=False, logs=p.logs)
        await watch.ready("r3", 60, p.logs)
        await p.publish(js, BUNDLE, changed[1:], revision="r3", force=True)  # hits again
        await _until(lambda: len(decisions.reasons("obj-3")) >= 5, "the last hits", p)
        assert "delete:prune" in decisions.reasons("obj-0")
        # a planner restart: what changed while it was away is decided once the rebuild
        # completes (no fact: ``reevaluate``); the unchanged objects' hits are not recorded again
        before = len(decisions.records)
        p.procs["planner"].terminate()
        p.procs["planner"].stop(timeout=10)
        away = await kube.apply(
            cm(ns, "obj-3", k="while-away"), field_manager="intruder", force=True
        )
        await _until_server_fact(js, p, "obj-3", ns, int(away["metadata"]["resourceVersion"]))
        p.start("planner")
        await _until(
            lambda: _rebuilt(decisions, before) == ["obj-3"], "the decision after the rebuild", p
        )
        assert all(r.action is not DecisionAction.HIT for r in decisions.records[before:]), [
            (r.key.name, r.action, r.reason) for r in decisions.records[before:]
        ]
    finally:
        await nc.drain()


async def _until_server_fact(js: Any, p: Pipeline, name: str, ns: str, rv: int) -> None:
    """Until SERVER holds the watcher's fact of ``name`` at resourceVersion ``rv`` or later."""
    key = ObjectKey("", "ConfigMap", ns, name)

    async def landed() -> bool:
        last = (await stored_facts.live(js, [p.cluster]))[p.cluster].get(key)
        return last is not None and int(last.resource_version) >= rv

    for _ in range(600):
        if await landed():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the watcher's fact of {name} at {rv}: never landed\n{p.logs()}")


def _rebuilt(decisions: DecisionLog, since: int) -> list[str]:
    """The objects decided on after a planner's rebuild (no fact: ``reevaluate``), from record
    ``since`` on."""
    return [
        r.key.name
        for r in decisions.records[since:]
        if r.inputs is not None and r.inputs.event is None
    ]


async def _until(pred: Any, what: str, p: Pipeline, within: float = 60) -> None:
    for _ in range(int(within / 0.1)):
        if pred():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what}: never happened\n{p.logs()}")


async def test_replay_of_recorded_history_finds_no_difference(history: Pipeline) -> None:
    code, out, err = await replay(history, "--since", "1h", "--cluster", history.cluster)
    assert code == 0, out + err
    assert "0 differ" in out, out
    code, out, err = await replay(history, "--since", "1h", "-o", "json")
    assert code == 0, out + err
    doc = json.loads(out)
    print(out)  # the document, for docs/replay.md
    jsonschema.validate(doc, SCHEMA)
    assert doc["differences"] == []
    assert doc["not_replayed"] == []
    assert doc["replayed"] == doc["records"] > 0
    # every kind of decision of the history was made again alike
    for decision in ("apply:new", "apply:manifest", "apply:drift", "apply:deleted", "hit:hit"):
        assert doc["agreed"].get(decision, 0) >= 1, (decision, doc["agreed"])
    assert doc["agreed"]["delete:prune"] == 1, doc["agreed"]
    # r1: 4 new, 4 hits; r2: 1 manifest, 3 hits; drift; deleted; r3: 1 prune, 3 hits, 3 hits;
    # the restart: 1 drift (its hits are not recorded)
    assert doc["records"] == 22, doc


async def test_replay_with_a_changed_rule_names_each_difference(history: Pipeline) -> None:
    code, out, err = await replay(
        history, "--since", "1h", "--cluster", history.cluster, rule=CHANGED_RULE
    )
    print(out)  # the table, for the report
    assert code == 2, out + err
    assert "3 differ" in out, out
    rows = [line for line in out.splitlines() if BUNDLE in line]
    assert any("ConfigMap/" in r and "obj-1" in r and "apply (drift)" in r for r in rows), out
    assert any("obj-2" in r and "apply (deleted)" in r and "nothing" in r for r in rows), out
    code, out, err = await replay(history, "--since", "1h", "-o", "json", rule=CHANGED_RULE)
    assert code == 2, out + err
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    differences = doc["differences"]
    assert {(d["name"], d["then_reason"], d["now_action"], d["fact"]) for d in differences} == {
        ("obj-1", "drift", None, "observed"),
        ("obj-2", "deleted", None, "observed"),
        ("obj-3", "drift", "hit", "rebuilt"),  # after a rebuild the rule says hit
    }
