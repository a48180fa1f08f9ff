"""`driftbus up` with a fleet (issue 31, "a fleet on a laptop"): several local clusters, each its
own control plane with controllers, watcher and applier, sharing one NATS and one planner; one
KUBECONFIG with a context per cluster; a publish reaches only its cluster; `down` stops all of
it. And a cluster spec that cannot be used is one line naming it, before anything starts."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from services.controlplane import assets, servers

UP_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "json" / "cli-up.schema.json"
FLEET = {"a": {"env": "canary"}, "b": {"env": "prod"}, "c": {"env": "prod"}}


async def driftbus(*args: str, within: float = 120) -> tuple[int, str]:
    """``driftbus ARGS`` as a user types it, with no NATS_URL: exit code, output."""
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.cli.main", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    out, _ = await asyncio.wait_for(p.communicate(), timeout=within)
    assert p.returncode is not None
    return p.returncode, out.decode()


async def kubectl(kubeconfig: str, context: str, *args: str) -> tuple[int, str]:
    p = await asyncio.create_subprocess_exec(
        str(assets.ensure("kubectl")), "--kubeconfig", kubeconfig, "--context", context, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    out, _ = await asyncio.wait_for(p.communicate(), timeout=60)
    assert p.returncode is not None
    return p.returncode, out.decode()


def context_exists() -> bool:
    return Path(os.environ["DRIFTBUS_UP_CONTEXT"]).exists()


@pytest.mark.timeout(600)
async def test_up_three_clusters_one_kubeconfig_a_publish_reaches_only_its_cluster_down_stops_all(
    tmp_path: Path, measured: Any
) -> None:
    workdir = tmp_path / "fleet"
    began = time.monotonic()
    specs = [f"--cluster={name}:env={labels['env']}" for name, labels in FLEET.items()]
    code, out = await driftbus(
        "up", "--detach", "--workdir", str(workdir), *specs, "--appliers", "1", "--no-example",
        "--ui-port", "0", "-o", "json", within=400,
    )  # fmt: skip
    assert code == 0, out
    started = time.monotonic() - began
    info = json.loads(out.strip().splitlines()[-1])
    jsonschema.validate(info, json.loads(UP_SCHEMA.read_text()))
    pids = [info["pid"], *info["services"].values()]
    try:
        assert info["cluster"] == "a", "the first is every command's default --cluster"
        assert info["clusters"] == [
            {"name": n, "labels": labels, "context": n} for n, labels in FLEET.items()
        ]
        assert set(info["services"]) == {
            "planner",
            "notify",
            *(f"watcher-{n}" for n in FLEET),
            *(f"applier-{n}-0" for n in FLEET),
        }
        assert all(servers.pid_alive(p) for p in pids)

        # one KUBECONFIG, a context per cluster, each answered by its own API server
        kubeconfig = info["kubeconfig"]
        code, out = await kubectl(kubeconfig, "a", "config", "get-contexts", "-o", "name")
        assert (code, sorted(out.split())) == (0, ["a", "b", "c"]), out
        uids = set()
        for n in FLEET:
            code, out = await kubectl(
                kubeconfig, n, "get", "namespace", "default", "-o", "jsonpath={.metadata.uid}"
            )
            assert code == 0, out
            uids.add(out)
        assert len(uids) == 3, "three API servers, not one answering three names"

        # a bundle published to b (the stack found through its context) is Ready there only
        (bundle := tmp_path / "only-b").mkdir()
        (bundle / "cm.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: only-b\n  namespace: default\n"
            "data:\n  where: b\n"
        )
        code, out = await driftbus(
            "publish", str(bundle), "--cluster", "b", "--bundle", "only-b", "--wait",
            "--timeout", "120", within=180,
        )  # fmt: skip
        assert code == 0, out
        code, out = await kubectl(
            kubeconfig, "b", "-n", "default", "get", "configmap", "only-b",
            "-o", "jsonpath={.data.where}",
        )  # fmt: skip
        assert (code, out) == (0, "b"), out
        for other in ("a", "c"):
            code, out = await kubectl(kubeconfig, other, "-n", "default", "get", "cm", "only-b")
            assert code == 1, (other, out)
            assert "NotFound" in out, (other, out)
        # each cluster's watcher registered it with the labels of its spec
        for _ in range(60):
            code, out = await driftbus("clusters", "-o", "json")
            assert code == 0, out
            registry = {c["name"]: c["labels"] for c in json.loads(out)["clusters"]}
            if registry == FLEET:
                break
            await asyncio.sleep(0.5)
        assert registry == FLEET, out
        code, out = await driftbus("bundles", "-o", "json")  # default --cluster: a
        assert (code, json.loads(out)) == (0, []), out
        code, out = await driftbus("bundles", "--cluster", "b", "-o", "json")
        assert code == 0, out
        assert [row["bundle"] for row in json.loads(out)] == ["only-b"], out
        await readme_tour(tmp_path, kubeconfig)
    finally:
        stopping = time.monotonic()
        code, out = await driftbus("down", "--workdir", str(workdir), within=180)
        stopped = time.monotonic() - stopping
    assert code == 0, out
    assert not [p for p in pids if servers.pid_alive(p)]
    assert servers.orphans(str(workdir)) == [], "every etcd, API server and controller stopped"
    assert not context_exists(), "down removes the context"
    measured(
        f"up --detach, 3 clusters with controllers, 1 applier each: started in {started:.1f}s, "
        f"down in {stopped:.1f}s, whole test {time.monotonic() - began:.1f}s"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--cluster", "A:x"], 'cluster "A:x": a cluster name is a DNS label'),
        (["--cluster", "a:bad key=1"], 'cluster "a:bad key=1": label key "bad key"'),
        (["--cluster", "a:env"], 'cluster "a:env": expected KEY=VALUE'),
        (["--cluster", "a", "--cluster", "a:env=prod"], 'the name "a" is given twice'),
        (["--clusters", "0"], "--clusters 0: at least 1"),
        (["--clusters", "2", "--cluster", "a"], "either --clusters N or --cluster NAME"),
        (
            ["--kubeconfig", "/nonexistent", "--cluster", "a", "--cluster", "b"],
            "--kubeconfig serves one cluster",
        ),
        (["--detach", "--cluster", "A:x"], 'cluster "A:x": a cluster name is a DNS label'),
        (["--detach", "--cluster", "a:bad key=1"], 'cluster "a:bad key=1": label key "bad key"'),
    ],
    ids=[
        "upper-case-name",
        "space-in-label-key",
        "label-without-value",
        "name-twice",
        "no-clusters",
        "both-flags",
        "kubeconfig-with-two",
        "detach-upper-case-name",
        "detach-space-in-label-key",
    ],
)
async def test_a_cluster_spec_that_cannot_be_used_is_one_line_naming_it_before_anything_starts(
    tmp_path: Path, args: list[str], said: str
) -> None:
    workdir = tmp_path / "up"
    code, out = await driftbus("up", "--workdir", str(workdir), "--ui-port", "0", *args)
    assert code == 2, out
    assert out.startswith("driftbus up: "), out
    assert said in out, out
    assert out.count("\n") == 1, out
    assert "Traceback" not in out
    assert not workdir.exists(), "nothing was started"


def test_a_fleet_context_defaults_to_its_first_cluster_and_an_old_one_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.cli import context

    monkeypatch.setenv(context.CONTEXT_ENV, str(tmp_path / "context.json"))
    monkeypatch.delenv("NATS_URL", raising=False)
    rows = [{"name": n, "labels": labels, "context": n} for n, labels in FLEET.items()]
    fleet = {"pid": os.getpid(), "nats_url": "tls://127.0.0.1:1", "cluster": "a", "clusters": rows}
    context.write(fleet)
    assert context.cluster(None) == "a"
    assert context.clusters(fleet) == ["a", "b", "c"]
    before_fleets = {"pid": os.getpid(), "nats_url": "tls://127.0.0.1:1", "cluster": "local"}
    context.write(before_fleets)
    assert context.cluster(None) == "local"
    assert context.clusters(before_fleets) == ["local"]


async def readme_tour(tmp_path: Path, kubeconfig: str) -> None:
    """The README's "a fleet on a laptop", as written there: a canary rollout to the three
    clusters, then a revision the API server refuses that halts on the canary, rolls it back,
    and never reaches b or c."""
    web = tmp_path / "web"
    web.mkdir()
    cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: default\n"
    (web / "cm.yaml").write_text(cm + "data:\n  v: one\n")
    fleet = ["--bundle", "web", "-l", "env in (canary,prod)", "--rollout", "env=canary"]
    code, out = await driftbus(
        "publish", str(web), *fleet, "--bake", "2", "--revision", "v1", "--wait",
        "--timeout", "120", within=180,
    )  # fmt: skip
    assert code == 0, out
    assert "web@v1: Complete, step 2/2, 3/3 clusters Ready on it" in out, out
    (web / "cm.yaml").write_text(cm + "data:\n  v: two\n")
    (web / "typo.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: default\n"
        "spec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n"
        "      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n"
        "        imagee: nginx\n"
    )
    code, out = await driftbus(
        "publish", str(web), *fleet, "--bake", "2", "--step-timeout", "60",
        "--on-failure", "rollback", "--revision", "v2", "--wait", "--timeout", "120", within=180,
    )  # fmt: skip
    assert code == 1, out
    assert "web@v2: RolledBack" in out, out  # v1 Ready again on the canary
    for name in FLEET:  # the canary back on v1, the others never left it
        for _ in range(60):
            code, out = await kubectl(
                kubeconfig, name, "-n", "default", "get", "configmap", "web",
                "-o", "jsonpath={.data.v}",
            )  # fmt: skip
            if (code, out) == (0, "one"):
                break
            await asyncio.sleep(0.5)
        assert (code, out) == (0, "one"), (name, out)
    code, out = await driftbus("rollout", "history", "web", "-o", "json")
    assert code == 0, out
    events = [(e["revision"], e["event"]) for e in json.loads(out)["events"]]
    assert events == [
        ("v1", "started"),
        ("v1", "step"),
        ("v1", "complete"),
        ("v2", "started"),
        ("v2", "halted"),
        ("v2", "rolling-back"),
        ("v2", "rolled-back"),
    ], events


@pytest.mark.timeout(300)
async def test_up_clusters_3_names_them_and_registers_each(tmp_path: Path) -> None:
    """``driftbus up --clusters 3``: three clusters named local-1…3, one context each, each
    registered in the fleet registry by its watcher; ``down`` stops them."""
    workdir = tmp_path / "three"
    code, out = await driftbus(
        "up", "--detach", "--workdir", str(workdir), "--clusters", "3", "--appliers", "1",
        "--no-example", "--no-controllers", "--ui-port", "0", "-o", "json", within=300,
    )  # fmt: skip
    assert code == 0, out
    info = json.loads(out.strip().splitlines()[-1])
    names = ["local-1", "local-2", "local-3"]
    try:
        assert [c["name"] for c in info["clusters"]] == names
        code, out = await kubectl(
            info["kubeconfig"], "local-1", "config", "get-contexts", "-o", "name"
        )
        assert (code, sorted(out.split())) == (0, names), out
        for _ in range(60):
            code, out = await driftbus("clusters", "-o", "json")
            assert code == 0, out
            if sorted(c["name"] for c in json.loads(out)["clusters"]) == names:
                break
            await asyncio.sleep(0.5)
        assert sorted(c["name"] for c in json.loads(out)["clusters"]) == names, out
    finally:
        code, out = await driftbus("down", "--workdir", str(workdir), within=180)
    assert code == 0, out
    assert servers.orphans(str(workdir)) == []
