"""Manifests held compressed against their own revision: every one comes back byte for byte."""

from __future__ import annotations

import orjson
import pytest

from bench.stack import labelled, manifests
from services.planner.memory.codebook import Codebook

MIX = [orjson.dumps(m) for m in labelled(manifests(2_000))]
UNLIKE = orjson.dumps({"kind": "Unlike", "data": {"ü": "x" * 3000, "n": list(range(50))}})


@pytest.mark.parametrize(
    ("revision", "held"),
    [
        pytest.param(MIX, MIX, id="the-benchmark-mix"),
        pytest.param(MIX, [UNLIKE, b"", b"{}"], id="nothing-like-the-samples"),
        pytest.param([], [b'{"kind":"ConfigMap"}'], id="no-samples"),
        pytest.param([b""], [b'{"a":1}'], id="empty-samples"),
        pytest.param([UNLIKE] * 100, [UNLIKE], id="samples-over-the-dictionary-size"),
    ],
)
def test_every_manifest_comes_back_byte_for_byte(revision: list[bytes], held: list[bytes]) -> None:
    book = Codebook(revision)
    packed = [book.pack(m) for m in held]
    book.seal()  # the primed compressor goes; reading needs only the dictionary
    assert [book.unpack(p) for p in packed] == held


def test_a_small_revision_is_held_as_it_is() -> None:
    # its dictionary would be as big as its manifests
    assert Codebook.of(MIX[:50]) is None
    assert Codebook.of(MIX) is not None


def test_a_revision_of_alike_objects_is_held_in_under_a_quarter_of_its_size() -> None:
    # what the codebook is for (the memory benchmark's mix: ~15 %; plain zlib ~45 %)
    book = Codebook.of(MIX)
    assert book is not None
    packed = sum(len(book.pack(m)) for m in MIX)
    assert packed < 0.25 * sum(map(len, MIX))
