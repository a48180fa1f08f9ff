"""The desired manifests the planner holds, compressed against their own revision (pure).

The planner keeps each desired object's manifest (compact JSON) for the moment it needs it: an
intent for a drift correction, a resend, a write held back until its bundle may write, a prune
that reads a CRD's kind. At 100,000 objects those manifests were about half of what the planner
held (~530 bytes each of the `memory` benchmark's mix, beside its ~230-byte SHA entry).

The objects of one revision look alike (same kinds, labels, field names), so each is deflated
against a preset dictionary drawn from the revision itself: 15 % of its size for that mix, where
plain zlib gets 45 %. A primed compressor is copied per manifest (~30 µs each), and a manifest is
inflated (~7 µs) only when it is read, which is rare. Reading them back from the BUNDLES stream
or the Object Store instead would cost a fetch of the whole revision (50 MB at 100,000 objects)
and its checks again on every drift correction. A small revision (under 128 KiB of manifests)
is held as it is.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

ZDICT_BYTES = 32 * 1024
"""zlib uses at most the last 32 KiB of a preset dictionary."""
SAMPLES = 48
"""Manifests drawn from the revision, evenly spread, to make its dictionary."""
LEVEL = 6


class Codebook:
    """A preset dictionary drawn from one revision's manifests.

    Each held manifest keeps its revision's book (≤ 32 KiB) alive; the primed compressor
    (~300 KiB of zlib state) lives only while the revision is taken in (``seal``)."""

    __slots__ = ("_primed", "_zdict")

    def __init__(self, samples: Sequence[bytes]) -> None:
        # zlib's dictionary is best with the likeliest strings last; any order works
        self._zdict = b"".join(samples)[-ZDICT_BYTES:] or b"{}"
        self._primed: Any = None

    @classmethod
    def of(cls, manifests: Sequence[bytes]) -> Codebook | None:
        """The codebook of a revision from its manifests (every kind of a mixed revision is
        usually among the samples); None for a revision too small to gain from one (its
        dictionary would be about as big as its manifests)."""
        if sum(map(len, manifests)) < 4 * ZDICT_BYTES:
            return None
        step = max(1, len(manifests) // SAMPLES)
        return cls(manifests[::step][:SAMPLES])

    def pack(self, manifest: bytes) -> bytes:
        if self._primed is None:
            self._primed = zlib.compressobj(LEVEL, zdict=self._zdict)
        c = self._primed.copy()
        packed: bytes = c.compress(manifest) + c.flush()
        return packed

    def seal(self) -> None:
        """The revision is taken in: nothing more is packed with this book."""
        self._primed = None

    def unpack(self, packed: bytes) -> bytes:
        d = zlib.decompressobj(zdict=self._zdict)
        return d.decompress(packed) + d.flush()
