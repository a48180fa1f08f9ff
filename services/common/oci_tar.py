"""An artifact's tarball walked header by header as it decompresses, before ``tarfile`` reads it.

``tarfile`` reads a GNU long-name or pax header's data whole into memory, however large its
header says it is: a few hundred KB of gzip can ask for hundreds of MB. ``check_headers`` walks
the same headers first, holding at most one such header's data, and refuses one over
``MAX_HEADER_DATA``; it honours a pax ``size`` record as tarfile does (a member's real size),
so a pax header cannot hide what follows; and it stops a tarball that decompresses past the cap.
"""

from __future__ import annotations

import zlib
from typing import Final

from services.common.oci import OciError

MAX_HEADER_DATA: Final = 1024 * 1024
"""Bytes of a GNU long-name or pax header's data: a path or a few attributes, never more."""
_HEADER_TYPES: Final = frozenset(b"LKxg")  # GNU long name / link name, pax (extended, global)
_BLOCK: Final = 512


class _Inflated:
    """The decompressed bytes of a .tar.gz, taken or skipped in order, never all held."""

    def __init__(self, data: bytes, cap: int, what: str) -> None:
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._data = memoryview(data)
        self._at = 0
        self._buffer = b""
        self._seen = 0
        self._cap, self._what = cap, what

    def _more(self) -> bool:
        tail: bytes | memoryview = self._inflate.unconsumed_tail
        if not tail:
            if self._at >= len(self._data):
                return False
            tail, self._at = self._data[self._at : self._at + 65536], self._at + 65536
        chunk = self._inflate.decompress(tail, 262144)
        self._seen += len(chunk)
        if self._seen > self._cap:
            raise OciError(f"{self._what}: unpacks to over {self._cap:,} bytes")
        self._buffer += chunk
        return True

    def take(self, n: int) -> bytes:
        while len(self._buffer) < n and self._more():
            pass
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            if not self._buffer and not self._more():
                return
            cut = min(n, len(self._buffer))
            self._buffer, n = self._buffer[cut:], n - cut


def check_headers(data: bytes, what: str, cap: int) -> None:
    """OciError for a long-name or pax header over ``MAX_HEADER_DATA``, or a tarball that
    decompresses past ``cap`` bytes; zlib.error for one that is not gzip (the caller's)."""
    stream = _Inflated(data, cap, what)
    pax_size: int | None = None
    global_size: int | None = None
    while True:
        header = stream.take(_BLOCK)
        if len(header) < _BLOCK:
            return
        if header == b"\0" * _BLOCK:
            continue
        size = _header_size(header[124:136], what)
        if header[156] in _HEADER_TYPES:
            if size > MAX_HEADER_DATA:
                raise OciError(
                    f"{what}: a tar header of {size:,} bytes (a long name or pax header; at most "
                    f"{MAX_HEADER_DATA:,}): refused"
                )
            body = stream.take(_padded(size))[:size]
            if header[156] == ord("x"):
                pax_size = _pax_size(body, what)
            elif header[156] == ord("g"):
                global_size = _pax_size(body, what)
            continue
        # tarfile takes a pax size record over the header's own
        if pax_size is not None:
            size = pax_size
        elif global_size is not None:
            size = global_size
        pax_size = None
        stream.skip(_padded(size))


def _padded(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


def _header_size(field: bytes, what: str) -> int:
    """A tar header's size field: octal digits, or base-256 (first byte's high bit set)."""
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(field[1:], "big")
    digits = field.replace(b"\0", b" ").strip()
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise OciError(f"{what}: a tar header with an unreadable size") from None


def _pax_size(body: bytes, what: str) -> int | None:
    """The ``size`` record of pax header data (``<length> size=<n>\\n`` records), if any."""
    found: int | None = None
    for record in body.split(b"\n"):
        _, _, field = record.partition(b" ")
        key, eq, value = field.partition(b"=")
        if eq and key == b"size":
            try:
                found = int(value)
            except ValueError:
                raise OciError(f"{what}: a pax size record that is not a number") from None
            if found < 0:
                raise OciError(f"{what}: a pax size record below zero")
    return found
