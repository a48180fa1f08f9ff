# ruff: noqa: E501 - the tables read best one case per line
"""The Object Store reader's pure decisions (``services.common.bus.objects``): what is refused
before a chunk is fetched, how metadata is read, and the bucket's limits. The reads themselves,
on a real nats-server: tests/integration/test_hostile_store.py."""

from __future__ import annotations

import base64
import hashlib

import orjson
import pytest

from services.common.bus import objects
from services.common.bus.objects import (
    ObjectCorrupt,
    ObjectError,
    ObjectMeta,
    ObjectMissing,
    ObjectTooLarge,
    StoreLimits,
    check_declared,
    meta_digest,
    parse_meta,
)

MIB = 1024 * 1024
DIGEST = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(b"x").digest()).decode()


def meta(size: int, chunks: int | None = None, **over: object) -> ObjectMeta:
    if chunks is None:
        chunks = max(1, -(-size // (128 * 1024)))
    return ObjectMeta(nuid="N1", size=size, chunks=chunks, digest=DIGEST, **over)  # type: ignore[arg-type]


# (case, limit, ref_size, meta or None, error type or None, text in the message)
DECLARED: list[tuple[str, int, int | None, ObjectMeta | None, type[ObjectError] | None, str]] = [
    ("ref under the limit", 4 * MIB, 3 * MIB, None, None, ""),
    ("ref at the limit", 4 * MIB, 4 * MIB, None, None, ""),
    ("ref over the limit", 4 * MIB, 4 * MIB + 1, None, ObjectTooLarge, "declares 4,194,305 bytes, over the 4,194,304-byte bundle limit"),
    ("2 GiB ref", 64 * MIB, 2 * 1024 * MIB, None, ObjectTooLarge, "refused unread"),
    ("no ref size, meta over", 4 * MIB, None, meta(5 * MIB), ObjectTooLarge, "is stored as 5,242,880 bytes"),
    ("ref lies small, meta over", 4 * MIB, 1024, meta(5 * MIB), ObjectTooLarge, "over the 4,194,304-byte"),
    ("ref and meta disagree", 4 * MIB, 1024, meta(2048), ObjectCorrupt, "is stored as 2,048 bytes but the reference says 1,024"),
    ("ref and meta agree", 4 * MIB, 2048, meta(2048), None, ""),
    ("empty object", 4 * MIB, 0, meta(0, 0), None, ""),
    ("tiny chunks", 4 * MIB, 3 * MIB, meta(3 * MIB, 3 * MIB), ObjectCorrupt, "3,145,728 chunks"),
    ("4 KiB chunks", 4 * MIB, MIB, meta(MIB, 256), None, ""),
]  # fmt: skip


@pytest.mark.parametrize(
    ("limit", "ref_size", "m", "error", "text"),
    [c[1:] for c in DECLARED],
    ids=[c[0] for c in DECLARED],
)
def test_check_declared(
    limit: int,
    ref_size: int | None,
    m: ObjectMeta | None,
    error: type[ObjectError] | None,
    text: str,
) -> None:
    if error is None:
        check_declared("b", "o", limit=limit, ref_size=ref_size, meta=m)
        return
    with pytest.raises(error) as exc:
        check_declared("b", "o", limit=limit, ref_size=ref_size, meta=m)
    message = str(exc.value)
    assert message.startswith("object store reference b/o ")
    assert text in message
    assert "\n" not in message
    if error is ObjectTooLarge:
        assert "DRIFTBUS_BUNDLE_MAX_BYTES" in message


GOOD_META = {
    "name": "o",
    "bucket": "b",
    "nuid": "AbC_-1",
    "size": 10,
    "chunks": 1,
    "digest": DIGEST,
}

# (case, metadata message, error type or None, text)
META: list[tuple[str, bytes, type[ObjectError] | None, str]] = [
    ("as nats-py writes it", orjson.dumps(GOOD_META | {"mtime": "x", "options": {"max_chunk_size": 131072}}), None, ""),
    ("not JSON", b"\x00\xff", ObjectCorrupt, "unreadable metadata"),
    ("not an object", b"[1]", ObjectCorrupt, "unreadable metadata"),
    ("negative size", orjson.dumps(GOOD_META | {"size": -1}), ObjectCorrupt, "size"),
    ("size a string", orjson.dumps(GOOD_META | {"size": "10"}), ObjectCorrupt, "size"),
    ("no nuid", orjson.dumps({k: v for k, v in GOOD_META.items() if k != "nuid"}), ObjectCorrupt, "nuid"),
    ("nuid escapes its subject", orjson.dumps(GOOD_META | {"nuid": "x.>"}), ObjectCorrupt, "nuid"),
    ("deleted", orjson.dumps(GOOD_META | {"deleted": True}), ObjectMissing, "does not exist"),
    ("a link", orjson.dumps(GOOD_META | {"options": {"link": {"bucket": "KV_other"}}}), ObjectCorrupt, "links are not followed"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "error", "text"), [c[1:] for c in META], ids=[c[0] for c in META])
def test_parse_meta(data: bytes, error: type[ObjectError] | None, text: str) -> None:
    if error is None:
        m = parse_meta("b", "o", data)
        assert (m.nuid, m.size, m.chunks) == ("AbC_-1", 10, 1)
        return
    with pytest.raises(error) as exc:
        parse_meta("b", "o", data)
    assert text in str(exc.value)


@pytest.mark.parametrize(
    ("digest", "ok"),
    [
        (DIGEST, True),
        (DIGEST.replace("SHA-256=", "sha-256="), True),
        ("", False),
        ("MD5=abc", False),
        ("SHA-256=!!!", False),
        ("SHA-256=" + base64.urlsafe_b64encode(b"short").decode(), False),
    ],
)
def test_meta_digest(digest: str, ok: bool) -> None:
    m = ObjectMeta(nuid="n", size=1, chunks=1, digest=digest)
    if ok:
        assert meta_digest("b", "o", m) == hashlib.sha256(b"x").digest()
    else:
        with pytest.raises(ObjectCorrupt):
            meta_digest("b", "o", m)


def test_limits_defaults_fit_the_corpus_with_room() -> None:
    """The largest install set of ../shared/corpus (argo-cd, 59 objects) is 633,660 bytes of
    JSON: the default bundle limit is a hundred times that."""
    assert StoreLimits().bundle_max_bytes >= 100 * 633_660
    assert StoreLimits().store_max_bytes >= 64 * StoreLimits().bundle_max_bytes


@pytest.mark.parametrize("field", ["bundle_max_bytes", "store_max_bytes"])
@pytest.mark.parametrize("value", [0, -1])
def test_limits_must_be_positive(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field.replace("_", "-")):
        StoreLimits(**{field: value})


def test_configure_sets_the_process_limits() -> None:
    before = objects.limits()
    try:
        objects.configure(StoreLimits(bundle_max_bytes=5))
        assert objects.limits().bundle_max_bytes == 5
    finally:
        objects.configure(before)


def test_bucket_config_is_bounded() -> None:
    cfg = objects.bucket_config("driftbus-bundles", replicas=3, max_bytes=123)
    assert cfg.name == "OBJ_driftbus-bundles"
    assert cfg.max_bytes == 123
    assert cfg.max_msg_size == objects.CHUNK_MAX
    assert cfg.num_replicas == 3
    assert str(cfg.discard) in ("new", "DiscardPolicy.NEW")
    assert cfg.subjects == ["$O.driftbus-bundles.C.>", "$O.driftbus-bundles.M.>"]
