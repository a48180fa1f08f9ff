"""OCI layers and manifests made to hurt the reader: decompression bombs hidden in tar headers
(a GNU long name, a pax size override) refused before they are read into memory, and a manifest
of the wrong shape refused as an ``OciError``, never a ``TypeError``. Each was found in the
review of issue 34 and failed before its mend."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from services.inputs.limits import InputLimits
from services.inputs.oci.artifact import unpack
from services.inputs.oci.reference import OciError

# --- OCI: a decompression bomb in a tar header ------------------------------------------------


def _longname_bomb(header_bytes: int) -> bytes:
    """A .tar.gz whose first member is a GNU long-name header ``header_bytes`` long: a few
    hundred KB on the wire."""
    hdr = tarfile.TarInfo("././@LongLink")
    hdr.type = tarfile.GNUTYPE_LONGNAME
    hdr.size = header_bytes
    return _gzipped(hdr.tobuf(format=tarfile.GNU_FORMAT), header_bytes, 1024)


def _gzipped(headers: bytes, header_bytes: int, trailer: int) -> bytes:
    """``headers``, then ``header_bytes`` of one repeated byte (a header's body: it
    compresses to almost nothing), then ``trailer`` zero bytes, gzipped."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as z:
        z.write(headers)
        chunk = b"a" * (1024 * 1024)
        for _ in range(header_bytes // len(chunk)):
            z.write(chunk)
        z.write(b"\0" * trailer)
    return out.getvalue()


def _peak_refusing(data: bytes, tmp_path: Path) -> int:
    """The peak memory (bytes) of an ``unpack`` of ``data`` that must be refused."""
    tracemalloc.start()
    try:
        with pytest.raises(OciError):
            unpack(data, tmp_path, InputLimits(), "oci://r/a@sha256:x (layer)")
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# found in review, mended in 602f3a5: oci_artifact.unpack lets tarfile read a GNU long-name (or
# pax) header of any size into memory before any limit is checked: a 300 KB layer allocates 300
# MB
def test_a_small_layer_cannot_make_unpack_allocate_hundreds_of_megabytes(tmp_path: Path) -> None:
    data = _longname_bomb(256 * 1024 * 1024)
    assert len(data) < 1024 * 1024
    peak = _peak_refusing(data, tmp_path)
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB for a {len(data):,}-byte layer"


# --- OCI: the header walk of 602f3a5 is bypassed by a pax size override ---------------------


def _pax(records: dict[str, str]) -> bytes:
    """A pax extended header (type x) with ``records``, padded to blocks."""
    body = b""
    for k, v in records.items():
        rec = f" {k}={v}\n".encode()
        width = next(w for w in range(1, 20) if len(str(len(rec) + w)) == w)
        body += str(len(rec) + width).encode() + rec
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = len(body)
    return header.tobuf(format=tarfile.USTAR_FORMAT) + body + b"\0" * (-len(body) % 512)


def _pax_hidden_bomb(header_bytes: int) -> bytes:
    """A member whose ustar size covers a GNU long-name header ``header_bytes`` long, while its
    pax record says size=0: tarfile reads the long-name header next, whole; a walk that skips
    by the ustar size never looks at it."""
    bomb = tarfile.TarInfo("././@LongLink")
    bomb.type = tarfile.GNUTYPE_LONGNAME
    bomb.size = header_bytes
    member = tarfile.TarInfo("a.yaml")
    member.size = 512 + (header_bytes + 511) // 512 * 512
    headers = (
        _pax({"size": "0"})
        + member.tobuf(format=tarfile.USTAR_FORMAT)
        + bomb.tobuf(format=tarfile.GNU_FORMAT)
    )
    return _gzipped(headers, header_bytes, 2048)


def test_a_pax_size_record_does_not_hide_a_huge_header(tmp_path: Path) -> None:
    data = _pax_hidden_bomb(150 * 1024 * 1024)
    assert len(data) < 1024 * 1024
    peak = _peak_refusing(data, tmp_path)
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB for a {len(data):,}-byte layer"


# --- OCI: a manifest of the wrong shape escapes as TypeError ------------------------------


# found in review, mended in 602f3a5: oci_artifact.pull iterates the manifest's layers and
# passes a layer's size unchecked: layers 5 or a size past 64 bits raise TypeError, not OciError
# (publish --oci prints a traceback; source logs one each poll)
@pytest.mark.parametrize(
    "layers",
    [5, [{"mediaType": "application/vnd.cncf.flux.content.v1.tar+gzip", "size": 10**30}]],
    ids=["layers-not-a-list", "size-past-64-bits"],
)
async def test_a_manifest_of_the_wrong_shape_is_an_oci_error(
    tmp_path: Path, layers: object
) -> None:
    from services.inputs.oci import artifact as oci_artifact
    from services.inputs.oci.client import Fetched
    from services.inputs.oci.reference import FLUX_CONFIG, OCI_MANIFEST, Reference

    for layer in layers if isinstance(layers, list) else ():
        layer["digest"] = "sha256:" + "b" * 64
    manifest = {"mediaType": OCI_MANIFEST, "config": {"mediaType": FLUX_CONFIG}, "layers": layers}

    class Registry:  # answers the manifest as a registry would; no blob is ever asked for
        async def manifest(self, ref: Reference) -> Fetched:
            return Fetched("sha256:" + "a" * 64, OCI_MANIFEST, json.dumps(manifest).encode())

        async def blob(self, *args: object, **kwargs: object) -> bytes:
            raise AssertionError("no blob is read for this manifest")

    with pytest.raises(OciError):
        await oci_artifact.pull(
            Registry(),  # type: ignore[arg-type]
            Reference("r.io", "a", "1"),
            tmp_path,
            InputLimits(),
        )
