"""The one bounded reader of an OCI layer (services/inputs/oci/tar.py, issue 41 items 2 and 3):
what real tools write is read, links and every header trick are refused naming the member,
before anything is written, within bounded memory."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.inputs.limits import InputLimits
from services.inputs.oci import tar as oci_tar
from services.inputs.oci.artifact import unpack
from services.inputs.oci.reference import OciError

from ..fuzzing import DEADLINE, examples
from ..hostile_layers import HEADER_BYPASSES, link_chain, path_max_chain, tar, tgz

LIMITS = InputLimits()
WHAT = "oci://r/a@sha256:x (layer)"


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _header(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, **pax: str) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.pax_headers = kind, size, dict(pax)
    return info.tobuf(format=tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT)


def _gnu(*entries: tuple[str, bytes | None]) -> bytes:
    """What ``tar czf x.tgz -C dir .`` writes (GNU format, ``./`` names, directories)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as out:
        for name, content in entries:
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                out.addfile(info)
            else:
                info.size = len(content)
                out.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue())


LONG = "/".join(["deploy"] + ["n" * 60] * 5) + "/cm.yaml"  # past ustar's 100 and 155


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_gnu(("./", None), ("./deploy/", None), ("./deploy/a.yaml", b"a: 1\n")),
         {"deploy/a.yaml": b"a: 1\n"}),
        (_gnu((LONG, b"x: 1\n")), {LONG: b"x: 1\n"}),  # a GNU long name
        (tgz(tar([(LONG, "file", b"x: 1\n")])), {LONG: b"x: 1\n"}),  # a pax path
        (tgz(_header("d/", tarfile.AREGTYPE) + _header("d/a.yaml", size=2) + b"a\n".ljust(512,
         b"\0") + bytes(1024)), {"d/a.yaml": b"a\n"}),  # an old tar's directory
        (tgz(tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
            {"comment": "2f0c1e…"}, tarfile.XGLTYPE, "utf-8") + _header("a.yaml", size=2)
            + b"a\n".ljust(512, b"\0") + bytes(1024)), {"a.yaml": b"a\n"}),  # git archive's
        (tgz(_header("a.yaml", size=2, mtime="1.5", **{"LIBARCHIVE.xattr.x": "eA=="})
             + b"a\n".ljust(512, b"\0") + bytes(1024)), {"a.yaml": b"a\n"}),  # macOS tar's
        (tgz(tar([("a.yaml", "file", b"a\n")])) + tgz(b""), {"a.yaml": b"a\n"}),  # two members
    ],
    ids=["gnu-dot-slash", "gnu-long-name", "pax-path", "old-directory", "global-pax-comment",
         "pax-xattrs", "concatenated-gzip"],
)  # fmt: skip
def test_what_real_tools_write_is_read(
    tmp_path: Path, data: bytes, expected: dict[str, bytes]
) -> None:
    unpack(data, tmp_path, LIMITS, WHAT)
    assert _files(tmp_path) == expected


def _gnu_longname_only() -> bytes:
    hdr = tarfile.TarInfo("././@LongLink")
    hdr.type, hdr.size = tarfile.GNUTYPE_LONGNAME, 6
    return hdr.tobuf(format=tarfile.GNU_FORMAT) + b"a.yaml".ljust(512, b"\0")


_PADDED_A = b"a\n".ljust(512, b"\0")
_END = bytes(1024)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (tgz(tar([("a/" + "b" * 256, "file", b"")])), "a path component over 255 bytes"),
        (tgz(tar([("/".join(["c" * 200] * 6), "file", b"")])),
         "a path over 1,024 bytes"),
        (tgz(tar([("a\nb.yaml", "file", b"")])), "a control character"),
        (tgz(_header("d", tarfile.DIRTYPE, size=512) + bytes(512) + _END),
         "'d/': a directory entry with 512 bytes of data: refused"),
        (tgz(tarfile.TarInfo._create_pax_generic_header(  # type: ignore[attr-defined]
            {"path": "x"}, tarfile.XGLTYPE, "utf-8") + _header("a") + _END),
         "a global pax header setting a path"),
        (tgz(_header("a", tarfile.SYMTYPE, linkpath="/etc") + _END),
         r"'a': a symbolic link \(to '/etc'\)"),
        (tgz(_header("a", size=0, **{"GNU.sparse.map": "0,1"}) + _END), "GNU.sparse.map"),
        (tgz(tar([("a.yaml", "file", b"1"), ("a.yaml", "file", b"2")])),
         "'a.yaml': given twice"),
        (tgz(tar([("a", "file", b"1"), ("a/b.yaml", "file", b"2")])),
         "'a': both a file and a directory"),
        (tgz(_header("a.yaml", size=2) + _PADDED_A[:100]), "ends early"),
        (tgz(_header("a.yaml", size=2)[:148] + b"0000000\0" + _header("a.yaml")[156:] + _END),
         "checksum is wrong"),
        (tgz(_header("v", b"V") + _END), "'v': a tar entry of type 'V': refused"),
        (tgz(_header("a", b"X", size=1) + _PADDED_A + _END), "'a': a Solaris extended header"),
        (tgz(tar([("a.yaml", "file", b"")]).replace(b"ustar", b"xxxxx")),
         "not a ustar, pax or GNU tar header"),
        (tgz(_gnu_longname_only() + _END), "no entry after it"),
    ],
    ids=["component", "path", "control-character", "directory-size", "global-path",
         "linkpath", "sparse", "twice", "file-and-directory", "truncated", "checksum",
         "volume-label", "type-X", "not-tar", "dangling-long-name"],
)  # fmt: skip
def test_a_layer_breaking_a_rule_is_refused_and_nothing_is_written(
    tmp_path: Path, data: bytes, error: str
) -> None:
    with pytest.raises(OciError, match=error):
        unpack(data, tmp_path, LIMITS, WHAT)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("build", "member"),
    [(link_chain, "deep"), (path_max_chain, "a")],
    ids=["link-chain", "past-PATH_MAX"],
)
def test_a_chain_of_links_is_refused_naming_its_first_link_and_nothing_lands_outside(
    tmp_path: Path, build: object, member: str
) -> None:
    dest = tmp_path / "unpack"
    dest.mkdir()
    assert callable(build)
    with pytest.raises(OciError, match=f"'{member}': a symbolic link .*: refused"):
        unpack(build(), dest, LIMITS, WHAT)
    assert sorted(os.listdir(tmp_path)) == ["unpack"]
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("bypass", list(HEADER_BYPASSES))
def test_a_hidden_header_is_refused_within_bounded_memory(tmp_path: Path, bypass: str) -> None:
    data = HEADER_BYPASSES[bypass](31 * 2**20)  # tarfile allocated 52 to 248 MiB for these
    assert len(data) < 64 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(OciError) as refused:
            unpack(data, tmp_path, LIMITS, WHAT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, f"{bypass}: peak {peak / 2**20:.0f} MiB for {len(data):,} bytes"
    assert len(str(refused.value)) < 400, str(refused.value)[:400]
    assert list(tmp_path.iterdir()) == []


def test_a_link_already_in_the_directory_is_not_followed(tmp_path: Path) -> None:
    outside, dest = tmp_path / "outside", tmp_path / "unpack"
    outside.mkdir()
    dest.mkdir()
    (dest / "deploy").symlink_to(outside)
    with pytest.raises(OciError, match="cannot unpack"):
        unpack(tgz(tar([("deploy/a.yaml", "file", b"a: 1\n")])), dest, LIMITS, WHAT)
    assert list(outside.iterdir()) == []


def test_the_check_writes_nothing_and_lists_what_would_be_written() -> None:
    data = tgz(tar([("d", "dir", ""), ("d/a.yaml", "file", b"a: 1\n")]))
    assert [(e.path, e.is_dir, e.size) for e in oci_tar.check(data, LIMITS, WHAT)] == [
        ("d", True, 0),
        ("d/a.yaml", False, 5),
    ]


_SEED = tar(
    [
        ("d", "dir", ""),
        ("d/a.yaml", "file", b"a: 1\n"),
        ("/".join(["p" * 90] * 3) + "/long.yaml", "file", b"b: 2\n"),  # a pax path
    ]
)


@settings(max_examples=examples(300), deadline=DEADLINE, suppress_health_check=list(HealthCheck))
@given(
    edits=st.lists(st.tuples(st.integers(0, len(_SEED) - 1), st.integers(0, 255)), max_size=8),
    cut=st.integers(0, len(_SEED)),
)
def test_fuzz_a_mangled_layer_is_read_or_refused_never_crashes(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, int]], cut: int
) -> None:
    raw = bytearray(_SEED)
    for at, value in edits:
        raw[at] = value
    for block in range(0, len(raw) - 511, 512):  # checksums made right: the parser is reached
        if raw[block + 257 : block + 262] == b"ustar":
            raw[block + 148 : block + 156] = b" " * 8
            raw[block + 148 : block + 155] = b"%06o\0" % sum(raw[block : block + 512])
    dest = tmp_path_factory.mktemp("fuzz")
    with contextlib.suppress(OciError):
        unpack(tgz(bytes(raw[: cut or None])), dest, LIMITS, WHAT)
    assert all(not p.is_symlink() for p in dest.rglob("*"))
