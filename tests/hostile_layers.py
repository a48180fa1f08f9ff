"""Hostile OCI layers (gzipped tarballs) for the tests of the bounded layer reader
(``services.common.oci_layer``), shared by the unit tests and the black-box tests that push
them to a real registry.

``link_chain`` and ``path_max_chain`` are links that stay inside the artifact by their text but
lead out of it on disk; the second also defeats the ``data`` extraction filter of Pythons before
3.11.13 (CVE-2025-4517: ``os.path.realpath`` stops resolving past ``PATH_MAX``). The four
``header_*`` builders each hide a GNU long-name header of ``body`` bytes where a walk that only
skips member data would not look — the bypasses of the old header check (issue 41, item 3): a
few tens of KB of gzip that made tarfile allocate ``body`` bytes.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterable

COMPONENT = "d" * 247
STEPS = "abcdefghijklmnop"


def tgz(raw: bytes) -> bytes:
    return gzip.compress(raw, mtime=0)


def tar(entries: Iterable[tuple[str, str, str | bytes]]) -> bytes:
    """A pax tarball (uncompressed) of ``(name, kind, arg)``: kind ``dir``, ``sym`` (arg is the
    link target), ``link`` (a hard link) or ``file`` (arg is the content)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as out:
        for name, kind, arg in entries:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "dir" else 0o644
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                out.addfile(info)
            elif kind in ("sym", "link"):
                info.type = tarfile.SYMTYPE if kind == "sym" else tarfile.LNKTYPE
                info.linkname = str(arg)
                out.addfile(info)
            else:
                content = arg if isinstance(arg, bytes) else arg.encode()
                info.size = len(content)
                out.addfile(info, io.BytesIO(content))
    return raw.getvalue()


def link_chain(escaped: str = "pwned.txt") -> bytes:
    """``deep -> .``, then ``deep/deeper/s -> ../..`` — by its text one level down and two up,
    on disk ``deeper/s``, the directory above — then a file written through it."""
    return tgz(
        tar(
            [
                ("deep", "sym", "."),
                ("deeper", "dir", ""),
                ("deep/deeper/s", "sym", "../.."),
                (f"deeper/s/{escaped}", "file", b"written outside\n"),
            ]
        )
    )


def path_max_chain(escaped: str = "pwned.txt") -> bytes:
    """Sixteen directories of 247-character names reached through one-letter links
    (``a/b/…/p`` is ``d…/d…/…``, past PATH_MAX once resolved), a link there climbing back to the
    top (``x…x -> ../…/..``), and ``esc -> a/…/p/x…x/..``: by its text inside, on disk the
    directory above the artifact's. ``os.path.realpath`` gives up resolving past PATH_MAX, so the
    ``data`` filter of Python 3.11.7 passes ``esc/pwned.txt`` — written above the directory."""
    entries: list[tuple[str, str, str | bytes]] = []
    for i, letter in enumerate(STEPS):
        prefix = "".join(f"{s}/" for s in STEPS[:i])
        entries += [(prefix + COMPONENT, "dir", ""), (prefix + letter, "sym", COMPONENT)]
    deep, far = "/".join(STEPS), "x" * 200
    entries += [
        (f"{deep}/{far}", "sym", "/".join([".."] * len(STEPS))),
        ("esc", "sym", f"{deep}/{far}/.."),
        (f"esc/{escaped}", "file", b"written outside\n"),
    ]
    return tgz(tar(entries))


# --- the header bypasses ----------------------------------------------------------------------


def _longname(body: int) -> bytes:
    """A GNU long-name header saying ``body`` bytes follow, its body (one repeated byte) and a
    member it would name."""
    hdr = tarfile.TarInfo("././@LongLink")
    hdr.type = tarfile.GNUTYPE_LONGNAME
    hdr.size = body
    padded = (body + 511) // 512 * 512
    return hdr.tobuf(format=tarfile.GNU_FORMAT) + b"a" * body + b"\0" * (padded - body)


def _regular(name: str, size: int = 0) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _pax(records: dict[str, str], kind: bytes = tarfile.XHDTYPE) -> bytes:
    return tarfile.TarInfo._create_pax_generic_header(records, kind, "utf-8")  # type: ignore[attr-defined, no-any-return]


_END = b"\0" * 1024


def header_type_x(body: int) -> bytes:
    """A Solaris ``X`` header (tarfile reads it as pax, whole) of ``body`` bytes."""
    hdr = tarfile.TarInfo("X")
    hdr.type = b"X"
    hdr.size = body
    padded = (body + 511) // 512 * 512
    data = hdr.tobuf(format=tarfile.USTAR_FORMAT) + b"a" * body + b"\0" * (padded - body)
    return tgz(data + _regular("m.yaml") + _END)


def header_two_pax(body: int) -> bytes:
    """Two pax headers before one member: the inner says its data is the hidden long-name
    header, the outer (which tarfile applies last) that it has none."""
    hidden = _longname(body)
    return tgz(
        _pax({"size": "0"})
        + _pax({"size": str(len(hidden))})
        + _regular("m.yaml")
        + hidden
        + _regular("n.yaml")
        + _END
    )


def header_pax_newline(body: int) -> bytes:
    """One pax record whose value holds a newline and what reads as a ``size`` record."""
    hidden = _longname(body)
    value = f"m.yaml\n{len(str(len(hidden))) + 7} size={len(hidden)}"
    return tgz(_pax({"path": value}) + _regular("m.yaml") + hidden + _regular("n.yaml") + _END)


def header_directory_with_size(body: int) -> bytes:
    """A directory entry whose size covers the hidden header (tarfile reads no directory's
    data: it reads the hidden header next)."""
    hidden = _longname(body)
    hdr = tarfile.TarInfo("dir")
    hdr.type = tarfile.DIRTYPE
    hdr.size = len(hidden)
    return tgz(hdr.tobuf(format=tarfile.USTAR_FORMAT) + hidden + _regular("n.yaml") + _END)


HEADER_BYPASSES = {
    "type X": header_type_x,
    "two pax headers in a row": header_two_pax,
    "a newline in a pax value": header_pax_newline,
    "a directory with a size": header_directory_with_size,
}
