"""``driftbus source`` following a real Git repository into a real cluster: only what changed
between two commits is written, a broken commit leaves the previous revision in place with a
clear status, a commit that renders the same objects publishes nothing."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from schemas.messages import SourcePhase
from services.controlplane import servers
from services.kube import KubeClient

from ..conftest import unique_name
from ..gitrepo import git
from .test_trust_cli import driftbus, write

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: '{v}'\n"


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


async def poke(port: int, bundle: str) -> None:
    """What a Git host's push webhook does."""
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"http://127.0.0.1:{port}/hook/{bundle}", data=b"{}") as resp,
    ):
        assert resp.status == 202, await resp.text()


async def test_a_followed_repository_applies_only_what_each_commit_changed(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for name in ("a", "b", "c"):
        write(repo, f"deploy/{name}.yaml", CM.format(name=name, v=1))
    write(repo, "README.md", "the manifests are under deploy/\n")
    first = commit(repo, "three config maps")

    bundle = unique_name("git")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    port = servers.free_port()
    # a file:// URL: cloned and fetched as a remote would be (a plain path is read in place)
    source_args = ("--cluster", pipeline.cluster, "--bundle", bundle, "--git", f"file://{repo}")
    source_args += ("--path", "deploy", "--namespace", namespace, "--interval", "600")
    pipeline.start("source", None, *source_args, "--webhook", f"127.0.0.1:{port}")
    await watch.ready(first, 90, pipeline.logs)
    src = await watch.source_status(lambda s: s.commit == first, 30, pipeline.logs)
    assert src.phase is SourcePhase.PUBLISHED, src
    assert "3 objects" in src.message, src
    res = await kube.discovery.resource("v1", "ConfigMap")
    await settle()

    # commit 2 changes one object: exactly one write
    before = write_counts(pipeline.api)
    write(repo, "deploy/b.yaml", CM.format(name="b", v=2))
    second = commit(repo, "b to 2")
    await poke(port, bundle)  # the poll interval is 600 s: only the webhook can bring it
    await watch.ready(second, 60, pipeline.logs)
    assert (await kube.get(res, "b", namespace))["data"] == {"v": "2"}
    await settle()
    assert writes_since(pipeline.api, before, {"configmaps"}) == 1

    # commit 3 is broken: nothing is published, the bundle stays at commit 2, the status says
    before = write_counts(pipeline.api)
    write(repo, "deploy/c.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c\n")
    broken = commit(repo, "broken yaml")
    await poke(port, bundle)
    failed = await watch.source_status(lambda s: s.commit == broken, 30, pipeline.logs)
    assert failed.phase is SourcePhase.FAILED, failed
    # the file as it is in the repository, with its line
    assert f"file://{repo}@{broken[:12]}:deploy/c.yaml:4: " in failed.message, failed
    assert "invalid YAML" in failed.message, failed
    assert f"revision {second[:12]} stays" in failed.message
    assert failed.revision == second
    await settle()
    assert watch.bundles[-1].revision == second, "a broken commit must not become the revision"
    assert writes_since(pipeline.api, before, {"configmaps"}) == 0
    assert (await kube.get(res, "c", namespace))["data"] == {"v": "1"}

    # commit 4 fixes c and touches only the README otherwise: what it renders equals commit 2
    write(repo, "deploy/c.yaml", CM.format(name="c", v=1))
    write(repo, "README.md", "docs only\n")
    docs_only = commit(repo, "fix c, docs")
    await poke(port, bundle)
    same = await watch.source_status(lambda s: s.commit == docs_only, 30, pipeline.logs)
    assert same.phase is SourcePhase.PUBLISHED, same
    assert "not republished" in same.message, same
    await settle()
    assert watch.bundles[-1].revision == second

    # the repository goes away for a while: Failed, nothing published; back: Published again
    hidden = repo.with_name("repo-moved")
    repo.rename(hidden)
    await poke(port, bundle)
    gone = await watch.source_status(
        lambda s: s.message.startswith("fetch failed: "), 30, pipeline.logs
    )
    assert gone.phase is SourcePhase.FAILED, gone
    hidden.rename(repo)
    await poke(port, bundle)
    back = await watch.source_status(
        lambda s: s.at is not None and gone.at is not None and s.at > gone.at, 30, pipeline.logs
    )
    assert back.phase is SourcePhase.PUBLISHED, back
    assert back.commit == docs_only, back
    assert watch.bundles[-1].revision == second

    # `status` shows where the revision came from and what the source did last
    code, text, err = await driftbus(
        pipeline.nats.client_url, "status", "--cluster", pipeline.cluster, "--bundle", bundle
    )
    assert code == 0, err
    assert f"from file://{repo}@{second}" in text, text
    assert "git source" in text, text
    assert "not republished" in text, text
