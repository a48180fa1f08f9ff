"""The wire contract: committed JSON Schemas match the Structs; decoding is strict and clear."""

from __future__ import annotations

import datetime as dt

import pytest

from schemas import generate
from schemas.codec import WireError, decode, encode
from schemas.messages import (
    MESSAGE_TYPES,
    ApplyIntent,
    Bundle,
    DeleteIntent,
    Intent,
    ServerEvent,
)
from schemas.subjects import ObjectKey

SHA = "a" * 64
KEY = ObjectKey("apps", "Deployment", "shop", "web")


def test_committed_json_schemas_match_the_structs() -> None:
    stale = generate.drift()
    assert not stale, f"regenerate with `python -m schemas.generate`: {stale}"


def test_every_message_type_has_a_versioned_schema_tag() -> None:
    for name, kind in MESSAGE_TYPES.items():
        tag = kind.__struct_config__.tag
        assert isinstance(tag, str)
        assert tag.startswith("driftbus."), name
        assert tag.endswith("/v1"), name


def test_bundle_round_trip() -> None:
    b = Bundle(
        cluster="c1",
        bundle="shop",
        revision="abc123",
        manifests=[{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}],
        published_at=dt.datetime(2026, 11, 22, tzinfo=dt.UTC),
    )
    wire = encode(b)
    assert b'"schema":"driftbus.bundle/v1"' in wire
    assert decode(wire, Bundle) == b


def test_tombstone_round_trip() -> None:
    ev = ServerEvent(cluster="c1", key=KEY, resource_version="7", server_sha=None, deleted=True)
    assert decode(encode(ev), ServerEvent) == ev


def test_intent_union_decodes_by_tag() -> None:
    apply = ApplyIntent(
        cluster="c1",
        key=KEY,
        bundle="shop",
        revision="r1",
        manifest_sha=SHA,
        manifest={"apiVersion": "apps/v1"},
        reason="new",
    )
    delete = DeleteIntent(
        cluster="c1", key=KEY, api_version="apps/v1", bundle="shop", revision="r2"
    )
    assert decode(encode(apply), Intent) == apply  # type: ignore[arg-type]
    assert decode(encode(delete), Intent) == delete  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("wire", "kind", "reason"),
    [
        (
            b'{"schema":"driftbus.bundle/v2","cluster":"c","bundle":"b","revision":"r"}',
            Bundle,
            "schema",
        ),
        (b'{"schema":"driftbus.server/v1","cluster":"c"}', Bundle, "schema"),
        (b"\x00\xffgarbage", Bundle, "malformed|invalid"),
        (
            b'{"schema":"driftbus.bundle/v1","cluster":"","bundle":"b","revision":"r"}',
            Bundle,
            "cluster",
        ),
        (
            b'{"schema":"driftbus.server/v1","cluster":"c","key":{"group":"","kind":"K",'
            b'"namespace":"","name":"n"},"resource_version":"1","server_sha":"XYZ"}',
            ServerEvent,
            "server_sha",
        ),
        (b"[]", ServerEvent, "Expected `object`"),
    ],
    ids=["wrong-version", "wrong-type", "binary-garbage", "empty-cluster", "bad-sha", "array"],
)
def test_bad_messages_are_refused_with_the_reason(wire: bytes, kind: type, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode(wire, kind)
