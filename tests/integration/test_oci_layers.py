"""Hostile and generic OCI layers through the real CNCF distribution registry and the real
``driftbus publish --oci`` (issue 41, items 2 and 3 and the generic-artifact "while there"):
a Flux-format artifact whose layer holds a chain of links is refused in one line naming the
link, with nothing written outside the unpack directory — also the chain that defeats Python
3.11.7's ``data`` filter past PATH_MAX (CVE-2025-4517); each of the four header tricks that hid
a long-name header from the old check is refused without the CLI's memory growing by the
header's size; an artifact of one plain tar+gzip layer (what ``oras push`` writes and Argo CD's
``oci://`` source reads) is published."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import SourcePhase
from services.inputs.oci import client as oci_client
from services.inputs.oci import reference as oci
from services.kube import KubeClient

from ..conftest import unique_name
from ..hostile_layers import HEADER_BYPASSES, link_chain, path_max_chain, tgz
from .registry import Registry
from .test_oci import cm_data
from .test_trust_cli import ROOT, driftbus

EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
GENERIC_LAYERS = [  # what Argo CD's oci:// source reads (its documentation, docs/user-guide/oci.md)
    "application/vnd.oci.image.layer.v1.tar+gzip",  # oras push's default
    "application/vnd.cncf.argoproj.argocd.content.v1.tar+gzip",  # Argo CD's own
]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with Registry(tmp_path_factory.mktemp("registry-layers")).running() as r:
        yield r


async def push_layer(
    registry: Registry,
    layer: bytes,
    *,
    config: str = oci.FLUX_CONFIG,
    media: str = oci.FLUX_CONTENT,
) -> str:
    """An artifact of one layer pushed as a registry client would; its ``oci://…:v1``."""
    url = f"oci://{registry.host}/apps/{unique_name('layer')}:v1"
    ref = oci.parse_reference(url)
    async with oci_client.RegistryClient(registry.host, oci.OciAccess()) as client:
        body = b"{}"
        config_digest = await client.push_blob(ref, body)
        layer_digest = await client.push_blob(ref, layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": oci.OCI_MANIFEST,
            "config": {"mediaType": config, "digest": config_digest, "size": len(body)},
            "layers": [{"mediaType": media, "digest": layer_digest, "size": len(layer)}],
            "annotations": {"org.opencontainers.image.title": "."},
        }
        await client.put_manifest(ref, orjson.dumps(manifest), oci.OCI_MANIFEST)
    return url


# the CLI with its peak resident memory (KiB) on the last line of standard error: VmHWM, this
# process image's own high-water mark (getrusage's maxrss keeps the forking parent's across exec)
_MEASURED = (
    "import atexit, runpy, sys\n"
    "def hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM:'):\n"
    "            print('maxrss-kib', line.split()[1], file=sys.stderr)\n"
    "atexit.register(hwm)\n"
    "sys.argv = ['driftbus', *sys.argv[1:]]\n"
    "runpy.run_module('services.cli.main', run_name='__main__', alter_sys=True)\n"
)


async def publish(nats_url: str, url: str, tmp: Path, *extra: str) -> tuple[int, str, int]:
    """``driftbus publish --oci URL --insecure`` with ``TMPDIR`` at ``tmp``: exit code,
    standard error (without the measurement) and peak memory in KiB."""
    await asyncio.to_thread(tmp.mkdir, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _MEASURED, "publish", "--oci", url, "--insecure",
        "--cluster", "c1", "--bundle", unique_name("b"), "-n", "default", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT), "NATS_URL": nats_url, "TMPDIR": str(tmp)},
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    lines = err.decode().rstrip("\n").split("\n")
    rss = int(lines[-1].split()[1]) if lines[-1].startswith("maxrss-kib ") else -1
    return proc.returncode, "\n".join(lines[:-1] if rss >= 0 else lines), rss


@pytest.mark.parametrize(
    ("build", "member"),
    [(link_chain, "deep"), (path_max_chain, "a")],
    ids=["link-chain", "past-PATH_MAX"],
)
async def test_a_chain_of_links_in_a_layer_is_refused_and_nothing_lands_outside(
    nats_url: str, tmp_path: Path, registry: Registry, build: object, member: str
) -> None:
    assert callable(build)
    url = await push_layer(registry, build())
    tmp = tmp_path / "tmp"  # publish unpacks into tmp/driftbus-oci-…: tmp is outside it
    code, err, _ = await publish(nats_url, url, tmp)
    assert "Traceback" not in err, err[-2000:]
    assert code == 1, err
    assert len(err.strip().splitlines()) == 1, err
    assert f"'{member}': a symbolic link" in err, err
    assert "refused" in err, err
    assert sorted(p.name for p in tmp.iterdir()) == [], "written outside the unpack directory"


async def test_the_source_service_refuses_the_chain_too_and_keeps_following(
    pipeline: Pipeline, pnc: NATS, tmp_path: Path, registry: Registry
) -> None:
    url = await push_layer(registry, path_max_chain())
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    pipeline.role_env["source"] = {"TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}  # this checkout
    bundle = unique_name("src")
    watch = StatusWatch()
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all()
    pipeline.start(
        "source", None, "--cluster", pipeline.cluster, "--bundle", bundle, "--oci", url,
        "--namespace", "default", "--interval", "1",
    )  # fmt: skip
    status = await watch.source_status(lambda s: s.phase is SourcePhase.FAILED, 90, pipeline.logs)
    assert "'a': a symbolic link" in status.message, status
    assert "refused" in status.message, status
    assert pipeline.procs["source"].alive(), pipeline.logs()
    # the source keeps its own directory in TMPDIR; the layer's is driftbus-oci-… beside it
    assert not [p for p in tmp.rglob("*") if p.name == "pwned.txt"], "written outside"


@pytest.mark.parametrize("bypass", list(HEADER_BYPASSES))
async def test_a_hidden_header_in_a_layer_is_refused_within_bounded_memory(
    nats_url: str, tmp_path: Path, registry: Registry, bypass: str
) -> None:
    plain = await push_layer(registry, tgz(b"\0" * 1024))  # an empty tarball: a baseline
    code, err, baseline = await publish(nats_url, plain, tmp_path / "t0")
    assert code == 1, err  # read, then refused: no manifests in it
    assert baseline > 0, err
    url = await push_layer(registry, HEADER_BYPASSES[bypass](31 * 2**20))
    code, err, peak = await publish(nats_url, url, tmp_path / "t1")
    assert "Traceback" not in err, err[-2000:]
    assert code == 1, err[:2000]
    grew = (peak - baseline) / 1024
    assert grew < 16, f"{bypass}: the CLI's peak memory grew {grew:.0f} MiB over a plain layer's"
    assert len(err) < 1000, err[:2000]
    assert len(err.strip().splitlines()) == 1, err
    assert "refused" in err, err


def _plain_tarball(root: str) -> bytes:
    """What ``tar czf - -C manifests .`` writes (GNU format, ``./`` names, directories)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
        for name in ("./", "./deploy/"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            out.addfile(info)
        text = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {root}\ndata:\n  v: '1'\n"
        info = tarfile.TarInfo(f"./deploy/{root}.yaml")
        info.size = len(text)
        out.addfile(info, io.BytesIO(text.encode()))
    return tgz(raw.getvalue())


@pytest.mark.parametrize("media", GENERIC_LAYERS)
async def test_a_generic_artifact_of_one_tar_gzip_layer_is_published(
    pipeline: Pipeline, kube: KubeClient, namespace: str, registry: Registry, media: str
) -> None:
    name = unique_name("generic")
    url = await push_layer(registry, _plain_tarball(name), config=EMPTY_CONFIG, media=media)
    pipeline.start_all()
    code, _, err = await driftbus(
        pipeline.nats.client_url, "publish", "--oci", url, "--path", "deploy",
        "--cluster", pipeline.cluster, "--bundle", unique_name("g"), "-n", namespace,
        "--wait", "--timeout", "90",
    )  # fmt: skip
    assert code == 0, err + pipeline.logs()
    assert await cm_data(kube, name, namespace) == {"v": "1"}
