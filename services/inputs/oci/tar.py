"""The one reader of an OCI layer (a gzipped tarball): every header walked here, bounded, before
anything touches disk; then the layer written by ``extract`` — no ``tarfile`` involved.

Why not ``tarfile``: it reads a GNU long-name or pax header's data whole into memory, however
large its header says it is, and treats headers a separate walk does not (a Solaris ``X``, a pax
header after a pax header, a directory's size, a pax value with a newline): a 30 KB layer made it
allocate 250 MB (issue 41, item 3). Its ``data`` extraction filter judges links with
``os.path.realpath``, which on Pythons before 3.11.13 stops resolving past ``PATH_MAX``: a chain
of links passed it and wrote a file above the unpack directory (CVE-2025-4517; item 2). So the
format is parsed here (so no patched tarfile is needed: ``requires-python`` stays ``>=3.11``),
by rules short enough to read in one sitting:

* a header is 512 bytes, its checksum right, its magic ustar's (``ustar\\0`` ``00``) or GNU's;
* **only regular files and directories** are entries. A symbolic or hard link, a GNU long link
  name, a device, a FIFO, a sparse file, a Solaris ``X`` header and every unknown type are
  refused naming the member (``driftbus push``, ``flux push`` and ``helm push`` write none);
* a directory has no data (a size is refused); a file at most ``max_file_bytes``, all files at
  most ``bundle_max_bytes``, the entries at most ``4 × max_files`` (``limits``);
* a pax header (``x``) or GNU long name (``L``) applies to the one entry after it: its size is
  checked before its data is read (``MAX_HEADER_DATA``, ``MAX_PATH_BYTES``), a second one before
  that entry is refused, its records are parsed by their length (a newline inside a value is
  part of the value), and only ``path`` and ``size`` are taken (a ``GNU.sparse`` record is
  refused; ``linkpath`` only names a refused link; times, owners, xattrs are ignored). A global
  pax header (``g``, ``git archive``'s comment) is read the same way and may set none of them;
* a name is UTF-8 without control characters, relative, without ``..``; ``.`` and empty
  components are dropped (``./a.yaml`` is ``a.yaml``; ``./`` names the top and is skipped);
  each component at most ``MAX_NAME_BYTES``, the whole at most ``MAX_PATH_BYTES``;
* the decompressed stream is read in chunks, never held; it ends at the first zero block.

``extract`` walks the layer twice: once to check every entry (and that no path is given twice,
or as a file and a directory), writing nothing; then writing under ``dest`` with ``openat`` from
a directory descriptor, one component at a time, every open ``O_NOFOLLOW`` and every file
``O_EXCL`` — nothing it writes is a link, and nothing already there is followed or overwritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Final

from services.inputs.limits import InputLimits, setting_name
from services.inputs.oci.reference import OciError

MAX_HEADER_DATA: Final = 1024 * 1024
"""Bytes of one pax header's records: a path and a few attributes, never more."""
MAX_PATH_BYTES: Final = 1024
"""Bytes of an entry's path (UTF-8), well below PATH_MAX with any unpack directory before it."""
MAX_NAME_BYTES: Final = 255
"""Bytes of one component of a path (NAME_MAX)."""
_BLOCK: Final = 512
_CONTROL: Final = re.compile("[\x00-\x1f\x7f\ufffd]")  # control characters, or not UTF-8
_CHUNK: Final = 256 * 1024
_FILE_TYPES: Final = frozenset(b"0\x007")  # regular (and contiguous: a regular file too)
_REFUSED: Final = {
    ord("1"): "a hard link",
    ord("2"): "a symbolic link",
    ord("K"): "a link (a GNU long link name)",
    ord("3"): "a character device",
    ord("4"): "a block device",
    ord("6"): "a FIFO",
    ord("S"): "a sparse file",
    ord("X"): "a Solaris extended header",
}


@dataclasses.dataclass(frozen=True)
class Entry:
    """A file or directory of a layer: its path (normalised, relative) and size."""

    path: str
    is_dir: bool
    size: int


class _Gunzip:
    """A .tar.gz's decompressed bytes, read or skipped in order, never all held; concatenated
    gzip members are read as one stream (as gzip does)."""

    def __init__(self, data: bytes, what: str, cap: int) -> None:
        self._data, self._at, self._what = memoryview(data), 0, what
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._buffer = bytearray()
        self._seen, self._cap = 0, cap

    def _more(self) -> bool:
        while True:
            if self._inflate.eof:
                rest = self._inflate.unused_data
                if not rest.strip(b"\0") and self._at >= len(self._data):
                    return False
                self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                chunk = self._inflate.decompress(rest, _CHUNK)
            else:
                tail: bytes | memoryview = self._inflate.unconsumed_tail
                if not tail:
                    if self._at >= len(self._data):
                        return False
                    tail, self._at = self._data[self._at : self._at + 65536], self._at + 65536
                chunk = self._inflate.decompress(tail, _CHUNK)
            if chunk:
                self._seen += len(chunk)
                if self._seen > self._cap:
                    raise OciError(f"{self._what}: unpacks to over {self._cap:,} bytes: refused")
                self._buffer += chunk
                return True

    def read(self, n: int) -> bytes:
        """Exactly ``n`` bytes (fewer only at the end of the stream)."""
        while len(self._buffer) < n and self._more():
            pass
        out = bytes(self._buffer[:n])
        del self._buffer[:n]
        return out

    def exactly(self, n: int, where: str) -> bytes:
        out = self.read(n)
        if len(out) < n:
            raise OciError(f"{self._what}: {where}: the tarball ends early (truncated)")
        return out

    def chunks(self, n: int, where: str) -> Iterator[bytes]:
        """The next ``n`` bytes in pieces of at most ``_CHUNK``."""
        while n > 0:
            if not self._buffer and not self._more():
                raise OciError(f"{self._what}: {where}: the tarball ends early (truncated)")
            piece = bytes(self._buffer[: min(n, _CHUNK)])
            del self._buffer[: len(piece)]
            n -= len(piece)
            yield piece


def walk(data: bytes, limits: InputLimits, what: str) -> Iterator[tuple[Entry, Iterator[bytes]]]:
    """Each file and directory of the gzipped tarball ``data`` with its content (read it before
    asking for the next entry, or it is skipped); ``OciError`` naming the member for anything
    the rules above refuse, ``zlib.error`` for what is not gzip."""
    # every byte read is a header's (at most 8 × max_files of them, each bounded) or a file's
    # (bounded in all); the cap bounds their sum, so that many large pax headers cannot keep
    # the walk decompressing for minutes
    cap = limits.bundle_max_bytes + 8 * limits.max_files * 2 * _BLOCK + 2 * MAX_HEADER_DATA
    stream = _Gunzip(data, what, cap)
    pending: dict[str, str] = {}
    headers, count, total = 0, 0, 0
    while True:
        header = stream.read(_BLOCK)
        if len(header) < _BLOCK:
            if header or pending:
                raise OciError(f"{what}: the tarball ends early (truncated)")
            return
        if header == bytes(_BLOCK):
            if pending:
                raise OciError(f"{what}: an extended header with no entry after it")
            return
        headers += 1
        if headers > 8 * limits.max_files:
            raise OciError(
                f"{what}: over {8 * limits.max_files:,} tar headers ({setting_name('max_files')})"
            )
        kind, size = _check_header(header, what)
        if kind in (ord("x"), ord("g"), ord("L")):
            _extended(stream, kind, size, pending, what)
            continue
        name = _name(header, pending, what)
        if kind == 0 and name.endswith("/"):  # an old tar's directory
            kind = ord("5")
        if "size" in pending:
            size = int(pending["size"])
        link = pending.get("linkpath") or _text(header[157:257])
        pending.clear()
        where = f"{what}: {name[:200]!r}"
        if kind in _REFUSED:
            to = f" (to {link[:200]!r})" if link and kind in (ord("1"), ord("2")) else ""
            raise OciError(
                f"{where}: {_REFUSED[kind]}{to}: refused — an artifact holds regular files and "
                "directories only (driftbus, Flux and Helm write no links)"
            )
        if kind != ord("5") and kind not in _FILE_TYPES:
            raise OciError(f"{where}: a tar entry of type {chr(kind)!r}: refused (files only)")
        path = _normalised(name, where)
        count += 1
        if count > 4 * limits.max_files:
            raise OciError(
                f"{what}: over {4 * limits.max_files:,} members, four times the limit of "
                f"files per bundle ({setting_name('max_files')})"
            )
        if kind == ord("5"):
            if size:
                raise OciError(f"{where}: a directory entry with {size:,} bytes of data: refused")
            if path:
                yield Entry(path, True, 0), iter(())
            continue
        if not path:
            raise OciError(f"{where}: a file with no name: refused")
        if size > limits.max_file_bytes:
            raise OciError(
                f"{where}: {size:,} bytes, over the {limits.max_file_bytes:,}-byte limit "
                f"({setting_name('max_file_bytes')})"
            )
        total += size
        if total > limits.bundle_max_bytes:
            raise OciError(
                f"{what}: unpacks to over {limits.bundle_max_bytes:,} bytes "
                f"({setting_name('bundle_max_bytes')})"
            )
        content = stream.chunks(size, repr(path))
        yield Entry(path, False, size), content
        for _ in content:  # what the caller did not read
            pass
        stream.exactly(-size % _BLOCK, repr(path))


def _check_header(header: bytes, what: str) -> tuple[int, int]:
    """The type and size of a ustar or GNU header whose checksum is right."""
    magic = header[257:265]
    if magic not in (b"ustar\x0000", b"ustar  \x00"):
        raise OciError(f"{what}: a block that is not a ustar, pax or GNU tar header: refused")
    stored = _number(header[148:156], what)
    unsigned = 256 + sum(header[:148]) + sum(header[156:])  # the field itself read as spaces
    if stored != unsigned and stored != 256 + sum(struct.unpack_from("148b8x356b", header)):
        raise OciError(f"{what}: a tar header whose checksum is wrong: refused")
    return header[156], _number(header[124:136], what)


def _number(field: bytes, what: str) -> int:
    """A numeric header field: octal digits, or base-256 (first byte's high bit set)."""
    if field[:1] and field[0] & 0x80:
        if field[0] & 0x40:
            raise OciError(f"{what}: a tar header with a negative number: refused")
        return int.from_bytes(bytes([field[0] & 0x3F]) + field[1:], "big")
    digits = field.replace(b"\0", b" ").strip()
    if digits and not all(48 <= c <= 55 for c in digits):
        raise OciError(f"{what}: a tar header with an unreadable number: refused")
    return int(digits, 8) if digits else 0


def _extended(stream: _Gunzip, kind: int, size: int, pending: dict[str, str], what: str) -> None:
    """Read a pax (``x``, ``g``) or GNU long-name (``L``) header's data into ``pending``."""
    label = {ord("x"): "a pax header", ord("g"): "a global pax header"}.get(kind, "a long name")
    cap = MAX_PATH_BYTES + 1 if kind == ord("L") else MAX_HEADER_DATA
    if size > cap:
        raise OciError(f"{what}: {label} of {size:,} bytes (at most {cap:,}): refused")
    key = "long name" if kind == ord("L") else "pax"
    if (kind == ord("g") and pending) or key in pending:
        raise OciError(f"{what}: {label} after another before one entry: refused")
    body = stream.exactly(size + (-size % _BLOCK), label)[:size]
    if kind == ord("L"):
        pending[key] = _text(body.split(b"\0", 1)[0])
        return
    records = _pax_records(body, what)
    if kind == ord("g") and {"path", "size", "linkpath"} & records.keys():
        raise OciError(f"{what}: a global pax header setting a path, link or size: refused")
    pending[key] = ""
    for field, value in records.items():
        if field.startswith("GNU.sparse"):
            raise OciError(f"{what}: a pax record {field!r} (a sparse file): refused")
        if field == "size":
            if not (value.isascii() and value.isdigit() and len(value) <= 20):
                raise OciError(f"{what}: a pax size record that is not a number: refused")
            pending["size"] = str(int(value))
        elif field in ("path", "linkpath"):
            pending[field] = value
    if kind == ord("g"):
        pending.clear()


def _pax_records(body: bytes, what: str) -> dict[str, str]:
    """``<length> <key>=<value>\\n`` records, each read by its length."""
    out: dict[str, str] = {}
    at = 0
    while at < len(body):
        space = body.find(b" ", at, at + 12)
        digits = body[at:space] if space > at else b""
        if not digits.isdigit():
            raise OciError(f"{what}: a pax header record without its length: refused")
        end = at + int(digits)
        record = body[space + 1 : end]
        if end > len(body) or end <= space + 1 or body[end - 1 : end] != b"\n":
            raise OciError(f"{what}: a pax header record of the wrong length: refused")
        field, eq, value = record[:-1].partition(b"=")
        if not eq:
            raise OciError(f"{what}: a pax header record without '=': refused")
        out[_text(field)] = _text(value)
        at = end
    return out


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _name(header: bytes, pending: dict[str, str], what: str) -> str:
    """The entry's name: a pax path, else a GNU long name, else the header's (with ustar's
    prefix); refused unless it is UTF-8."""
    if "path" in pending:
        return pending["path"]
    if "long name" in pending:
        return pending["long name"]
    raw = header[:100].split(b"\0", 1)[0]
    prefix = header[345:500].split(b"\0", 1)[0] if header[257:263] == b"ustar\x00" else b""
    joined = prefix + b"/" + raw if prefix else raw
    try:
        return joined.decode()
    except UnicodeDecodeError:
        raise OciError(f"{what}: {joined[:200]!r}: a name that is not UTF-8: refused") from None


def _normalised(name: str, where: str) -> str:
    """``name`` relative and clean (``./a//b/`` is ``a/b``), or OciError saying why not."""
    if _CONTROL.search(name):
        raise OciError(f"{where}: a name with a control character or not UTF-8: refused")
    if name.startswith("/"):
        raise OciError(f"{where}: an absolute path: refused (out of the artifact)")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise OciError(f"{where}: a path with '..': refused (out of the artifact)")
    path = "/".join(parts)
    if len(path.encode()) > MAX_PATH_BYTES:
        raise OciError(f"{where}: a path over {MAX_PATH_BYTES:,} bytes: refused")
    if any(len(p.encode()) > MAX_NAME_BYTES for p in parts):
        raise OciError(f"{where}: a path component over {MAX_NAME_BYTES} bytes: refused")
    return path


def check(data: bytes, limits: InputLimits, what: str) -> list[Entry]:
    """Every entry of the layer, checked, nothing written: refused (``OciError``) if a path is
    given twice or both as a file and as a directory."""
    entries = [entry for entry, _ in walk(data, limits, what)]
    files: set[str] = set()
    dirs: set[str] = set()
    for e in entries:
        if not e.is_dir and e.path in files:
            raise OciError(f"{what}: {e.path[:200]!r}: given twice: refused")
        (dirs if e.is_dir else files).add(e.path)
        parts = e.path.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    if files & dirs:
        both = sorted(files & dirs)[0]
        raise OciError(f"{what}: {both[:200]!r}: both a file and a directory: refused")
    return entries


def extract(data: bytes, dest: str | os.PathLike[str], limits: InputLimits, what: str) -> None:
    """Check the layer (``check``), then write its files and directories under ``dest`` (an
    existing directory, empty): modes 0644 and 0755, owner and times the process's."""
    check(data, limits, what)
    top = os.open(dest, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for entry, content in walk(data, limits, what):
            parts = entry.path.split("/")
            parent = _directory(top, parts if entry.is_dir else parts[:-1])
            try:
                if not entry.is_dir:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                    fd = os.open(parts[-1], flags, 0o644, dir_fd=parent)
                    with os.fdopen(fd, "wb") as out:
                        for piece in content:
                            out.write(piece)
            finally:
                if parent != top:
                    os.close(parent)
    finally:
        os.close(top)


def _directory(top: int, parts: list[str]) -> int:
    """A descriptor of ``top/parts…``, each component made if missing, none followed if a link
    (the caller closes it unless it is ``top``)."""
    fd = top
    for part in parts:
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, 0o755, dir_fd=fd)
        try:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        finally:
            if fd != top:
                os.close(fd)
        fd = child
    return fd
