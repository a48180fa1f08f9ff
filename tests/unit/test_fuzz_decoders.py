"""Every message decoder, fuzzed: whatever arrives on a subject, the only failure is WireError.

Three kinds of input: arbitrary bytes, arbitrary JSON documents, and valid messages with one
field replaced by an arbitrary JSON value (the likeliest real corruption: a producer of another
version). A decoder that returns must return the promised type; one that fails must say so with
``WireError`` (services catch exactly that, report the message and carry on).
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.codec import WireError, decode, encode
from schemas.messages import (
    AppliedEvent,
    ApplyIntent,
    Bundle,
    BundleCounts,
    BundlePhase,
    BundleStatus,
    DecisionAction,
    DecisionReason,
    DecisionRecord,
    DeleteIntent,
    Intent,
    ObjectPhase,
    ObjectStatus,
    ServerEvent,
)
from schemas.subjects import ObjectKey

pytestmark = pytest.mark.reliability

SHA = "ab" * 32
KEY = ObjectKey("apps", "Deployment", "shop", "web")
AT = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)

VALID: list[msgspec.Struct] = [
    Bundle(cluster="c", bundle="b", revision="r", manifests=[{"kind": "ConfigMap"}]),
    ServerEvent(cluster="c", key=KEY, resource_version="7", server_sha=SHA),
    AppliedEvent(
        cluster="c",
        key=KEY,
        bundle="b",
        revision="r",
        manifest_sha=SHA,
        apply_sha=SHA,
        resource_version="8",
        applied_at=AT,
    ),
    ApplyIntent(
        cluster="c",
        key=KEY,
        bundle="b",
        revision="r",
        manifest_sha=SHA,
        manifest={"apiVersion": "apps/v1"},
        reason="new",
    ),
    DeleteIntent(cluster="c", key=KEY, api_version="apps/v1", bundle="b", revision="r"),
    ObjectStatus(
        cluster="c", bundle="b", revision="r", key=KEY, phase=ObjectPhase.APPLIED, message="ok"
    ),
    BundleStatus(
        cluster="c", bundle="b", revision="r", phase=BundlePhase.READY, counts=BundleCounts()
    ),
    DecisionRecord(
        cluster="c",
        key=KEY,
        bundle="b",
        revision="r",
        action=DecisionAction.HIT,
        reason=DecisionReason.HIT,
    ),
]
DECODERS: list[Any] = [type(m) for m in VALID] + [Intent]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # stdlib: integers of any size, as a hostile producer sends


def _decodes_or_refuses(data: bytes, kind: Any) -> None:
    try:
        got = decode(data, kind)
    except WireError as exc:
        refusal = str(exc)
    else:
        expected = (ApplyIntent, DeleteIntent) if kind is Intent else kind
        assert isinstance(got, expected)
        return
    assert refusal.startswith("not a valid ")  # names the expected message and what is wrong


@pytest.mark.parametrize("kind", DECODERS, ids=lambda k: getattr(k, "__name__", "Intent"))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes(kind: Any, data: bytes) -> None:
    _decodes_or_refuses(data, kind)


@pytest.mark.parametrize("kind", DECODERS, ids=lambda k: getattr(k, "__name__", "Intent"))
@settings(max_examples=150)
@given(doc=json_values)
def test_arbitrary_json(kind: Any, doc: Any) -> None:
    _decodes_or_refuses(_json(doc), kind)


@pytest.mark.parametrize("message", VALID, ids=lambda m: type(m).__name__)
@settings(max_examples=200)
@given(data=st.data())
def test_one_field_corrupted(message: msgspec.Struct, data: st.DataObject) -> None:
    doc = json.loads(encode(message))
    field = data.draw(st.sampled_from(sorted(doc)))
    doc[field] = data.draw(json_values)
    _decodes_or_refuses(_json(doc), type(message))
    _decodes_or_refuses(_json(doc), Intent)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nesting far beyond any real message
        b'{"schema":"driftbus.bundle/v1","manifests":[' + b"{}," * 50_000 + b"{}]}",
        # deep nesting inside a free-form field, where the schema cannot stop it early
        b'{"schema":"driftbus.bundle/v1","cluster":"c","bundle":"b","revision":"r",'
        b'"manifests":[{"a":' + b"[" * 20_000 + b"]" * 20_000 + b"}]}",
        b"\xef\xbb\xbf{}",  # a byte-order mark
        '{"schema":"driftbus.bundle/v1","cluster":"\ud800"}'.encode("utf-8", "surrogatepass"),
    ],
    ids=[
        "deep-nesting",
        "many-manifests-missing-fields",
        "deep-in-manifest",
        "bom",
        "lone-surrogate",
    ],
)
def test_hostile_documents(data: bytes) -> None:
    for kind in DECODERS:
        _decodes_or_refuses(data, kind)
