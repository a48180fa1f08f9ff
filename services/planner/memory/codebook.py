"""The desired manifests the planner holds, compressed against their own revision (pure).

The planner keeps each desired object's manifest (compact JSON) for the moment it needs it: an
intent for a drift correction, a resend, a write held back until its bundle may write, a prune
that reads a CRD's kind. At 100,000 objects those manifests were about half of what the planner
held (~530 bytes each of the `memory` benchmark's mix, beside its ~230-byte SHA entry).

The objects of one revision look alike (same kinds, labels, field names), so each is deflated
against a preset dictionary drawn from the revision itself: 15 % of its size for that mix, where
plain zlib gets 45 %. A primed compressor is copied per manifest, and a manifest is inflated
(~7 µs) only when it is read, which is rare. The copy is most of a pack's cost and grows with
zlib's state: a 16 KiB window and memory level 5 pack as small as the defaults (32 KiB, 8) for
those objects, in two thirds of the time (measured: 17.7 against 25.8 µs for the mix, 7.5
against 11.8 for ConfigMaps; a 4 KiB window packed the mix to 20 % instead of 13 %).

Reading them back from the BUNDLES stream or the Object Store instead would cost a fetch of the
whole revision (50 MB at 100,000 objects) and its checks again on every drift correction. A
small revision (under 128 KiB of manifests) is held as it is.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

WBITS = 14
"""zlib's window: 16 KiB (module doc)."""
MEM_LEVEL = 5
ZDICT_BYTES = 1 << WBITS
"""zlib uses at most the last window's worth of a preset dictionary."""
SMALL_REVISION = 128 * 1024
"""Bytes of manifests under which a revision is held as it is."""
SAMPLES = 48
"""Manifests drawn from the revision, evenly spread, to make its dictionary."""
LEVEL = 6


class Codebook:
    """A preset dictionary drawn from one revision's manifests.

    Each held manifest keeps its revision's book (≤ 16 KiB) alive; the primed compressor
    (~100 KiB of zlib state) lives only while the revision is taken in (``seal``)."""

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
        if sum(map(len, manifests)) < SMALL_REVISION:
            return None
        step = max(1, len(manifests) // SAMPLES)
        return cls(manifests[::step][:SAMPLES])

    def pack(self, manifest: bytes) -> bytes:
        if self._primed is None:
            self._primed = zlib.compressobj(
                LEVEL, zlib.DEFLATED, WBITS, MEM_LEVEL, zdict=self._zdict
            )
        c = self._primed.copy()
        packed: bytes = c.compress(manifest) + c.flush()
        return packed

    def seal(self) -> None:
        """The revision is taken in: nothing more is packed with this book."""
        self._primed = None

    def unpack(self, packed: bytes) -> bytes:
        d = zlib.decompressobj(WBITS, zdict=self._zdict)
        return d.decompress(packed) + d.flush()
