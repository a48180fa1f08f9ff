"""deploy/ renders with kustomize and every object is accepted by the API server (dry-run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from services.controlplane import assets
from services.kube import KubeClient

ROOT = Path(__file__).resolve().parents[2]
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "escalate", "bind", "*"}


def rendered() -> list[dict[str, object]]:
    kubectl = assets.ensure("kubectl")
    out = subprocess.run(
        [str(kubectl), "kustomize", str(ROOT / "deploy")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


async def test_deploy_manifests_are_accepted_by_server_side_dry_run(kube: KubeClient) -> None:
    docs = rendered()
    kinds = {d["kind"] for d in docs}
    assert {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
    } <= kinds
    # Namespaced dry-runs need the namespace to exist; create it for real, dry-run the rest.
    await kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "driftbus"}},
        field_manager="driftbus-tests",
    )
    for doc in docs:
        result = await kube.apply(doc, field_manager="driftbus-tests", dry_run=True)
        assert result["kind"] == doc["kind"]


def test_watcher_and_planner_cannot_write() -> None:
    docs = rendered()
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}  # type: ignore[index]
    watcher_verbs = {v for rule in roles["driftbus:watcher"]["rules"] for v in rule["verbs"]}  # type: ignore[index]
    assert watcher_verbs == {"get", "list", "watch"}
    bound = {
        d["roleRef"]["name"]
        for d in docs
        if d["kind"] == "ClusterRoleBinding"  # type: ignore[index]
        for s in d["subjects"]
        if s["name"] == "driftbus-planner"
    }  # type: ignore[index]
    assert bound == set(), "the planner needs no Kubernetes permissions"
    applier_verbs = {v for rule in roles["driftbus:applier"]["rules"] for v in rule["verbs"]}  # type: ignore[index]
    assert "*" not in applier_verbs
    assert WRITE_VERBS & applier_verbs


def test_shipped_nats_configuration_is_generated_and_accepted_by_nats_server() -> None:
    """deploy/nats/ is what `driftbus nats-config` generates (so it cannot drift from the
    permission sets the security tests prove), and nats-server accepts it."""
    from services.access import permissions
    from services.cli.security import server_conf

    users = permissions.fleet(["in-cluster"], {"platform": ["in-cluster"]})
    auth = (ROOT / "deploy" / "nats" / "auth.conf").read_text()
    assert auth.split("\n", 1)[1] == permissions.authorization_conf(users)
    assert (ROOT / "deploy" / "nats" / "nats.conf").read_text() == server_conf(
        "/etc/nats/tls", "/data"
    )
    env = {u.password_env: "x" for u in users}
    check = subprocess.run(
        [str(assets.ensure("nats-server")), "-c", "auth.conf", "-t"],
        cwd=ROOT / "deploy" / "nats",
        env=env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    # without the passwords in its environment nats-server refuses to start, naming the variable
    missing = subprocess.run(
        [str(assets.ensure("nats-server")), "-c", "auth.conf", "-t"],
        cwd=ROOT / "deploy" / "nats",
        env={},
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0
    assert "DRIFTBUS_NATS_PASSWORD_PLANNER" in missing.stdout + missing.stderr


async def test_applier_autoscaler_example_is_accepted(kube: KubeClient) -> None:
    """deploy/autoscaling/hpa.yaml (on driftbus_intents_pending) passes server-side dry-run.
    The KEDA variant needs KEDA's CRDs, which the test API server does not have: it is only
    checked to name the same metric."""
    await kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "driftbus"}},
        field_manager="driftbus-tests",
    )
    hpa = yaml.safe_load((ROOT / "deploy" / "autoscaling" / "hpa.yaml").read_text())
    hpa["metadata"]["namespace"] = "driftbus"
    result = await kube.apply(hpa, field_manager="driftbus-tests", dry_run=True)
    assert result["spec"]["metrics"][0]["external"]["metric"]["name"] == "driftbus_intents_pending"
    keda = yaml.safe_load((ROOT / "deploy" / "autoscaling" / "keda-scaledobject.yaml").read_text())
    assert "driftbus_intents_pending" in keda["spec"]["triggers"][0]["metadata"]["query"]
