"""A bundle's life after its publish (issue 16), through the user's commands on the real stack:
``suspend``/``resume``, ``dependsOn``, ``delete bundle``, ``rollback`` and ``bundles``.
Assertions are what a user sees: the cluster, the bundle status, the API server's write count,
the decision log (``driftbus why``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import DecisionLog, Pipeline, StatusWatch, settle, write_counts, writes_since
from schemas.messages import BundlePhase
from services.kube import KubeClient

from ..conftest import unique_name
from .test_cli import driftbus
from .test_corpus import CORPUS
from .test_pipeline import mixed_bundle
from .test_tenancy import started
from .test_trust import cm, namespace_of
from .waits import until_object

ROOT = Path(__file__).resolve().parents[2]
CONFIGMAPS = {"configmaps"}


def data_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("data") or {})


async def bundles_json(pipeline: Pipeline, *args: str) -> list[dict[str, Any]]:
    """``driftbus bundles -o json``, checked against its published schema."""
    code, out, err = await driftbus(
        pipeline, "bundles", "--cluster", pipeline.cluster, "-o", "json", *args
    )
    assert code == 0, err
    doc = json.loads(out)
    schema = json.loads((ROOT / "schemas/json/cli-bundles.schema.json").read_text())
    jsonschema.validate(doc, schema)
    return list(doc)


async def test_suspend_reports_drift_without_correcting_and_resume_corrects(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, bundle = unique_name("susp"), unique_name("b")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    await pipeline.publish(js, bundle, [namespace_of(ns), cm(ns, "a"), cm(ns, "b")], force=True)
    await watch.ready("r1", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")

    code, out, err = await driftbus(
        pipeline, "suspend", bundle, "--cluster", pipeline.cluster, "--reason", "incident 42"
    )
    assert code == 0, err
    assert "suspended" in out
    await watch.until(lambda s: s.suspended and s.phase is BundlePhase.READY, 30, pipeline.logs)
    before = write_counts(pipeline.api)

    # someone changes a field driftbus owns: reported, not corrected
    await kube.apply(cm(ns, "a", k="intruder"), field_manager="intruder", force=True)
    status = await watch.until(
        lambda s: s.phase is BundlePhase.OUT_OF_SYNC and s.counts.drifted == 1, 30, pipeline.logs
    )
    assert status.suspended
    assert status.message.startswith("suspended (incident 42)"), status.message
    assert any(f"{ns}/a: drifted" in line for line in status.failed_objects)
    # a new revision is taken in and reported, not applied
    await pipeline.publish(
        js,
        bundle,
        [namespace_of(ns), cm(ns, "a"), cm(ns, "b", k="new"), cm(ns, "c")],
        revision="r2",
        force=True,
    )
    status = await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.OUT_OF_SYNC, 30, pipeline.logs
    )
    assert "suspended" in status.message
    await settle(3)
    assert writes_since(pipeline.api, before, CONFIGMAPS) == 1  # the intruder's, nothing else
    assert data_of(await kube.get(res, "a", ns)) == {"k": "intruder"}
    assert data_of(await kube.get(res, "b", ns)) == {"k": "b"}
    await until_object(kube, res, "c", ns, present=False, logs=pipeline.logs)
    assert "hold:suspended" in decisions.reasons("a")
    assert "hold:suspended" in decisions.reasons("c")
    [row] = [r for r in await bundles_json(pipeline) if r["bundle"] == bundle]
    assert row["suspended"] is True
    assert row["phase"] == "OutOfSync"
    assert row["revision"] == "r2"
    assert isinstance(row["objects"], int)

    code, out, err = await driftbus(pipeline, "resume", bundle, "--cluster", pipeline.cluster)
    assert code == 0, err
    status = await watch.until(
        lambda s: s.revision == "r2" and s.phase is BundlePhase.READY and not s.suspended,
        60,
        pipeline.logs,
    )
    assert data_of(await kube.get(res, "a", ns)) == {"k": "a"}
    assert data_of(await kube.get(res, "b", ns)) == {"k": "new"}
    assert data_of(await kube.get(res, "c", ns)) == {"k": "c"}
    assert "apply:drift" in decisions.reasons("a")


async def test_depends_on_waits_for_a_crd_bundle_and_refuses_a_cycle(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, suffix = unique_name("deps"), unique_name("d")
    crds, users = unique_name("crds"), unique_name("users")
    namespace, crd, widget = mixed_bundle(ns, suffix)[:3]
    watch_crds, watch_users = StatusWatch(), StatusWatch()
    await watch_crds.start(pnc, pipeline.cluster, crds)
    await watch_users.start(pnc, pipeline.cluster, users)
    decisions = DecisionLog()
    await decisions.start(pnc, pipeline.cluster)
    pipeline.start_all()
    js = pnc.jetstream()
    res = await kube.discovery.resource("v1", "ConfigMap")

    # the users wait for a bundle not yet published: nothing of theirs is written
    await pipeline.publish(
        js, users, [namespace, cm(ns, "user-config")], revision="u1", depends_on=[crds]
    )
    status = await watch_users.until(
        lambda s: s.revision == "u1" and "waits for" in s.message, 30, pipeline.logs
    )
    assert status.phase is BundlePhase.RECONCILING
    assert f"waits for {crds} (not published)" in status.message
    assert status.depends_on == [crds]
    await settle(2)
    await until_object(kube, res, "user-config", ns, present=False, logs=pipeline.logs)
    assert "hold:dependencies" in decisions.reasons("user-config")

    # the users' next revision needs the CRD the other bundle brings: applied after it is Ready
    await pipeline.publish(
        js, users, [namespace, cm(ns, "user-config"), widget], revision="u2", depends_on=[crds]
    )
    await pipeline.publish(js, crds, [crd], revision="c1")
    ready_crds = await watch_crds.ready("c1", 60, pipeline.logs)
    ready_users = await watch_users.ready("u2", 60, pipeline.logs)
    assert ready_crds.at is not None
    assert ready_users.at is not None
    assert ready_users.at >= ready_crds.at
    widgets = await kube.discovery.resource(f"{suffix}.driftbus.test/v1", "Widget")
    await kube.get(widgets, "w1", ns)
    applies = [r for r in decisions.records if r.bundle == users and str(r.action) == "apply"]
    assert applies
    assert all(r.at is not None and r.at >= ready_crds.at for r in applies)

    # a revision that closes a cycle is refused; the one in force stays
    await pipeline.publish(js, crds, [crd], revision="c2", depends_on=[users])
    status = await watch_crds.until(lambda s: s.revision == "c2", 30, pipeline.logs)
    assert status.phase is BundlePhase.FAILED
    assert f"dependsOn closes a cycle: {crds} → {users} → {crds}" in status.message
    await kube.get(widgets, "w1", ns)


async def test_delete_bundle_prunes_with_the_safeguards_then_forgets_it(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, gone, other = unique_name("del"), unique_name("gone"), unique_name("other")
    keep = cm(ns, "keep")
    keep["metadata"]["annotations"] = {"driftbus.dev/prune": "disabled"}
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, gone)
    pipeline.start_all()
    js = pnc.jetstream()
    await pipeline.publish(js, gone, [namespace_of(ns), cm(ns, "a"), keep])
    await watch.ready("r1", 60, pipeline.logs)
    await pipeline.publish(js, other, [cm(ns, "theirs")])
    res = await kube.discovery.resource("v1", "ConfigMap")
    ns_res = await kube.discovery.resource("v1", "Namespace")
    await until_object(kube, res, "theirs", ns, present=True, logs=pipeline.logs)

    code, out, err = await driftbus(
        pipeline, "delete", "bundle", gone, "--cluster", pipeline.cluster, "--wait"
    )
    assert code == 0, err + pipeline.logs()
    assert out.startswith("Deleted"), out
    assert "2 objects kept" in out  # the annotated ConfigMap, and the Namespace others use
    await until_object(kube, res, "a", ns, present=False, logs=pipeline.logs)
    await kube.get(res, "keep", ns)
    await kube.get(res, "theirs", ns)
    assert "deletionTimestamp" not in (await kube.get(ns_res, ns))["metadata"]

    listed = [r["bundle"] for r in await bundles_json(pipeline)]
    assert gone not in listed
    assert other in listed
    [row] = [r for r in await bundles_json(pipeline, "--all") if r["bundle"] == gone]
    assert row["phase"] == "Deleted"

    # forgotten for good: a planner restart neither recreates nor prunes anything
    before = write_counts(pipeline.api)
    pipeline.kill("planner")
    pipeline.start("planner")
    await settle(6)
    assert writes_since(pipeline.api, before, CONFIGMAPS) == 0
    await until_object(kube, res, "a", ns, present=False, logs=pipeline.logs)

    code, _, err = await driftbus(
        pipeline, "delete", "bundle", "nope", "--cluster", pipeline.cluster
    )
    assert code == 1
    assert "no bundle nope" in err

    # alone in its Namespace, the bundle's own annotated object still keeps the Namespace: a
    # Namespace deleted would delete it all the same
    alone, ns2 = unique_name("alone"), unique_name("del2")
    keep2 = cm(ns2, "keep")
    keep2["metadata"]["annotations"] = {"driftbus.dev/prune": "disabled"}
    await pipeline.publish(js, alone, [namespace_of(ns2), cm(ns2, "a"), keep2])
    await until_object(kube, res, "keep", ns2, present=True, logs=pipeline.logs)
    await settle(2)
    code, out, err = await driftbus(
        pipeline, "delete", "bundle", alone, "--cluster", pipeline.cluster, "--wait"
    )
    assert code == 0, err + pipeline.logs()
    assert "2 objects kept" in out, out
    await until_object(kube, res, "a", ns2, present=False, logs=pipeline.logs)
    await kube.get(res, "keep", ns2)
    assert "deletionTimestamp" not in (await kube.get(ns_res, ns2))["metadata"]


async def test_rollback_applies_exactly_the_objects_that_differ(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    ns, bundle = unique_name("rb"), unique_name("b")
    watch, decisions = await started(pipeline, pnc, bundle)
    js = pnc.jetstream()
    r1 = [namespace_of(ns), cm(ns, "a", v="1"), cm(ns, "b"), cm(ns, "c")]
    r2 = [namespace_of(ns), cm(ns, "a", v="2"), cm(ns, "b"), cm(ns, "d")]
    await pipeline.publish(js, bundle, r1, revision="r1")
    await watch.ready("r1", 60, pipeline.logs)
    await pipeline.publish(js, bundle, r2, revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    res = await kube.discovery.resource("v1", "ConfigMap")
    await settle(2)
    before, seen = write_counts(pipeline.api), len(decisions.records)

    code, _out, err = await driftbus(
        pipeline, "rollback", bundle, "--cluster", pipeline.cluster, "--wait"
    )
    assert code == 0, err + pipeline.logs()
    assert "republished r1 (was r2)" in err
    status = await watch.ready("r1", 60, pipeline.logs)
    assert status.rollback_of == "r2"
    await until_object(kube, res, "d", ns, present=False, logs=pipeline.logs)
    await settle(2)
    # a changed back, c created again, d pruned; b and the Namespace untouched
    assert writes_since(pipeline.api, before, CONFIGMAPS) == 3
    assert data_of(await kube.get(res, "a", ns)) == {"v": "1"}
    await kube.get(res, "c", ns)
    since = {f"{r.key.name}:{r.action}:{r.reason}" for r in decisions.records[seen:]}
    assert {"a:apply:manifest", "c:apply:new", "d:delete:prune", "b:hit:hit"} <= since
    assert not {s for s in since if s.startswith("b:apply")}
    [row] = [r for r in await bundles_json(pipeline) if r["bundle"] == bundle]
    assert row["rollback_of"] == "r2"

    # a revision the bus does not hold: refused, naming the ones it does
    code, _, err = await driftbus(
        pipeline, "rollback", bundle, "--cluster", pipeline.cluster, "--to", "r9"
    )
    assert code == 1
    assert "r9 is not among the revisions on the bus (r1, r2)" in err


CI_STEP = """
set -u
$DRIFTBUS plan "$SRC" --cluster "$CLUSTER" --bundle "$BUNDLE" --exit-code -o markdown > comment.md
case $? in
  0) echo "nothing to publish" ;;
  2) $DRIFTBUS publish "$SRC" --cluster "$CLUSTER" --bundle "$BUNDLE" --wait --timeout 60 \\
       || exit 1
     echo "published" ;;
  *) echo "plan failed: not published"; exit 1 ;;
esac
"""


async def test_plan_on_a_bus_nothing_ran_on_yet_plans_creates(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """A CI job may plan before any planner has made the streams (a new bus, a first
    cluster): nothing is known yet, so every object is a create; not a traceback."""
    ns, bundle = unique_name("fresh"), unique_name("fresh")
    (tmp_path / "all.json").write_text(
        json.dumps({"kind": "List", "items": [namespace_of(ns), cm(ns, "a")]})
    )
    code, out, err = await driftbus(
        pipeline,
        "plan",
        str(tmp_path / "all.json"),
        "--cluster",
        pipeline.cluster,
        "--bundle",
        bundle,
        "--exit-code",
        "-o",
        "json",
    )
    assert code == 2, err
    assert "Traceback" not in err, err
    doc = json.loads(out)
    assert sorted((o["kind"], o["action"]) for o in doc["objects"]) == [
        ("ConfigMap", "apply"),
        ("Namespace", "apply"),
    ], doc
    assert (doc["changes"], doc["errors"]) == (True, False), doc


async def test_plan_exit_code_gates_a_scripted_ci_step(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, tmp_path: Path
) -> None:
    import asyncio
    import sys

    ns, bundle = unique_name("ci"), unique_name("ci")
    pipeline.start_all()
    src = tmp_path / "src"
    src.mkdir()

    def write(objects: list[dict[str, Any]]) -> None:
        (src / "all.json").write_text(json.dumps({"kind": "List", "items": objects}))

    async def ci_step() -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            CI_STEP,
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={
                **pipeline.env(),
                "NATS_URL": pipeline.nats.client_url,
                "DRIFTBUS": f"{sys.executable} -m services.cli.main",
                "SRC": str(src),
                "CLUSTER": pipeline.cluster,
                "BUNDLE": bundle,
            },
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    write([namespace_of(ns), cm(ns, "a"), cm(ns, "b")])
    code, out, err = await ci_step()
    assert (code, out.strip().splitlines()[-1]) == (0, "published"), out + err
    comment = (tmp_path / "comment.md").read_text()
    assert f"### driftbus plan: `{bundle}` on cluster `{pipeline.cluster}`" in comment
    assert "**3 to apply, 0 to delete, 0 kept, 0 unchanged, 0 errors**" in comment
    assert f"| apply | ConfigMap {ns}/a | new (create in new namespace {ns}) | " in comment

    code, out, err = await ci_step()  # nothing changed: nothing published
    assert (code, out.strip()) == (0, "nothing to publish"), out + err
    assert "No changes" in (tmp_path / "comment.md").read_text()

    # the server refuses an object in the dry-run: the step fails, nothing is published
    bad = cm(ns, "bad")
    bad["data"] = {"k": ["not", "a", "string"]}
    write([namespace_of(ns), cm(ns, "a", k="changed"), cm(ns, "b"), bad])
    before = write_counts(pipeline.api)
    code, out, err = await ci_step()
    assert (code, out.strip()) == (1, "plan failed: not published"), out + err
    assert "| error | ConfigMap" in (tmp_path / "comment.md").read_text()
    assert writes_since(pipeline.api, before, CONFIGMAPS) == 0

    # the JSON document validates against its schema and says the same
    code, out, err = await driftbus(
        pipeline,
        "plan",
        str(src),
        "--cluster",
        pipeline.cluster,
        "--bundle",
        bundle,
        "-o",
        "json",
        "--exit-code",
    )
    assert code == 1, err
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((ROOT / "schemas/json/cli-plan.schema.json").read_text()))
    assert (doc["changes"], doc["errors"]) == (True, True)
    assert doc["summary"] == {"apply": 1, "delete": 0, "keep": 0, "unchanged": 2, "error": 1}
    [changed] = [o for o in doc["objects"] if o["name"] == "a"]
    assert changed["changes"] == [{"op": "change", "path": "data.k", "old": "a", "new": "changed"}]

    # another field manager took a field: a conflict without --force, an apply with it
    write([namespace_of(ns), cm(ns, "a"), cm(ns, "b", k="ours")])
    await kube.apply(cm(ns, "b", k="theirs"), field_manager="intruder", force=True)
    plan_args = ("plan", str(src), "--cluster", pipeline.cluster, "--bundle", bundle, "-o", "json")
    code, out, err = await driftbus(pipeline, *plan_args)
    assert code == 1, err
    [b] = [o for o in json.loads(out)["objects"] if o["name"] == "b"]
    assert (b["action"], "conflict" in b["reason"].lower()) == ("error", True), b
    code, out, err = await driftbus(pipeline, *plan_args, "--force", "--exit-code")
    assert code == 2, err
    doc = json.loads(out)
    [b] = [o for o in doc["objects"] if o["name"] == "b"]
    assert doc["force"] is True
    assert b["action"] == "apply"
    assert b["changes"] == [{"op": "change", "path": "data.k", "old": "theirs", "new": "ours"}]


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no corpus at {CORPUS} (../shared/corpus)")
async def test_a_real_install_split_into_its_crds_and_the_rest_applies_in_order(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient
) -> None:
    """Gatekeeper's install from the corpus (../shared/corpus), byte for byte, split the way a
    user would: its CRDs in one bundle, everything else in a bundle that depends on it.

    Its webhook configurations are left out: this API server is shared with the other tests of
    the worker and no Gatekeeper runs here, so they would refuse every Namespace written after
    (check-ignore-label fails closed). test_corpus applies them whole, to a cluster of its own."""
    from services.inputs.load import load_paths

    loaded = load_paths([str(CORPUS / "gatekeeper")])
    webhooks = {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
    objects = [m.obj for m in loaded.manifests if m.obj.get("kind") not in webhooks]
    assert len(objects) < len(loaded.manifests)  # the install has them: the filter is needed
    crds = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
    rest = [o for o in objects if o.get("kind") != "CustomResourceDefinition"]
    assert crds
    assert rest
    base, app = unique_name("gk-crds"), unique_name("gk")
    watch_app, decisions = await started(pipeline, pnc, app)
    watch_base = StatusWatch()
    await watch_base.start(pnc, pipeline.cluster, base)
    js = pnc.jetstream()
    await pipeline.publish(js, app, rest, revision="a1", depends_on=[base])
    status = await watch_app.until(lambda s: "waits for" in s.message, 60, pipeline.logs)
    assert f"waits for {base} (not published)" in status.message
    await settle(2)
    assert not [r for r in decisions.records if r.bundle == app and str(r.action) == "apply"]
    await pipeline.publish(js, base, crds, revision="c1")
    ready = await watch_base.ready("c1", 90, pipeline.logs)
    await watch_app.until(
        lambda s: s.revision == "a1" and s.counts.applied == s.counts.total == len(rest),
        120,
        pipeline.logs,
    )
    applies = [r for r in decisions.records if r.bundle == app and str(r.action) == "apply"]
    assert len(applies) == len(rest)
    assert all(r.at is not None and ready.at is not None and r.at >= ready.at for r in applies)
