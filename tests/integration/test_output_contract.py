"""The command line's output contract (issue 16): ``-o json`` of every verb is typed and validates
against its schema in ``schemas/json/``, ``-o yaml`` says the same, and ``why`` finds an object
as a person types it (any case, plural, no API group), listing the candidates when two match."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch

from ..conftest import unique_name
from .manifests import crd
from .test_cli import driftbus
from .test_trust import cm, namespace_of

ROOT = Path(__file__).resolve().parents[2]


def schema(name: str) -> dict[str, Any]:
    return dict(json.loads((ROOT / "schemas" / "json" / f"{name}.schema.json").read_text()))


async def typed(pipeline: Pipeline, name: str, *args: str, also_yaml: bool = False) -> Any:
    """``driftbus ARGS -o json``, validated against ``name``'s schema; ``also_yaml``: and
    ``-o yaml`` says the same (one shared dumper: checked on a few verbs, not all)."""
    code, out, err = await driftbus(pipeline, *args, "-o", "json")
    assert code == 0, err + out
    doc = json.loads(out)
    jsonschema.validate(doc, schema(name))
    if not also_yaml:
        return doc
    code, out, err = await driftbus(pipeline, *args, "-o", "yaml")
    assert code == 0, err + out
    assert timeless(yaml.safe_load(out)) == timeless(doc), "yaml and json differ"
    return doc


def timeless(value: Any) -> Any:
    """``value`` without what differs between two runs: ages, heartbeats."""
    if isinstance(value, dict):
        return {
            k: timeless(v) for k, v in value.items() if not k.endswith(("_seconds", "heartbeat_at"))
        }
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


async def test_every_json_output_is_typed_and_why_finds_what_a_person_types(
    pipeline: Pipeline, pnc: NATS
) -> None:
    ns, bundle = unique_name("out"), unique_name("out")
    group = f"{unique_name('amb')}.driftbus.test"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{bundle}:reader"},
        "rules": [],
    }
    # a custom kind called ConfigMap too, with an object of the same name as a real ConfigMap
    twin = {
        "apiVersion": f"{group}/v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": ns},
    }
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    manifests = [
        namespace_of(ns),
        cm(ns, "a"),
        cm(ns, "b"),
        role,
        crd(group, "ConfigMap"),
        twin,
    ]
    await pipeline.publish(pnc.jetstream(), bundle, manifests)
    await watch.ready("r1", 90, pipeline.logs)
    c = pipeline.cluster

    rows = await typed(pipeline, "cli-bundles", "status", "--cluster", c, also_yaml=True)
    [row] = [r for r in rows if r["bundle"] == bundle]
    assert (row["phase"], row["objects"], row["ready"], row["failed"]) == ("Ready", 6, 6, 0)
    assert row["published_at"].endswith("Z")
    doc = await typed(
        pipeline, "cli-status-bundle", "status", "--cluster", c, "--bundle", bundle, also_yaml=True
    )
    assert doc["bundle"]["bundle"] == bundle
    objects = {(o["group"], o["kind"], o["name"]): o for o in doc["objects"]}
    assert (
        objects[("rbac.authorization.k8s.io", "ClusterRole", f"{bundle}:reader")]["api_version"]
        == "rbac.authorization.k8s.io/v1"
    )
    assert objects[(group, "ConfigMap", "a")]["api_version"] == f"{group}/v1"
    await typed(pipeline, "cli-bundles", "bundles", "--cluster", c)
    version = await typed(pipeline, "cli-version", "version")
    assert {b["name"] for b in version["binaries"]} >= {"nats-server", "kube-apiserver"}
    plan_src = pipeline.workdir / f"{bundle}.json"
    plan_src.write_text(json.dumps({"kind": "List", "items": manifests}))
    plan = await typed(
        pipeline,
        "cli-plan",
        "plan",
        str(plan_src),
        "--cluster",
        c,
        "--bundle",
        bundle,
        also_yaml=True,
    )
    assert plan["summary"]["unchanged"] == 6, plan["summary"]
    await typed(pipeline, "tenants", "tenants", "show")
    shards = await typed(pipeline, "cli-shards", "shards", also_yaml=True)
    assert any(
        cl["cluster"] == c and isinstance(cl["fencing_token"], int) for cl in shards["clusters"]
    )

    # why: the group found from the bus, the kind in any case or plural
    for typed_as in (f"ClusterRole/{bundle}:reader", f"clusterrole.rbac/{bundle}:reader"):
        code, out, err = await driftbus(pipeline, "why", typed_as, "--cluster", c)
        assert code == 0, err
        assert f"ClusterRole.rbac.authorization.k8s.io/{bundle}:reader in cluster" in out
        assert "apply" in out
    records = await typed(pipeline, "cli-why", "why", f"configmaps/{ns}/b", "--cluster", c)
    assert [(r["kind"], r["api_group"], r["action"], r["reason"]) for r in records][:1] == [
        ("ConfigMap", "", "apply", "new")
    ]
    assert records[0]["api_version"] == "v1"
    assert records[0]["made_as"] == "driftbus"
    # two ConfigMap kinds hold an object ns/a: listed, not guessed
    code, out, err = await driftbus(pipeline, "why", f"configmap/{ns}/a", "--cluster", c)
    assert code == 1
    assert f"is ambiguous in cluster {c}: ConfigMap., ConfigMap.{group}; give KIND.GROUP" in err
    for narrowed, want in ((f"ConfigMap./{ns}/a", ""), (f"configmap.{group}/{ns}/a", group)):
        records = await typed(pipeline, "cli-why", "why", narrowed, "--cluster", c)
        assert {r["api_group"] for r in records} == {want}
    code, out, err = await driftbus(pipeline, "why", f"configmap/{ns}/nope", "--cluster", c)
    assert code == 1
    assert f"no decisions about configmap/{ns}/nope in cluster {c}" in err
