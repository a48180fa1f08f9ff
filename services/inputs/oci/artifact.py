"""OCI artifacts in and out: ``driftbus push`` writes a directory as Flux does
(``flux push artifact``), ``publish --oci`` and ``source --oci`` read one back — a Flux artifact,
a Helm chart ``helm push`` stored, or a generic artifact of one tar+gzip layer (``oras push``,
what Argo CD's ``oci://`` source reads) — into manifests.

**Written** (``push``): an OCI image manifest whose config is ``{}`` of media type
``application/vnd.cncf.flux.config.v1+json`` and whose one layer, of media type
``application/vnd.cncf.flux.content.v1.tar+gzip``, is a gzipped tarball of the directory's
regular files (paths relative to it, owner 0, time 0, sorted: the same directory packs to the
same layer; no links); annotations ``org.opencontainers.image.source``, ``.revision`` and
``.created``.

**Read** (``pull``): the manifest (by digest, or the tag resolved to one, or the newest tag in a
semver range), then its content layer, each checked against its digest (``oci_client``): the
layer of the config's kind (Flux, Helm), else the one layer of an artifact whose layer is
``application/vnd.oci.image.layer.v1.tar+gzip`` or Argo CD's
``application/vnd.cncf.argoproj.argocd.content.v1.tar+gzip`` (any config). The layer is
unpacked into a temporary directory by ``unpack``, through the one bounded reader of a layer
(``oci_tar``): regular files and directories only (a link of any kind, a device, a FIFO is
refused naming it), no absolute name, no ``..``, bounded paths, headers, members
(``4 × max_files``), sizes (each within ``max_file_bytes``, all within ``bundle_max_bytes``:
``limits``), everything checked before anything is written. Then ``load_pulled`` reads it as
``publish DIR`` would (a kustomization rendered), or a chart with the Helm path of
``load.load_helm`` (release, namespace, values, sets). The bundle's revision is the manifest's
digest; its source ``oci://registry/repo:tag@sha256:…``, what rendered it and the origin the
artifact names (``[origin: SOURCE REVISION]``, its annotations).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import gzip
import io
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from services.common import binaries
from services.inputs.confine import ConfinementError, redacted, refuse_links_out
from services.inputs.documents import InputError, Loaded, Manifest
from services.inputs.limits import InputLimits, setting_name
from services.inputs.load import Locate, load_helm, load_paths
from services.inputs.oci.client import RegistryClient
from services.inputs.oci.reference import (
    ANNOTATION_CREATED,
    ANNOTATION_REVISION,
    ANNOTATION_SOURCE,
    ARGOCD_CONTENT,
    DOCKER_MANIFEST,
    FLUX_CONFIG,
    FLUX_CONTENT,
    HELM_CONFIG,
    HELM_CONTENT,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    OciAccess,
    OciError,
    Reference,
    check_digest,
    newest_matching,
)
from services.inputs.oci.tar import extract

KINDS = {FLUX_CONFIG: ("flux", FLUX_CONTENT), HELM_CONFIG: ("helm", HELM_CONTENT)}
GENERIC_CONTENT = (OCI_LAYER_GZIP, ARGOCD_CONTENT)


@dataclasses.dataclass(frozen=True)
class Pulled:
    """An artifact read and unpacked: where from (tag and digest), what it is, where it is."""

    ref: Reference
    kind: str
    """``flux`` (a tarball of manifests), ``helm`` (a chart) or ``oci`` (a generic artifact:
    one tar+gzip layer of manifests, as ``oras push`` writes and Argo CD reads)."""
    directory: Path
    annotations: dict[str, str]


@dataclasses.dataclass(frozen=True)
class ChartOptions:
    """How a chart is rendered: ``helm template RELEASE CHART`` (``load.load_helm``)."""

    release: str
    namespace: str = ""
    values: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()
    values_in_chart: bool = False
    """``values`` name files inside the chart (``source``, as for a chart in Git), not files
    of this machine (``publish``)."""


# --- resolving --------------------------------------------------------------------------------


async def resolve(client: RegistryClient, ref: Reference, semver: str = "") -> Reference:
    """``ref`` with a tag: the newest in ``semver`` when a range is given (``ref`` then names
    none). The digest is left to ``pull``, which reads the manifest."""
    if not semver:
        return ref
    if ref.tag or ref.digest:
        raise OciError(f"{ref}: give a tag, a digest or --semver, not several")
    try:
        tag = newest_matching(await client.tags(ref), semver)
    except ValueError as exc:
        raise OciError(f"not a semver range: {semver!r} ({exc})") from None
    if tag is None:
        raise OciError(f"{ref.base}: no tag matches semver {semver}")
    return ref.at(tag=tag)


async def pull(client: RegistryClient, ref: Reference, dest: Path, limits: InputLimits) -> Pulled:
    """The artifact ``ref`` names, verified and unpacked into ``dest`` (which must exist)."""
    fetched = await client.manifest(ref)
    where = ref.at(digest=fetched.digest)
    try:
        manifest: Any = orjson.loads(fetched.body)
    except orjson.JSONDecodeError:
        raise OciError(f"{where}: the manifest is not JSON") from None
    if not isinstance(manifest, dict):
        raise OciError(f"{where}: the manifest is not a JSON object")
    media = manifest.get("mediaType") or fetched.media_type
    if media not in (OCI_MANIFEST, DOCKER_MANIFEST):
        raise OciError(
            f"{where}: a {media or 'manifest of no media type'}, not an image manifest of a "
            "Flux, Helm or generic artifact (an image index is not read)"
        )
    config: dict[str, Any] = manifest.get("config") or {}
    if not isinstance(config, dict):
        raise OciError(f"{where}: the manifest's config is not an object")
    listed = manifest.get("layers") or []
    if not isinstance(listed, list):
        raise OciError(f"{where}: the manifest's layers are not a list")
    kind, content = KINDS.get(str(config.get("mediaType", "")), ("", ""))
    if kind:
        layers = [x for x in listed if isinstance(x, dict) and x.get("mediaType") == content]
        if len(layers) != 1:
            raise OciError(f"{where}: expected one {content} layer, found {len(layers)}")
    else:  # a generic artifact (oras push, Argo CD's oci:// source): one layer, tar+gzip
        kind, layers = "oci", [x for x in listed if isinstance(x, dict)]
        layer_media = str(layers[0].get("mediaType")) if len(layers) == 1 else ""
        if layer_media not in GENERIC_CONTENT:
            of = f" of type {layer_media!r}" if layer_media else ""
            raise OciError(
                f"{where}: config of media type {config.get('mediaType')!r}, "
                f"{len(layers)} layer(s){of}: neither "
                f"a Flux artifact ({FLUX_CONFIG}), a Helm chart ({HELM_CONFIG}) nor an artifact "
                f"of one layer of {' or '.join(GENERIC_CONTENT)}"
            )
    digest, size = str(layers[0].get("digest", "")), layers[0].get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise OciError(f"{where}: the content layer has no size")
    if size > limits.max_file_bytes:
        raise OciError(
            f"{where}: the content layer is {size:,} bytes, over the {limits.max_file_bytes:,}-"
            f"byte limit ({setting_name('max_file_bytes')})"
        )
    check_digest(digest, f"{where}: layer digest")
    data = await client.blob(where, digest, size, limit=limits.max_file_bytes)
    # off the event loop: the source service follows other bundles meanwhile
    await asyncio.to_thread(unpack, data, dest, limits, f"{where} (layer {digest[:19]})")
    annotations = manifest.get("annotations")
    notes = (
        {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {}
    )
    return Pulled(where, kind, dest, notes)


# --- the tarball ------------------------------------------------------------------------------


def unpack(data: bytes, dest: Path, limits: InputLimits, what: str) -> None:
    """Extract the gzipped tarball ``data`` into ``dest`` through the one bounded reader
    (``oci_tar``): every header is checked before anything is written, only regular files and
    directories are written, and a link, a path out of ``dest``, an oversized header or member
    refuses the whole layer (``OciError`` naming the member); nothing is written then."""
    try:
        extract(data, dest, limits, what)
    except zlib.error as exc:
        raise OciError(f"{what}: not a readable .tar.gz: {exc}") from None
    except OSError as exc:
        raise OciError(f"{what}: cannot unpack: {exc.strerror or exc}") from None


def pack(directory: Path) -> bytes:
    """The gzipped tarball of ``directory``'s regular files, reproducibly (sorted names,
    owner 0, time 0). Hidden files and directories are packed (Flux packs them too); a link
    leaving the directory is refused, one inside is packed as the file it names."""
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory")
    try:
        refuse_links_out(directory)
    except ConfinementError as exc:
        raise InputError(str(exc)) from None
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _regular_files(directory):
            info = tarfile.TarInfo(path.relative_to(directory).as_posix())
            content = path.read_bytes()
            info.size, info.mode, info.mtime = len(content), 0o644, 0
            tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), mtime=0)


def _regular_files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            yield path


# --- reading manifests out of what was pulled -------------------------------------------------


def load_pulled(
    pulled: Pulled,
    *,
    path: str = "",
    chart: ChartOptions,
    locate: Locate = binaries.require,
    limits: InputLimits | None = None,
    allow_remote_bases: bool = False,
) -> Loaded:
    """The manifests of an unpacked artifact: a Flux artifact's files under ``path`` read as
    ``publish DIR`` reads a directory; a chart (or a Flux artifact whose ``path`` holds a
    ``Chart.yaml``) rendered with ``chart``. Files are named ``oci://…@sha256:…:FILE``."""
    label = f"{pulled.ref}:"
    top = PurePosixPath(path.strip("/") or ".")
    if ".." in top.parts:
        raise InputError(f"--path {path!r}: must stay inside the artifact")
    root = pulled.directory / top
    if pulled.kind == "helm":
        charts = [p.parent for p in pulled.directory.glob("*/Chart.yaml")]
        if len(charts) != 1:
            raise OciError(f"{pulled.ref}: a Helm chart holds one chart directory")
        root = charts[0]
    elif not root.is_dir():
        raise InputError(f"{label}{top}: no such directory in the artifact (--path)")
    if (root / "Chart.yaml").is_file():
        loaded = load_helm(
            str(root),
            release=chart.release,
            namespace=chart.namespace,
            values=[str(root / v) if chart.values_in_chart else v for v in chart.values],
            sets=list(chart.sets),
            locate=locate,
            limits=limits,
        )
    else:
        loaded = load_paths(
            [str(root)], locate=locate, limits=limits, allow_remote_bases=allow_remote_bases
        )

    def named(text: str) -> str:
        return text.replace(f"{pulled.directory}/", label).replace(str(pulled.directory), label)

    rendered = named(loaded.source)
    source = str(pulled.ref)
    if " [rendered: " in rendered:
        source += rendered[rendered.index(" [rendered: ") :]
    origin = [
        redacted(pulled.annotations.get(key, ""))[:200]
        for key in (ANNOTATION_SOURCE, ANNOTATION_REVISION)
    ]
    if any(origin):  # where the artifact says it was built from (flux push --source/--revision)
        source += f" [origin: {' '.join(o for o in origin if o)}]"
    return Loaded(
        [Manifest(m.obj, named(m.where)) for m in loaded.manifests],
        revision=pulled.ref.digest,
        source=source,
        where=f"{label}{top}",
        files=loaded.files,
    )


async def fetch_and_load(
    ref: Reference,
    *,
    access: OciAccess,
    semver: str = "",
    path: str = "",
    chart: ChartOptions,
    locate: Locate = binaries.require,
    limits: InputLimits | None = None,
    allow_remote_bases: bool = False,
) -> Loaded:
    """``publish --oci``: resolve, pull into a temporary directory, read (``load_pulled``)."""
    limits = limits or InputLimits.from_env()
    with tempfile.TemporaryDirectory(prefix="driftbus-oci-") as tmp:
        async with RegistryClient(ref.registry, access) as client:
            pulled = await pull(client, await resolve(client, ref, semver), Path(tmp), limits)
        return await asyncio.to_thread(
            load_pulled,
            pulled,
            path=path,
            chart=chart,
            locate=locate,
            limits=limits,
            allow_remote_bases=allow_remote_bases,
        )


# --- writing ----------------------------------------------------------------------------------


async def push(
    directory: Path, ref: Reference, *, access: OciAccess, source: str = "", revision: str = ""
) -> str:
    """Write ``directory`` as a Flux artifact tagged ``ref.tag``; the manifest's digest."""
    layer = pack(directory)
    config = b"{}"
    annotations = {ANNOTATION_CREATED: dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if source:
        annotations[ANNOTATION_SOURCE] = source
    if revision:
        annotations[ANNOTATION_REVISION] = revision
    async with RegistryClient(ref.registry, access) as client:
        config_digest = await client.push_blob(ref, config)
        layer_digest = await client.push_blob(ref, layer)
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": FLUX_CONFIG, "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": FLUX_CONTENT, "digest": layer_digest, "size": len(layer)}],
            "annotations": annotations,
        }
        return await client.put_manifest(ref, orjson.dumps(manifest), OCI_MANIFEST)
