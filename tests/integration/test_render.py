"""Publishing what kubectl takes besides plain files: a kustomization (rendered by the kubectl
the project builds) and standard input — with the real CLI, services and servers."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline
from services.common import bus
from services.inputs.git import HelmOptions, load_git
from services.inputs.load import InputError, load_paths
from services.kube import KubeClient, NotFound

from ..conftest import unique_name
from ..gitrepo import git
from .test_trust_cli import ROOT, bundles_on_stream, driftbus, write

BASE = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  ports:
  - port: 80
"""


def overlay(root: Path, ns: str, color: str) -> Path:
    write(root, "base/objects.yaml", BASE)
    write(root, "base/kustomization.yaml", "resources:\n- objects.yaml\n")
    write(
        root,
        "overlays/prod/kustomization.yaml",
        f"namespace: {ns}\nnamePrefix: prod-\nresources:\n- ../../base\n"
        f"configMapGenerator:\n- name: colors\n  literals:\n  - color={color}\n",
    )
    return root / "overlays" / "prod"


async def test_a_kustomize_overlay_publishes_what_kubectl_kustomize_renders_and_converges(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    prod = overlay(tmp_path / "repo", namespace, "blue")
    loaded = load_paths([str(prod)])
    names = sorted(m.obj["metadata"]["name"] for m in loaded.manifests)
    assert names[1:] == ["prod-settings", "prod-web"]
    assert names[0].startswith("prod-colors-"), "the generator's content hash is in the name"
    assert {m.obj["metadata"]["namespace"] for m in loaded.manifests} == {namespace}
    assert "kustomize in kubectl v" in loaded.source

    pipeline.start_all()
    c, bundle = pipeline.cluster, unique_name("kust")
    publish = ("publish", str(prod), "--cluster", c, "--bundle", bundle, "--wait")
    code, out, err = await driftbus(pipeline.nats.client_url, *publish, "--timeout", "120")
    assert code == 0, err + out
    cm = await kube.discovery.resource("v1", "ConfigMap")
    assert (await kube.get(cm, names[0], namespace))["data"] == {"color": "blue"}
    (msg,) = await bundles_on_stream(pnc, c, bundle)
    assert "kustomize in kubectl v" in msg.source, "what rendered it travels with the revision"

    # a new generator value: a new ConfigMap name; plan shows it and the old one's prune
    overlay(tmp_path / "repo", namespace, "green")
    code, out, err = await driftbus(
        pipeline.nats.client_url,
        *("plan", str(prod), "--cluster", c, "--bundle", bundle, "-o", "json"),
        env={"KUBECONFIG": str(pipeline.stack.cluster.kubeconfig)},
    )
    assert code == 0, err + out
    rows = {(r["name"], r["action"]) for r in orjson.loads(out)["objects"]}
    assert (names[0], "delete") in rows
    assert any(n.startswith("prod-colors-") and a == "apply" for n, a in rows if n != names[0])
    code, out, err = await driftbus(pipeline.nats.client_url, *publish, "--timeout", "120")
    assert code == 0, err + out
    for _ in range(100):
        try:
            await kube.get(cm, names[0], namespace)
        except NotFound:
            break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the previous generated ConfigMap was never pruned")
    # `status` says what rendered the revision in force
    status = ("status", "--cluster", c, "--bundle", bundle)
    code, out, err = await driftbus(pipeline.nats.client_url, *status)
    assert code == 0, err
    assert f"from {prod} [rendered: " in out, out
    assert "kustomize in kubectl v" in out, out


async def test_standard_input_is_a_path_as_for_kubectl(
    pipeline: Pipeline, pnc: NATS, namespace: str
) -> None:
    await bus.ensure_streams(pnc.jetstream())  # only the publish runs here
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: piped\ndata:\n  on: yes\n"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "services.cli.main", "publish", "-", "-n", namespace),
        *("--cluster", pipeline.cluster, "--bundle", "stdin"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": pipeline.nats.client_url},
    )
    out, err = await asyncio.wait_for(proc.communicate(manifest.encode()), timeout=120)
    assert proc.returncode == 0, (out + err).decode()
    (msg,) = await bundles_on_stream(pnc, pipeline.cluster, "stdin")
    got: dict[str, Any] = msg.manifests[0]
    assert got["metadata"]["name"] == "piped"
    assert got["data"] == {"true": True}, "YAML 1.1 as Kubernetes reads it: on/yes are true"


def chart(root: Path) -> Path:
    """A local chart whose ConfigMap takes its data from values."""
    write(root, "web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n")
    write(root, "web/values.yaml", "color: red\nreplicas: 1\n")
    write(
        root,
        "web/templates/config.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\n"
        "data:\n  color: {{ .Values.color | quote }}\n",
    )
    write(
        root,
        "web/templates/service.yaml",
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ .Release.Name }}\n"
        "spec:\n  ports:\n  - port: 80\n",
    )
    return root / "web"


async def test_a_local_helm_chart_with_a_values_file_publishes_plans_and_converges(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    path = chart(tmp_path)
    write(tmp_path, "prod.yaml", "color: blue\n")
    pipeline.start_all()
    c, bundle = pipeline.cluster, unique_name("helm")
    source = ("--helm", str(path), "--values", str(tmp_path / "prod.yaml"), "-n", namespace)
    publish = ("publish", *source, "--cluster", c, "--bundle", bundle, "--wait")
    code, out, err = await driftbus(pipeline.nats.client_url, *publish, "--timeout", "120")
    assert code == 0, err + out
    cm = await kube.discovery.resource("v1", "ConfigMap")
    live = await kube.get(cm, f"{bundle}-config", namespace)
    assert live["data"] == {"color": "blue"}, "the values file wins over the chart's defaults"
    (msg,) = await bundles_on_stream(pnc, c, bundle)
    assert "helm v4." in msg.source
    assert f"release {bundle}" in msg.source

    code, out, err = await driftbus(
        pipeline.nats.client_url,
        *("plan", *source, "--set", "color=green", "--cluster", c, "--bundle", bundle),
        *("-o", "json"),
        env={"KUBECONFIG": str(pipeline.stack.cluster.kubeconfig)},
    )
    assert code == 0, err + out
    rows = {r["name"]: r for r in orjson.loads(out)["objects"]}
    assert rows[f"{bundle}-config"]["action"] == "apply"
    assert any("green" in str(change["new"]) for change in rows[f"{bundle}-config"]["changes"])
    assert rows[bundle]["action"] == "unchanged"


def test_a_chart_in_a_git_repository_is_rendered_with_its_values_relative_to_it(
    tmp_path: Path,
) -> None:
    """``publish --git … --path CHART`` and ``driftbus source`` read a chart as ``--helm`` does
    (the Helm the project builds), not its templates as manifests."""
    repo = tmp_path / "repo"
    chart(repo / "charts")
    write(repo, "charts/web/prod.yaml", "color: blue\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "chart")
    head = git(repo, "rev-parse", "HEAD")
    helm = HelmOptions(release="shop", namespace="ns1", values=("prod.yaml",))
    loaded = load_git(f"file://{repo}", "HEAD", "charts/web", helm)
    by_name = {m.obj["metadata"]["name"]: m.obj for m in loaded.manifests}
    assert sorted(by_name) == ["shop", "shop-config"]
    assert by_name["shop-config"]["data"] == {"color": "blue"}
    assert loaded.revision == head
    assert f"file://{repo}@{head} [rendered: helm v4." in loaded.source
    with pytest.raises(InputError, match="a Helm chart; give a release"):
        load_git(str(repo), "HEAD", "charts/web")
