"""What each service does with the bytes it reads from the bus, fuzzed beyond the codec
(``test_fuzz_decoders.py``): the tenant policy in the KV bucket, status messages chosen by subject
(``status -f``, the status page, ``--wait``), shard claims and heartbeats, member heartbeats, the
"is ours newer" checks of the watcher and applier, the planner's in-flight check, stored bundle
manifests, subjects, and the status page's handlers.

Each target calls the service's own function on arbitrary bytes, arbitrary JSON (or YAML) and
valid messages with one value replaced, and asserts that only the exception the calling service
catches comes out (read at each call site, named per target), with a message saying what was
wrong. Each crash the fuzz found (``FOUND``) is fixed, and kept as a case that must now be
refused like any other bad input.

On demand, ``DRIFTBUS_FUZZ_EXAMPLES=20000`` runs every target that many examples (tests/fuzzing.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from typing import Any

import msgspec
import orjson
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from schemas.cli import ShardsDocument
from schemas.codec import WireError, applied_events, encode, server_events
from schemas.messages import (
    AppliedEvent,
    AppliedFacts,
    MemberHeartbeat,
    ServerEvent,
    ServerFacts,
)
from schemas.subjects import (
    ObjectKey,
    SubjectError,
    batch_subject,
    bundle_status_subject,
    control_subject,
    decision_batch_subject,
    object_rows_subject,
    object_status_subject,
    object_subject,
    parse_subject,
    rollback_subject,
    source_status_subject,
)
from schemas.tenants import Tenant, TenantPolicy
from services.cli.status import follow, shards
from services.clusters import members
from services.common.bus import SHARDS_BUCKET, ObjectError
from services.common.bus.objects import parse_meta
from services.core.lease import holder_of
from services.core.manifest import bundle_kinds
from services.planner.rule import facts as planner_facts
from services.planner.rule import messages
from services.planner.rule.decide import DELETE_INFLIGHT, Entry
from services.revisions import publish as bundles
from services.revisions.watch import decode_statuses
from services.stored import facts as stored_facts
from services.tenancy import policy as tenancy
from services.tenancy import store as policy
from services.tenancy.policy import PolicyError
from services.ui.server import StatusPage
from tests.fuzzing import DEADLINE, examples
from tests.unit.test_fuzz_decoders import KEY, SHA, VALID, as_json, json_values, mutated

pytestmark = pytest.mark.reliability

FUZZ = settings(
    max_examples=examples(200),
    deadline=DEADLINE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
APPLIED = next(m for m in VALID if isinstance(m, AppliedEvent))
SERVER = next(m for m in VALID if isinstance(m, ServerEvent))
FACTS = next(m for m in VALID if isinstance(m, ServerFacts))
REPORT = next(m for m in VALID if isinstance(m, AppliedFacts))
STATUS = [
    m
    for m in VALID
    if type(m).__name__ in ("BundleStatus", "ObjectStatus", "ObjectRows", "SourceStatus")
]
SUBJECTS = [
    bundle_status_subject("c", "b"),
    bundle_status_subject("c", "t.b"),
    object_status_subject("c", "b", KEY),
    object_rows_subject("c", "b", "x"),
    source_status_subject("c", "b"),
    control_subject("c", "t.b"),
    rollback_subject("c", "b"),
    object_subject("server", "c", KEY),
    decision_batch_subject("c", "4", "x"),
]


@dataclasses.dataclass
class Seq:
    stream: int = 7


@dataclasses.dataclass
class Meta:
    sequence: Seq = dataclasses.field(default_factory=Seq)


@dataclasses.dataclass
class Msg:
    """What the services read of a nats-py message."""

    subject: str
    data: bytes
    headers: dict[str, str] | None = None
    metadata: Meta = dataclasses.field(default_factory=Meta)


def payloads(valid: list[Any]) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, arbitrary JSON, or one of ``valid`` (JSON documents) with one value, at
    any depth, replaced."""

    @st.composite
    def corrupted(draw: st.DrawFn) -> bytes:
        return as_json(mutated(draw, json.loads(json.dumps(draw(st.sampled_from(valid))))))

    return st.binary(max_size=300) | json_values.map(as_json) | corrupted() | corrupted()


def subjects() -> st.SearchStrategy[str]:
    """The subjects the services read, real ones and whatever a publisher might use."""
    tokens = st.text(max_size=12) | st.sampled_from(["driftbus", "status", "*", ">", "", "%2E"])
    return (
        st.sampled_from(SUBJECTS)
        | st.text(max_size=60)
        | st.lists(tokens, max_size=9).map(".".join)
        | st.sampled_from(SUBJECTS).flatmap(
            lambda s: st.tuples(st.just(s), st.integers(0, len(s)), st.text(max_size=4)).map(
                lambda t: t[0][: t[1]] + t[2] + t[0][t[1] :]
            )
        )
    )


# --- crashes the fuzz found (all fixed): each stays a case its target must refuse cleanly -------


@dataclasses.dataclass(frozen=True)
class Found:
    """An input that crashed its target (``exception`` saying ``says``) until ``fix``."""

    target: str
    exception: type[BaseException]
    says: str
    example: Any
    fix: str


FOUND = [
    Found(
        "stored manifests",
        RecursionError,
        "maximum recursion depth",
        b"[" + b"[" * 5000 + b"]" * 5000 + b"]",
        "services/revisions/publish.py: load_manifests lets msgspec's RecursionError out (planner, "
        "watcher and page catch BundleError); catch it there as BundleError",
    ),
    Found(
        "stored manifests",
        orjson.JSONDecodeError,
        "not valid UTF-8",
        b'[{"a":"\xff"}]',
        "services/revisions/publish.py: StoredManifests decodes each element on read with orjson, "
        "whose JSONDecodeError (invalid UTF-8, nesting over 1024) reaches the watcher's "
        "bundle_kinds uncaught; raise BundleError from the element read (or validate at load)",
    ),
    Found(
        "tenants file",
        UnicodeEncodeError,
        "surrogates not allowed",
        '{"lockdown": true, "\\ud83d\\ude00": 1}',  # json.dumps's escapes of an emoji
        "services/tenancy/policy.py: load_policy's msgspec.convert raises UnicodeEncodeError on a "
        "string with a lone surrogate (YAML's \\uD83D escapes are not paired); catch it there "
        "as PolicyError, naming the key",
    ),
    Found(
        "tenants file",
        UnicodeEncodeError,
        "surrogates not allowed",
        '{"tenants": {"a": {"serviceAccount": "a/b", "clusters": ["\\ud800\\udc00"]}}}',
        "services/tenancy/policy.py: load_policy accepts a value with surrogates where nothing "
        "checks its characters (a clusters glob); dump_policy, which `driftbus tenants apply` "
        "stores it with, then raises UnicodeEncodeError; refuse any string with a surrogate in "
        "load_policy (text.encode('utf-8') after YAML's escapes) as PolicyError",
    ),
    Found(
        "resourceVersion",
        ValueError,
        "Exceeds the limit (4300 digits)",
        json.dumps(json.loads(encode(SERVER)) | {"resource_version": "9" * 5000}).encode(),
        "services/core/manifest.py: rv_int calls int() on any digit string; over 4300 digits it "
        "raises ValueError, out of the watcher's and applier's supersedes (inside newest.publish,"
        " no except: since issue 44, out of every reader's choice of the newer fact); count "
        "more than 20 digits as 0 like any other non-number",
    ),
    Found(
        "driftbus shards",
        TypeError,
        "argument must be str",
        b'{"planner":"p","at":5}',
        "services/cli/reads.py shards(): fromisoformat(non-str), a naive 'at' subtracted "
        "from an aware now, and a non-list 'clusters' raise TypeError; add TypeError to its "
        "except and "
        "treat a naive time as unreadable",
    ),
]


FOUND.append(
    Found(
        "status page",
        TypeError,
        "Integer exceeds 64-bit range",
        json.dumps(
            json.loads(encode(next(m for m in STATUS if type(m).__name__ == "BundleStatus")))
            | {"counts": {"total": 2**64}}
        ).encode(),
        "services/ui/server.py StatusPage._send: orjson.dumps raises TypeError on an integer "
        "over 64 bits, which msgspec decodes into BundleCounts (and ObjectStatus.attempts); the "
        "page's pump has no except, so its updates stop for good. Bound the ints in schemas/"
        "messages.py (Meta(le=2**63 - 1)) so the codec refuses them, or catch it in _on_status",
    )
)
FOUND += [
    Found("driftbus shards", TypeError, says, example, "the same")
    for says, example in [
        ("offset-naive and offset-aware", b'{"planner":"p","at":"2026-11-22T00:00:00"}'),
        ("object is not iterable", b'{"planner":"p","at":"2026-11-22T00:00:00Z","clusters":5}'),
    ]
]
FOUND += [
    Found(
        "object metadata",
        exception,
        says,
        example,
        "services/common/bus/objects.py parse_meta catches msgspec.DecodeError only: invalid "
        "UTF-8 in a string (UnicodeDecodeError) and nesting in 'options' (RecursionError) get "
        "out of read_object and load_manifests (callers catch ObjectError/BundleError); catch "
        "both there as ObjectCorrupt, as schemas/codec.py does",
    )
    for exception, says, example in [
        (UnicodeDecodeError, "can't decode byte", b'{"nuid":"a","digest":"\xff"}'),
        (
            RecursionError,
            "maximum recursion depth",
            b'{"nuid":"a","options":{"x":' + b"[" * 3000 + b"]" * 3000 + b"}}",
        ),
    ]
]
FOUND.append(
    Found(
        "tenants file",
        ValueError,
        "invalid literal for int()",
        "? 1E100",
        "services/core/kyaml.py _key: a complex mapping key ('? 1E100') reaches int('') and "
        "raises ValueError out of load_policy (and of the manifest loader); refuse it as "
        "kyaml.DecodeError",
    )
)


# --- subjects (control, rollback, status: parsed before a message is acted on) -------------------


@FUZZ
@given(subject=subjects())
def test_parse_subject(subject: str) -> None:
    """The planner's control and rollback handlers, the status decoders: SubjectError only."""
    try:
        parse_subject(subject)
    except SubjectError as exc:
        refusal = str(exc)
    else:
        return
    assert refusal


# --- status messages, chosen by subject -----------------------------------------------------------


def status_follow(subject: str, data: bytes) -> bool:
    """``decode_statuses`` (statuswatch, the page, ``status -f``) returns nothing for what it
    cannot read; ``status -f`` prints every one it can in each output (callers catch nothing)."""
    events = decode_statuses(subject, data)
    for output in ("text", "json", "yaml"):
        assert len(follow.status_lines(subject, data, output)) == len(events)
    return bool(events)


@FUZZ
@given(subject=subjects(), data=payloads([json.loads(encode(m)) for m in STATUS]))
def test_decode_status_and_status_follow(subject: str, data: bytes) -> None:
    status_follow(subject, data)


def status_page(kind: str, subject: str, data: bytes) -> None:
    """The page's three followers call these with no ``except`` around them: one exception
    would stop the page's updates for good."""
    page = StatusPage(js=None)  # type: ignore[arg-type]
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=100)
    page._clients[queue] = None
    handle = {"status": page._on_status, "decision": page._on_decision, "server": page._on_server}
    for _ in range(2):  # twice: the second finds the first's state
        handle[kind](Msg(subject, data))  # type: ignore[arg-type]
    page.state.stats()
    orjson.dumps(page.state.snapshot())


@FUZZ
@given(
    kind=st.sampled_from(["status", "decision", "server"]),
    subject=subjects(),
    data=payloads([json.loads(encode(m)) for m in VALID]),
)
def test_status_page_handlers(kind: str, subject: str, data: bytes) -> None:
    status_page(kind, subject, data)


# --- the tenant policy in the KV bucket, and the tenants file -------------------------------------

POLICY = TenantPolicy(
    lockdown=True,
    tenants={
        "team-a": Tenant(
            service_account="team-a/driftbus",
            namespaces=("team-a", "team-a-*"),
            default_namespace="team-a",
            clusters=("prod-*",),
        ),
        "team-b": Tenant(service_account="ops/b.sa", cluster_scoped=True),
    },
)
STORED = json.loads(tenancy.dump_policy(POLICY))


def refused_saying_why(exc: Exception, prefix: str) -> None:
    text = str(exc)
    assert text.startswith(prefix)
    assert len(text.strip()) > len(prefix)


def policy_entry(data: bytes, op: str | None = None) -> TenantPolicy | None:
    """The planner follows the bucket with ``policy_of`` and catches PolicyError only."""
    msg = Msg(policy.POLICY_SUBJECT, data, headers={"KV-Operation": op} if op else None)
    try:
        got = policy.policy_of(msg)  # type: ignore[arg-type]
    except PolicyError as exc:
        refused_saying_why(exc, "stored tenant policy: ")
        return None
    assert tenancy.decode_stored(tenancy.dump_policy(got)) == got  # what was taken is valid
    return got


@FUZZ
@given(data=payloads([STORED]), op=st.sampled_from([None, "PUT", "DEL", "PURGE"]))
def test_policy_of_kv_entry(data: bytes, op: str | None) -> None:
    policy_entry(data, op)


def _text(doc: Any, form: str) -> str:
    return json.dumps(doc) if form == "json" else yaml.safe_dump(doc, allow_unicode=True)


def tenants_file(text: str | bytes) -> TenantPolicy | None:
    """``driftbus tenants apply FILE`` reads it with ``load_policy`` and catches PolicyError only
    (its message names the file), then stores what it accepted with ``dump_policy``, which
    planners read back with ``decode_stored``."""
    try:
        got = tenancy.load_policy(text, "tenants.yaml")
        stored = tenancy.dump_policy(got)
    except PolicyError as exc:
        refused_saying_why(exc, "tenants.yaml:")
        return None
    assert tenancy.decode_stored(stored) == got
    return got


@FUZZ
@given(
    text=st.text(max_size=300)
    | st.binary(max_size=300)
    | st.builds(_text, json_values, st.sampled_from(["json", "yaml"]))
)
def test_load_policy_file(text: str | bytes) -> None:
    tenants_file(text)


@FUZZ
@given(data=st.data(), form=st.sampled_from(["json", "yaml"]))
def test_load_policy_mutated(data: st.DataObject, form: str) -> None:
    """A valid tenants file (the stored form is one) with one value replaced, as YAML or JSON."""
    tenants_file(_text(mutated(data.draw, json.loads(json.dumps(STORED))), form))


# --- shard claims and heartbeats (the shards KV bucket) -------------------------------------------

CLAIM = {"planner": "p-1", "at": "2026-11-22T11:59:00.000+00:00"}
HEARTBEAT = {"planner": "p-1", "clusters": ["c"], "ready": True, "at": CLAIM["at"]}


@FUZZ
@given(data=payloads([CLAIM, HEARTBEAT]) | st.none())
def test_claim_holder(data: bytes | None) -> None:
    """The planners' shard view and ``driftbus shards``: the holder, or None (unreadable)."""
    holder = holder_of(data, "planner")
    assert holder is None or isinstance(holder, str)


def shards_document(
    entries: list[tuple[str, bytes]],
) -> ShardsDocument | None:
    """``driftbus shards`` reads every entry of the bucket; a bad one is left out."""
    prefix = f"$KV.{SHARDS_BUCKET}."
    msgs = [Msg(f"{prefix}{kind}.p{i}", data) for i, (kind, data) in enumerate(entries)]
    return shards.shards_document(msgs, dt.datetime.now(dt.UTC))  # type: ignore[arg-type]


@FUZZ
@given(
    entries=st.lists(
        st.tuples(st.sampled_from(["planners", "clusters"]), payloads([CLAIM, HEARTBEAT])),
        max_size=3,
    )
)
def test_shards_document(entries: list[tuple[str, bytes]]) -> None:
    shards_document(entries)


# --- member heartbeats (watchers, appliers) -------------------------------------------------------

MEMBER = next(m for m in VALID if isinstance(m, MemberHeartbeat))


def member_heartbeat(data: bytes) -> MemberHeartbeat | None:
    """The planner's members loop and the CLI read heartbeats with ``heartbeat_of`` (WireError:
    treated as none) and judge them with ``serving``/``watcher_synced`` outside any try."""
    try:
        hb = members.heartbeat_of(data)
    except WireError as exc:
        refused_saying_why(exc, "not a valid MemberHeartbeat message: ")
        return None
    members.serving("c", {"watcher": hb, "applier": hb}, NOW)
    members.watcher_synced(hb, NOW)
    return hb


@FUZZ
@given(data=payloads([json.loads(encode(MEMBER))]))
@example(data=json.dumps(json.loads(encode(MEMBER)) | {"at": "2026-11-22T00:00:00"}).encode())
def test_member_heartbeat(data: bytes) -> None:
    member_heartbeat(data)


# --- "which fact is newer" (every reader of SERVER and APPLIED, batches or not) ------------------


def newer(data: bytes, rv: int, fact: AppliedEvent) -> None:
    """The readers' "which fact is newer": ``stored.facts.fold`` over what ``server_events``
    unpacks and the planner's ``facts.fold`` over what ``applied_events`` unpacks, in a batch
    or alone (the watcher's and the applier's compare-and-publish before issue 44): the facts
    read or the caller's WireError, whatever the message."""
    for subject in (object_subject("server", "c", KEY), batch_subject("server", "c", "x")):
        try:
            events = server_events(subject, data)
        except WireError:
            continue
        into: dict[ObjectKey, ServerEvent] = {}
        for ev in events:
            stored_facts.fold(into, ev)
            stored_facts.fold(into, msgspec.structs.replace(ev, resource_version=str(rv)))
        assert set(into) == {ev.key for ev in events}
    for subject in (object_subject("applied", "c", KEY), batch_subject("applied", "c", "x")):
        try:
            applied = applied_events(subject, data)
        except WireError:
            continue
        for ap in applied:
            entry = planner_facts.fold(Entry(ap.key), fact)
            entry = planner_facts.fold(entry, ap)
            assert entry.key == ap.key


@FUZZ
@given(
    data=payloads(
        [
            json.loads(encode(SERVER)),
            json.loads(encode(APPLIED)),
            json.loads(encode(FACTS)),
            json.loads(encode(REPORT)),
        ]
    ),
    rv=st.integers(0, 2**64),
    fact=st.sampled_from([APPLIED, msgspec.structs.replace(APPLIED, deleted=True)]),
)
def test_watcher_and_applier_supersedes(data: bytes, rv: int, fact: AppliedEvent) -> None:
    newer(data, rv, fact)


@FUZZ
@given(
    data=payloads([json.loads(encode(m)) for m in VALID if "Intent" in type(m).__name__])
    | st.none(),
    inflight=st.sampled_from([None, DELETE_INFLIGHT, bytes.fromhex(SHA)]),
)
def test_planner_is_inflight(data: bytes | None, inflight: bytes | None) -> None:
    """The planner's lost-intent check reads the queued intent; no ``except`` around it."""
    entry = msgspec.structs.replace(Entry(KEY), inflight=inflight)
    assert isinstance(messages.is_inflight(data, entry), bool)


# --- stored bundle manifests (the object store) ---------------------------------------------------

MANIFESTS = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}},
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}},
]


def stored_manifests(data: bytes) -> list[str] | None:
    """Planner, watcher and page read a stored bundle's bytes with ``load_manifests`` (whose
    reading of them is ``stored_manifests``) and catch BundleError (the planner ManifestError
    too): every element read, as the watcher's ``bundle_kinds`` and the planner's checks do."""
    try:
        manifests = bundles.stored_manifests(data, "bundle c/b@r")
        for i in range(len(manifests)):
            manifests[i]
        return bundle_kinds(manifests)
    except bundles.BundleError as exc:
        refused_saying_why(exc, "bundle c/b@r: ")
    return None


@FUZZ
@given(data=payloads([MANIFESTS]))
def test_stored_manifests(data: bytes) -> None:
    stored_manifests(data)


# --- object store metadata (read before a stored bundle's chunks) ---------------------------------

META = {
    "name": "b",
    "bucket": "B",
    "nuid": "N1a_b-2",
    "size": 10,
    "chunks": 1,
    "digest": "SHA-256=x",
}


def object_meta(data: bytes) -> None:
    """``read_object`` reads the metadata message with ``parse_meta``; ``load_manifests``
    catches ObjectError (and turns it into BundleError)."""
    try:
        parse_meta("B", "b", data)
    except ObjectError as exc:
        refused_saying_why(exc, "object store reference B/b ")


@FUZZ
@given(data=payloads([META, META | {"options": {"link": {"bucket": "B", "name": "c"}}}]))
def test_object_meta(data: bytes) -> None:
    object_meta(data)


# --- the harness reaches the code it fuzzes, and the known crashes are still there ---------------


def test_valid_inputs_are_read() -> None:
    """Each target, given the valid message it mutates, gets past refusing it: the fuzz really
    reaches the code behind each decoder."""
    assert all(status_follow(s, encode(m)) for m in STATUS for s in SUBJECTS[:5] if _fits(s, m))
    assert policy_entry(encode(POLICY)) == POLICY
    assert policy_entry(b"junk", "DEL") == TenantPolicy()
    assert tenants_file(yaml.safe_dump(STORED)) == POLICY
    assert holder_of(orjson.dumps(CLAIM), "planner") == "p-1"
    doc = shards_document(
        [("planners", orjson.dumps(HEARTBEAT)), ("clusters", orjson.dumps(CLAIM))]
    )
    assert doc is not None
    assert (len(doc.planners), len(doc.clusters)) == (1, 1)
    assert member_heartbeat(encode(MEMBER)) == MEMBER
    assert server_events(object_subject("server", "c", KEY), encode(SERVER)) == [SERVER]
    assert applied_events(object_subject("applied", "c", KEY), encode(APPLIED)) == [APPLIED]
    object_meta(orjson.dumps(META))
    assert parse_meta("B", "b", orjson.dumps(META)).size == 10
    assert stored_manifests(orjson.dumps(MANIFESTS)) == ["apps/v1/Deployment", "v1/ConfigMap"]
    status_page("status", bundle_status_subject("c", "b"), encode(STATUS[-2]))


_STATUS_OF = {
    "status.bundle": "BundleStatus",
    "status.object": "ObjectStatus",
    "status.rows": "ObjectRows",
    "status.source": "SourceStatus",
}


def _fits(subject: str, message: Any) -> bool:
    return _STATUS_OF.get(parse_subject(subject).family) == type(message).__name__


TARGETS: dict[str, Any] = {
    "stored manifests": lambda ex: stored_manifests(ex),
    "tenants file": lambda ex: tenants_file(ex),
    "resourceVersion": lambda ex: newer(ex, 1, APPLIED),
    "object metadata": lambda ex: object_meta(ex),
    "status page": lambda ex: status_page("status", bundle_status_subject("c", "b"), ex),
    "driftbus shards": lambda ex: shards_document([("planners", ex)]),
}


@pytest.mark.parametrize("found", FOUND, ids=lambda k: f"{k.target}:{k.exception.__name__}")
def test_a_crash_the_fuzz_found_is_refused_now(found: Found) -> None:
    """Each crashed its target (``found.exception``); now its target refuses it as it refuses
    any bad input (the caller's exception, with a message) or reads it: nothing else escapes."""
    TARGETS[found.target](found.example)
