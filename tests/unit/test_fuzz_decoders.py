"""Every message decoder, fuzzed: whatever arrives on a subject, the only failure is WireError.

Each message type a service reads from the bus (``MESSAGE_TYPES``: bundle, control, rollback,
intents, facts, outcomes, statuses, decisions, heartbeats) gets three kinds of input: arbitrary
bytes, arbitrary JSON documents, and valid messages with one field, at any depth, replaced by an
arbitrary JSON value (the likeliest real corruption: a producer of another version). A decoder
that returns must return the promised type; one that fails must say so with ``WireError`` (the
services catch exactly that, report the message and carry on). What the services then do with
the bytes beyond decoding is fuzzed in ``test_fuzz_messages.py``.

On demand, ``DRIFTBUS_FUZZ_EXAMPLES=20000`` runs every target that many examples (tests/fuzzing.py).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.bundle import (
    BundleControl,
    ObjectStoreRef,
    PruneApproval,
    RollbackAnswer,
    RollbackRequest,
)
from schemas.codec import WireError, decode, encode
from schemas.decision import DecisionAction, DecisionReason, DecisionRecord, DecisionRecords
from schemas.fleet import FleetBundle, RolloutControl, RolloutEvent, RolloutPhase, RolloutSpec
from schemas.messages import (
    MESSAGE_TYPES,
    AppliedEvent,
    AppliedFacts,
    ApplyIntent,
    Bundle,
    BundleCounts,
    BundlePhase,
    BundleStatus,
    DeleteIntent,
    Intent,
    IntentBatch,
    KindScope,
    MemberHeartbeat,
    ObjectPhase,
    ObjectRows,
    ObjectStatus,
    OutcomeEvent,
    Queued,
    ServerEvent,
    ServerFacts,
    SourcePhase,
    SourceStatus,
)
from schemas.subjects import ObjectKey
from tests.fuzzing import DEADLINE, examples

pytestmark = pytest.mark.reliability

SHA = "ab" * 32
KEY = ObjectKey("apps", "Deployment", "shop", "web")
AT = dt.datetime(2026, 11, 22, tzinfo=dt.UTC)

APPLIED = AppliedEvent(
    cluster="c",
    key=KEY,
    bundle="b",
    revision="r",
    manifest_sha=SHA,
    apply_sha=SHA,
    resource_version="8",
    applied_at=AT,
)
VALID: list[msgspec.Struct] = [
    Bundle(cluster="c", bundle="b", revision="r", manifests=[{"kind": "ConfigMap"}]),
    BundleControl(cluster="c", bundle="b", suspended=True, reason="incident", at=AT),
    RollbackRequest(cluster="c", bundle="b", to="r1"),
    PruneApproval(cluster="c", bundle="b", revision="r1"),
    RollbackAnswer(ok=True, message="republished r1", revision="r1", history=["r1", "r2"]),
    ServerEvent(cluster="c", key=KEY, resource_version="7", server_sha=SHA, observed_at=AT),
    ServerFacts(
        cluster="c",
        events=[
            ServerEvent(cluster="c", key=KEY, resource_version="7", server_sha=SHA),
            ServerEvent(cluster="c", key=KEY, resource_version="9", server_sha=None, deleted=True),
        ],
        watcher="w1",
    ),
    APPLIED,
    AppliedFacts(cluster="c", events=[APPLIED, msgspec.structs.replace(APPLIED, deleted=True)]),
    ApplyIntent(
        cluster="c",
        key=KEY,
        bundle="t.b",
        revision="r",
        manifest_sha=SHA,
        manifest={"apiVersion": "apps/v1", "metadata": {"name": "web", "labels": {"a": "b"}}},
        reason="new",
        impersonate={"user": "system:serviceaccount:t:sa", "groups": ["g"]},  # type: ignore[arg-type]
    ),
    DeleteIntent(cluster="c", key=KEY, api_version="apps/v1", bundle="b", revision="r"),
    IntentBatch(
        cluster="c",
        intents=[
            ApplyIntent(
                cluster="c",
                key=KEY,
                bundle="b",
                revision="r",
                manifest_sha=SHA,
                manifest={"apiVersion": "apps/v1", "kind": "Deployment"},
                reason="new",
            )
        ],
        traces=[{"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}],
        planner="p1",
    ),
    OutcomeEvent(
        cluster="c", key=KEY, bundle="b", revision="r", manifest_sha=SHA, phase=ObjectPhase.FAILED
    ),
    ObjectStatus(
        cluster="c", bundle="b", revision="r", key=KEY, phase=ObjectPhase.APPLIED, message="ok"
    ),
    ObjectRows(
        cluster="c",
        bundle="b",
        rows=[
            ObjectStatus(cluster="c", bundle="b", revision="r", key=KEY, phase=ObjectPhase.FAILED)
        ],
        applier="a1",
    ),
    BundleStatus(
        cluster="c",
        bundle="b",
        revision="r",
        phase=BundlePhase.READY,
        counts=BundleCounts(total=3, applied=3),
        failed_objects=["x"],
        published_at=AT,
    ),
    SourceStatus(
        cluster="c", bundle="b", url="https://git", ref="refs/heads/main", phase=SourcePhase.FAILED
    ),
    DecisionRecord(
        cluster="c",
        key=KEY,
        bundle="b",
        revision="r",
        action=DecisionAction.HIT,
        reason=DecisionReason.HIT,
    ),
    DecisionRecords(
        cluster="c",
        records=[
            DecisionRecord(
                cluster="c",
                key=KEY,
                bundle="b",
                revision="r",
                action=DecisionAction.APPLY,
                reason=DecisionReason.NEW,
            )
        ],
        planner="p1",
    ),
    MemberHeartbeat(
        cluster="c",
        role="watcher",
        id="w1",
        at=AT,
        problems=["p"],
        scopes=[KindScope(group="example.com", kind="Widget", namespaced=True)],
    ),
]
VALID += [
    FleetBundle(
        bundle="t/web",
        revision="r2",
        selector="env in (prod),!canary",
        clusters=["a"],
        manifests_ref=ObjectStoreRef(bucket="b", name="_fleet/web/x", sha=SHA, size=9, count=1),
        kinds=["v1/ConfigMap"],
        rollout=RolloutSpec(steps=["env=canary", "10%"], bake=30, max_unavailable=2),
        published_at=AT,
    ),
    RolloutEvent(
        bundle="t/web",
        revision="r2",
        seq=3,
        event="halted",
        phase=RolloutPhase.HALTED,
        step=1,
        clusters=["a"],
        at=AT,
    ),
    RolloutControl(bundle="t/web", action="promote", revision="r2", at=AT),
]
DECODERS: list[Any] = [type(m) for m in VALID] + [Intent, Queued]


def _named(kind: Any) -> str:
    return getattr(kind, "__name__", "Intent")


def test_every_message_type_is_fuzzed() -> None:
    # a message type added to the registry without a valid example here would go unfuzzed
    assert set(MESSAGE_TYPES.values()) <= set(DECODERS)


TIMES = [
    "2026-11-22T00:00:00",  # no zone: a naive datetime does not compare with an aware one
    "2026-11-22 00:00:00.5",
    "0001-01-01T00:00:00+23:59",
    "9999-12-31T23:59:59-23:59",
    "2026-11-22",
]
STRINGS = ["9" * 5000, "", "\x00", "\u2028", "../..", "a" * 300, "*", "-1"]
NUMBERS = [-1, -(2**63), 2**64, 10**30, 1e308, -0.0, 0.5]
"""Values random generation rarely hits and that have broken decoders elsewhere: a
resourceVersion over int()'s 4300 digits, times without a zone, out-of-range numbers."""
INTERESTING = st.sampled_from(TIMES + STRINGS + NUMBERS)
_LOOKS_LIKE_TIME = re.compile(r"^\d{4}-\d\d-\d\d[T ]")


def hostile_like(value: Any) -> st.SearchStrategy[Any]:
    """Hostile values of ``value``'s own kind (a time for a time), else any of them."""
    if isinstance(value, str) and _LOOKS_LIKE_TIME.match(value):
        return st.sampled_from(TIMES)
    if isinstance(value, str):
        return st.sampled_from(STRINGS)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return st.sampled_from(NUMBERS)
    return INTERESTING


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | INTERESTING,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


def as_json(doc: Any) -> bytes:
    return json.dumps(doc).encode()  # stdlib: integers of any size, as a hostile producer sends


def mutated(draw: Callable[[st.SearchStrategy[Any]], Any], doc: Any) -> Any:
    """``doc`` (a JSON document) with the value at one path, at any depth, replaced by arbitrary
    JSON, half the time a hostile value of the same kind (the whole document when it has no
    path)."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            paths.append((*path, k))
            if isinstance(v, (dict, list)):
                walk(v, (*path, k))

    if isinstance(doc, (dict, list)):
        walk(doc, ())
    if not paths:
        return draw(json_values)
    path = draw(st.sampled_from(paths))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = draw(hostile_like(node[path[-1]]) | json_values)
    return doc


def _decodes_or_refuses(data: bytes, kind: Any) -> None:
    try:
        got = decode(data, kind)
    except WireError as exc:
        refusal = str(exc)
    else:
        expected = (ApplyIntent, DeleteIntent) if kind is Intent else kind
        assert isinstance(got, expected)
        return
    named = f"not a valid {getattr(kind, '__name__', None) or kind} message: "
    assert refusal.startswith(named)  # names the message expected…
    assert len(refusal) > len(named)  # …and what is wrong with this one


FUZZ = settings(
    max_examples=examples(100),
    deadline=DEADLINE,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("kind", DECODERS, ids=_named)
@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes(kind: Any, data: bytes) -> None:
    _decodes_or_refuses(data, kind)


@pytest.mark.parametrize("kind", DECODERS, ids=_named)
@FUZZ
@given(doc=json_values)
def test_arbitrary_json(kind: Any, doc: Any) -> None:
    _decodes_or_refuses(as_json(doc), kind)


@pytest.mark.parametrize("message", VALID, ids=lambda m: type(m).__name__)
@FUZZ
@given(data=st.data())
def test_one_field_corrupted(message: msgspec.Struct, data: st.DataObject) -> None:
    doc = mutated(data.draw, json.loads(encode(message)))
    _decodes_or_refuses(as_json(doc), type(message))
    _decodes_or_refuses(as_json(doc), Intent)


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
