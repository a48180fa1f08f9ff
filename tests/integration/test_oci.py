"""OCI sources on the real stack and the real CNCF distribution registry (issue 34): a directory
pushed as a Flux-format artifact is published by tag and by digest, the digest as the revision;
``source --oci --semver`` follows a newly pushed higher tag and ignores one out of range; a Helm
chart pushed by the real ``helm push`` is published and followed; a tampered blob or manifest is
refused; a registry behind basic auth refuses a wrong password and takes the right one (flags,
or a docker config.json)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import SourcePhase
from services.common import binaries
from services.inputs.oci import client as oci_client
from services.inputs.oci import reference as oci
from services.kube import KubeClient

from ..conftest import unique_name
from .registry import Registry, TokenService
from .test_trust_cli import ROOT, bundles_on_stream, driftbus, write

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  v: '{v}'\n"
CHART = "apiVersion: v2\nname: web\nversion: {version}\nappVersion: '{version}'\n"
CHART_CM = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-settings\n"
    "data:\n  chart: {{ .Chart.Version | quote }}\n  mode: {{ .Values.mode | quote }}\n"
)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry")).running() as r:
        yield r


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry-auth"), auth=True).running() as r:
        yield r


async def push(directory: Path, url: str, *args: str) -> tuple[int, str, str]:
    """``driftbus push`` (run as ``python -m services.cli.push`` until main lists it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.push",
        str(directory),
        url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DOCKER_CONFIG": "/nonexistent"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def pushed(directory: Path, url: str, *args: str) -> str:
    code, out, err = await push(directory, url, *args)
    assert code == 0, err
    digest = out.strip()
    assert digest.startswith("sha256:"), out
    assert len(digest) == 71, out
    return digest


def cm_dir(root: Path, **values: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, v in values.items():
        write(root, f"deploy/{name}.yaml", CM.format(name=name, v=v))
    return root


async def cm_data(kube: KubeClient, name: str, namespace: str) -> dict[str, str]:
    res = await kube.discovery.resource("v1", "ConfigMap")
    data: dict[str, str] = (await kube.get(res, name, namespace))["data"]
    return data


async def test_a_pushed_directory_is_published_by_tag_and_by_digest(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    registry: Registry,
) -> None:
    repo = f"oci://{registry.host}/apps/{unique_name('demo')}"
    one = await pushed(cm_dir(tmp_path / "v1", a="1", b="1"), f"{repo}:1.0.0", "--revision", "r1")
    two = await pushed(cm_dir(tmp_path / "v2", a="2", b="1"), f"{repo}:1.1.0")
    assert one != two
    pipeline.start_all()
    bundle = unique_name("oci")
    common = ("--cluster", pipeline.cluster, "--bundle", bundle, "-n", namespace)

    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}:1.0.0", "--path", "deploy",
        *common, "--wait", "--timeout", "90",
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert await cm_data(kube, "a", namespace) == {"v": "1"}
    latest = (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1]
    assert latest.revision == one, latest
    assert latest.source == f"{repo}:1.0.0@{one} [origin: r1]", latest.source

    # by digest: the tag then only documents it; the revision is the digest all the same
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}@{two}", "--path", "deploy",
        *common, "--wait", "--timeout", "90",
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert await cm_data(kube, "a", namespace) == {"v": "2"}
    latest = (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1]
    assert (latest.revision, latest.source) == (two, f"{repo}@{two}")

    # the semver range picks the highest tag in it, once
    code, out, err = await driftbus(
        pipeline.nats.client_url, "plan", "--oci", repo, "--semver", "~1.0", "--path", "deploy",
        *common, "--exit-code", env={"KUBECONFIG": str(pipeline.stack.cluster.kubeconfig)},
    )  # fmt: skip
    assert code == 2, err + out  # 1.0.0 would change ConfigMap a back
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", repo, "--semver", "^2", *common
    )
    assert code == 1, err
    assert "no tag matches semver ^2" in err, err


async def test_source_follows_the_newest_tag_in_a_semver_range(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    registry: Registry,
) -> None:
    repo = f"oci://{registry.host}/apps/{unique_name('follow')}"
    first = await pushed(cm_dir(tmp_path / "a", s="1.0.0"), f"{repo}:1.0.0")
    await pushed(cm_dir(tmp_path / "z", s="0.9.0"), f"{repo}:0.9.0")  # below the range
    bundle = unique_name("oci")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    pipeline.start(
        "source", None, "--cluster", pipeline.cluster, "--bundle", bundle, "--oci", repo,
        "--semver", ">=1.0.0 <2.0.0", "--path", "deploy", "--namespace", namespace,
        "--interval", "1",
    )  # fmt: skip
    await watch.ready(first, 90, pipeline.logs)
    src = await watch.source_status(lambda s: s.commit == first, 30, pipeline.logs)
    assert src.phase is SourcePhase.PUBLISHED, src
    assert src.url == repo, src
    assert src.ref == "semver >=1.0.0 <2.0.0", src
    assert "published 1.0.0 at sha256:" in src.message, src

    higher = await pushed(cm_dir(tmp_path / "b", s="1.4.0"), f"{repo}:1.4.0")
    await watch.ready(higher, 60, pipeline.logs)
    assert await cm_data(kube, "s", namespace) == {"v": "1.4.0"}

    # 2.0.0 is out of the range; 1.3.0 is in it but lower: neither is published
    await pushed(cm_dir(tmp_path / "c", s="2.0.0"), f"{repo}:2.0.0")
    await pushed(cm_dir(tmp_path / "d", s="1.3.0"), f"{repo}:1.3.0")
    await asyncio.sleep(4)  # four polls
    assert watch.bundles[-1].revision == higher
    assert (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1].revision == higher
    assert await cm_data(kube, "s", namespace) == {"v": "1.4.0"}


def helm(*args: str, cwd: Path) -> str:
    env = {**os.environ, "HOME": str(cwd)}
    for var in ("HELM_CONFIG_HOME", "HELM_CACHE_HOME", "HELM_DATA_HOME"):
        env[var] = str(cwd / var.lower())
    res = subprocess.run(
        [str(binaries.require("helm")), *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    return res.stdout + res.stderr


def helm_push(tmp_path: Path, registry: Registry, version: str, mode: str) -> str:
    """A chart packaged and pushed by the real helm; the manifest digest helm reports."""
    work = tmp_path / f"chart-{version}"
    write(work, "web/Chart.yaml", CHART.format(version=version))
    write(work, "web/values.yaml", f"mode: {mode}\n")
    write(work, "web/templates/cm.yaml", CHART_CM)
    helm("package", "web", cwd=work)
    out = helm(
        "push", f"web-{version}.tgz", f"oci://{registry.host}/charts", "--plain-http", cwd=work
    )
    return next(w for w in out.split() if w.startswith("sha256:"))


async def test_a_helm_chart_pushed_by_helm_is_published_and_followed(
    pipeline: Pipeline,
    pnc: NATS,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
    registry: Registry,
) -> None:
    one = helm_push(tmp_path, registry, "1.0.0", "slow")
    chart = f"oci://{registry.host}/charts/web"
    pipeline.start_all()
    bundle = unique_name("chart")
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{chart}:1.0.0", "--cluster",
        pipeline.cluster, "--bundle", bundle, "-n", namespace, "--release", "shop",
        "--set", "mode=fast", "--wait", "--timeout", "90",
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert await cm_data(kube, "shop-settings", namespace) == {"chart": "1.0.0", "mode": "fast"}
    latest = (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1]
    assert latest.revision == one
    assert latest.source.startswith(f"{chart}:1.0.0@{one} [rendered: helm v4."), latest.source

    # followed: a new chart version in the range is rendered and published, 2.0.0 is not
    followed = unique_name("chart")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, followed)
    pipeline.start(
        "source", None, "--cluster", pipeline.cluster, "--bundle", followed, "--oci", chart,
        "--semver", "^1", "--namespace", namespace, "--release", "web", "--interval", "1",
    )  # fmt: skip
    await watch.ready(one, 90, pipeline.logs)
    assert await cm_data(kube, "web-settings", namespace) == {"chart": "1.0.0", "mode": "slow"}
    two = helm_push(tmp_path, registry, "1.1.0", "medium")
    await watch.ready(two, 60, pipeline.logs)
    assert await cm_data(kube, "web-settings", namespace) == {"chart": "1.1.0", "mode": "medium"}
    helm_push(tmp_path, registry, "2.0.0", "major")
    await asyncio.sleep(4)
    assert watch.bundles[-1].revision == two
    assert await cm_data(kube, "web-settings", namespace) == {"chart": "1.1.0", "mode": "medium"}


async def test_a_tampered_blob_or_manifest_is_refused(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path, registry: Registry
) -> None:
    repo = f"oci://{registry.host}/apps/{unique_name('tamper')}"
    digest = await pushed(cm_dir(tmp_path / "d", x="1"), f"{repo}:1.0.0")
    async with oci_client.RegistryClient(registry.host, oci.OciAccess()) as client:
        ref = oci.parse_reference(f"{repo}:1.0.0")
        manifest = json.loads((await client.manifest(ref)).body)
    layer = registry.blob_path(manifest["layers"][0]["digest"])
    data = bytearray(layer.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes
    layer.write_bytes(bytes(data))
    common = ("--cluster", pipeline.cluster, "--bundle", unique_name("t"), "-n", "default")
    for url in (f"{repo}:1.0.0", f"{repo}@{digest}"):
        code, _, err = await driftbus(pipeline.nats.client_url, "publish", "--oci", url, *common)
        assert code == 1, err
        assert "not the digest its manifest names: refused (tampered with or corrupted)" in err

    # a layer longer than its manifest says: refused before it is read to the end
    layer.write_bytes(bytes(data) + b"\0" * 100)
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}@{digest}", *common
    )
    assert code == 1, err
    assert f"bytes, over the {len(data):,}-byte limit" in err, err

    # the manifest itself changed under its digest: refused by digest and by tag
    stored = registry.blob_path(digest)
    doc = json.loads(stored.read_bytes())
    doc["annotations"]["org.opencontainers.image.source"] = "https://evil.example"
    stored.write_bytes(json.dumps(doc).encode())
    for url in (f"{repo}:1.0.0", f"{repo}@{digest}"):
        code, _, err = await driftbus(pipeline.nats.client_url, "publish", "--oci", url, *common)
        assert code == 1, err
        assert "hashes to sha256:" in err, err
        assert "refused (tampered with or corrupted)" in err, err


async def test_a_registry_with_basic_auth_takes_the_right_password_only(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path,
    auth_registry: Registry,
) -> None:  # fmt: skip
    reg = auth_registry
    repo = f"oci://{reg.host}/private/{unique_name('app')}"
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(reg.password + "\n")
    wrong.write_text("not-" + reg.password)
    directory = cm_dir(tmp_path / "d", p="1")

    code, _, err = await push(directory, f"{repo}:1.0.0")
    assert code == 1, err
    assert f"the registry {reg.host} asks for credentials" in err, err
    code, _, err = await push(
        directory, f"{repo}:1.0.0", "--oci-username", "docker", "--oci-password-file", str(wrong)
    )
    assert code == 1, err
    assert "refused the credentials of user 'docker' (401): wrong user or password" in err, err
    assert reg.password not in err
    digest = await pushed(
        directory, f"{repo}:1.0.0", "--oci-username", "docker", "--oci-password-file", str(right)
    )

    # read with a docker config.json, as `docker login` writes it
    config = tmp_path / "docker" / "config.json"
    auth = base64.b64encode(f"docker:{reg.password}".encode()).decode()
    write(config.parent, "config.json", json.dumps({"auths": {reg.host: {"auth": auth}}}))
    pipeline.start_all()
    bundle = unique_name("private")
    common = ("--cluster", pipeline.cluster, "--bundle", bundle, "-n", namespace)
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}:1.0.0", *common, "--wait",
        "--timeout", "90", env={"DOCKER_CONFIG": str(config.parent)},
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert await cm_data(kube, "p", namespace) == {"v": "1"}
    assert (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1].revision == digest

    # a wrong password on publish: refused, nothing published
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}:1.0.0", *common,
        "--oci-username", "docker", "--oci-password-file", str(wrong),
    )  # fmt: skip
    assert code == 1, err
    assert "refused the credentials of user 'docker'" in err, err

    # a source with the right password follows the repository
    creds = ("--oci-username", "docker", "--oci-password-file", str(right))
    other = await pushed(cm_dir(tmp_path / "e", q="1"), f"{repo}:2.0.0", *creds)
    watch = StatusWatch()
    followed = unique_name("private")
    await watch.start(pnc, pipeline.cluster, followed)
    pipeline.start(
        "source", None, "--cluster", pipeline.cluster, "--bundle", followed, "--oci", repo,
        "--tag", "2.0.0", "--namespace", namespace, *creds, "--interval", "1",
    )  # fmt: skip
    await watch.ready(other, 90, pipeline.logs)
    assert await cm_data(kube, "q", namespace) == {"v": "1"}


@pytest.fixture(scope="module")
def token_registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Registry, TokenService]]:
    work = tmp_path_factory.mktemp("registry-token")
    tokens = TokenService(work / "tokens", "robot", "r0bot-pass")
    tokens.start()
    r = Registry(work / "registry", token_realm=tokens.realm, jwks=tokens.jwks)
    try:
        r.start()
        yield r, tokens
    finally:
        r.stop()
        tokens.stop()


async def test_a_registry_asking_for_bearer_tokens_gets_them_from_its_realm(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path,
    token_registry: tuple[Registry, TokenService],
) -> None:  # fmt: skip
    reg, tokens = token_registry
    name = f"team/{unique_name('tok')}"
    repo = f"oci://{reg.host}/{name}"
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text("r0bot-pass")
    wrong.write_text("nope")
    directory = cm_dir(tmp_path / "d", t="1")
    creds = ("--oci-username", "robot", "--oci-password-file")

    digest = await pushed(directory, f"{repo}:1.0.0", *creds, str(right))
    assert ("robot", f"repository:{name}:pull,push") in tokens.requests, tokens.requests

    # a token the registry refuses (as an expired one) is asked for again, once
    tokens.spoil = 1
    await pushed(directory, f"{repo}:0.9.0", *creds, str(right))
    tokens.spoil = 10
    code, _, err = await push(directory, f"{repo}:0.9.1", *creds, str(right))
    assert code == 1, err
    assert f"the registry {reg.host} refused the token issued to user 'robot'" in err, err
    tokens.spoil = 0

    code, _, err = await push(directory, f"{repo}:1.0.1", *creds, str(wrong))
    assert code == 1, err
    assert f"the token service of {reg.host} refused user 'robot' (401)" in err, err
    code, _, err = await push(directory, f"{repo}:1.0.1")
    assert code == 1, err
    assert f"the token service of {reg.host} refused anonymous (401)" in err, err

    pipeline.start_all()
    bundle = unique_name("tok")
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", f"{repo}:1.0.0", "--cluster",
        pipeline.cluster, "--bundle", bundle, "-n", namespace, *creds, str(right), "--wait",
        "--timeout", "90",
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert ("robot", f"repository:{name}:pull") in tokens.requests, tokens.requests
    assert await cm_data(kube, "t", namespace) == {"v": "1"}
    assert (await bundles_on_stream(pnc, pipeline.cluster, bundle))[-1].revision == digest
