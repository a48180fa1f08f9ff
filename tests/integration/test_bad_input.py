# ruff: noqa: E501 - the corpus tables read best one case per line
"""Bad input never crashes a service and never stops it consuming (issue 6, item 2).

A corpus of malformed and hostile bundles and messages goes to the running pipeline, one after
the other. Each must get a clear answer naming what and why — a Failed bundle status, a Failed
object status, or (for facts no user publishes) a log line — while the good objects of a
partially bad bundle are applied, and a good bundle published after all of it still converges.
CLI-side input (YAML syntax, alias bombs, non-object documents, duplicates, oversized objects)
is refused before publishing: tests/unit/test_load.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import orjson
import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch
from schemas.messages import BundlePhase, BundleStatus, ObjectPhase, ObjectStatus
from schemas.subjects import bundle_subject, encode_token
from services.common import bus
from services.kube import KubeClient, NotFound
from services.revisions.publish import store_manifests
from services.revisions.watch import decode_statuses

from ..conftest import unique_name

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]


def cm(ns: str, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"k": "v"},
        **extra,
    }


def bundle_doc(cluster: str, name: str, manifests: Any, **over: Any) -> dict[str, Any]:
    return {
        "schema": "driftbus.bundle/v1",
        "cluster": cluster,
        "bundle": name,
        "revision": "r1",
        "manifests": manifests,
        **over,
    }


# --- whole bundles refused: (id, build(cluster, ns, name) -> bytes, reason) --------------------

WHOLE: list[tuple[str, Any, str]] = [
    ("binary-garbage", lambda c, ns, b: b"\x00\xff\xfe\x01garbage", "not a valid Bundle"),
    ("empty-payload", lambda c, ns, b: b"", "not a valid Bundle"),
    ("json-array", lambda c, ns, b: b"[]", "Expected `object`"),
    ("json-string", lambda c, ns, b: b'"a bundle"', "Expected `object`"),
    ("json-null", lambda c, ns, b: b"null", "Expected `object`"),
    (
        "wrong-schema-version",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [], schema="driftbus.bundle/v2")),
        "schema",
    ),
    (
        "wrong-message-type",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [], schema="driftbus.server/v1")),
        "schema",
    ),
    (
        "missing-revision",
        lambda c, ns, b: orjson.dumps(
            {k: v for k, v in bundle_doc(c, b, []).items() if k != "revision"}
        ),
        "revision",
    ),
    (
        # (unknown fields are accepted on purpose: a newer producer may add some)
        "revision-not-a-string",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [], revision=7)),
        "Expected `str`",
    ),
    (
        "names-another-cluster",
        lambda c, ns, b: orjson.dumps(bundle_doc("cluster-b", b, [cm(ns, "x")])),
        "message names cluster-b/",
    ),
    (
        "names-another-bundle",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, "someone-else", [cm(ns, "x")])),
        "/someone-else but was published",
    ),
    (
        "manifests-not-a-list",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, "kind: ConfigMap")),
        "manifests",
    ),
    (
        "non-object-manifest",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [cm(ns, "ok"), 42])),
        "manifests[1]",
    ),
    (
        "invalid-utf8",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [cm(ns, "PLACEHOLDER")])).replace(
            b"PLACEHOLDER", b"\xed\xa0\x80"
        ),
        "not a valid Bundle",
    ),
    (
        "deeply-nested",
        lambda c, ns, b: orjson.dumps(bundle_doc(c, b, [])).replace(
            b'"manifests":[]', b'"manifests":[{"a":' + b"[" * 5000 + b"]" * 5000 + b"}]"
        ),
        "not a valid Bundle",
    ),
    (
        "negative-store-size",
        lambda c, ns, b: orjson.dumps(
            bundle_doc(
                c,
                b,
                [],
                manifests_ref={"bucket": "x", "name": "y", "sha": "a" * 64, "size": -1, "count": 0},
            )
        ),
        "size",
    ),
]

# --- bundles with one good ConfigMap and one bad object: (id, bad(ns) -> manifest, reason) --

PARTIAL: list[tuple[str, Any, str]] = [
    ("missing-apiversion", lambda ns, good: {"kind": "ConfigMap", "metadata": {"name": "x"}}, "apiVersion is missing"),
    ("missing-kind", lambda ns, good: {"apiVersion": "v1", "metadata": {"name": "x"}}, "kind is missing"),
    ("missing-metadata", lambda ns, good: {"apiVersion": "v1", "kind": "ConfigMap"}, "metadata.name is missing"),
    ("missing-name", lambda ns, good: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": ns}}, "metadata.name is missing"),
    ("apiversion-not-a-string", lambda ns, good: {"apiVersion": 1, "kind": "ConfigMap", "metadata": {"name": "x"}}, "apiVersion"),
    ("metadata-not-an-object", lambda ns, good: {"apiVersion": "v1", "kind": "ConfigMap", "metadata": "x"}, "metadata.name is missing"),
    ("labels-not-a-map", lambda ns, good: cm(ns, "bad") | {"metadata": {"name": "bad", "namespace": ns, "labels": "app=x"}}, "labels"),
    ("duplicate-object", lambda ns, good: cm(ns, good), "duplicates manifests[0]"),
    ("over-1-mib", lambda ns, good: cm(ns, "big", data={"blob": "x" * 1_100_000}), "over the 1,000,000-byte limit"),
    ("invalid-name", lambda ns, good: cm(ns, "Bad_Name"), "Invalid"),
    ("name-too-long", lambda ns, good: cm(ns, "n" * 300), "Invalid"),
    ("invalid-namespace", lambda ns, good: cm("Not_A_Namespace", "x"), "not a valid namespace name"),
    ("unknown-kind", lambda ns, good: {"apiVersion": "nope.example.com/v1", "kind": "Frobnicator", "metadata": {"name": "x", "namespace": ns}}, "not served"),
    ("wrong-field-type", lambda ns, good: {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": ns}, "spec": {"replicas": "three"}}, "expected numeric"),
    ("secret-invalid-base64", lambda ns, good: {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": ns}, "data": {"k": "not base64!"}}, "base64"),
    ("data-not-strings", lambda ns, good: cm(ns, "x") | {"data": {"k": {"nested": True}}}, "expected string"),
]  # fmt: skip

REFUSED_WHOLE = {
    "missing-apiversion",
    "missing-kind",
    "missing-metadata",
    "missing-name",
    "apiversion-not-a-string",
    "metadata-not-an-object",
    "labels-not-a-map",
    "duplicate-object",
    "over-1-mib",
    "invalid-namespace",
}
WAITS = {"unknown-kind"}

# --- facts on the services' own subjects: (id, subject(cluster, ns), payload) -----------------

KEY_TOKENS = "=.ConfigMap.ns.x"

FACTS: list[tuple[str, str, bytes]] = [
    ("server-garbage", f"driftbus.server.{{c}}.{KEY_TOKENS}", b"\x00garbage"),
    ("server-wrong-schema", f"driftbus.server.{{c}}.{KEY_TOKENS}", b'{"schema":"driftbus.server/v9"}'),
    ("applied-garbage", f"driftbus.applied.{{c}}.{KEY_TOKENS}", b"{}"),
    ("applied-bad-sha", f"driftbus.applied.{{c}}.{KEY_TOKENS}", b'{"schema":"driftbus.applied/v1","manifest_sha":"zz"}'),
    # batches (issue 44): garbage, and a batch naming another cluster's object on ours
    ("server-batch-garbage", "driftbus.server.{c}.batch.junk1", b'{"schema":"driftbus.server-facts/v1","events":[1]}'),
    ("server-batch-foreign", "driftbus.server.{c}.batch.junk2", b'{"schema":"driftbus.server-facts/v1","cluster":"elsewhere","events":[{"schema":"driftbus.server/v1","cluster":"elsewhere","key":{"group":"","kind":"ConfigMap","namespace":"ns","name":"x"},"resource_version":"1","server_sha":null,"deleted":true}]}'),
    ("applied-batch-garbage", "driftbus.applied.{c}.batch.junk3", b"\x00"),
    ("status-garbage", f"driftbus.status.{{c}}.=.b.object.{KEY_TOKENS}", b"[1,2,3]"),
    ("outcome-garbage", f"driftbus.outcome.{{c}}.{KEY_TOKENS}", b'{"schema":"driftbus.outcome/v1"}'),
    ("intent-garbage", f"driftbus.intent.{{c}}.{KEY_TOKENS}", b"\xff\xfe"),
    ("intent-wrong-schema", f"driftbus.intent.{{c}}.{KEY_TOKENS}", b'{"schema":"driftbus.apply-intent/v0"}'),
    # intent batches (issue 44): garbage, and a batch whose one intent is not an intent
    ("intent-batch-garbage", "driftbus.intent.{c}.batch.junk4", b"\x00\x01"),
    ("intent-batch-bad-item", "driftbus.intent.{c}.batch.junk5", b'{"schema":"driftbus.intent-batch/v1","cluster":"c","intents":[{"schema":"driftbus.delete-intent/v1"}]}'),
    ("bundle-on-malformed-subject", "driftbus.bundle.{c}", b"{}"),
]  # fmt: skip


async def test_bad_input_corpus(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, measured: Any
) -> None:
    assert len(WHOLE) + len(PARTIAL) + len(FACTS) >= 40
    c = pipeline.cluster
    js = pnc.jetstream()
    statuses: dict[str, list[BundleStatus]] = {}
    objects: list[ObjectStatus] = []

    async def on_status(msg: Any) -> None:
        for st in decode_statuses(msg.subject, msg.data):
            if isinstance(st, BundleStatus):
                statuses.setdefault(st.bundle, []).append(st)
            elif isinstance(st, ObjectStatus):
                objects.append(st)

    await pnc.subscribe(f"driftbus.status.{encode_token(c)}.>", cb=on_status)
    pipeline.start("watcher")
    pipeline.start("planner")
    pipeline.start("applier")
    await bus.ensure_streams(js)

    async def answer(bundle: str, within: float = 90, settled: bool = False) -> BundleStatus:
        """The first final answer; ``settled`` also waits until every object has an outcome
        (a bundle turns Failed as soon as one object fails, while others may still be applying)."""
        deadline = time.monotonic() + within
        while True:
            for st in reversed(statuses.get(bundle, [])):
                done = st.counts.applied + st.counts.failed == st.counts.total
                if st.phase in (BundlePhase.FAILED, BundlePhase.READY) and (done or not settled):
                    return st
            assert time.monotonic() < deadline, f"no answer for {bundle}\n{pipeline.logs()}"
            await asyncio.sleep(0.1)

    # 1. whole bundles refused, each with its reason
    for i, (case, build, reason) in enumerate(WHOLE):
        name = f"whole-{i}"
        await js.publish(bundle_subject(c, name), build(c, namespace, name))
        st = await answer(name)
        assert st.phase is BundlePhase.FAILED, case
        assert reason in st.message, f"{case}: {st.message}"
    # ... and the Object Store cases: a dangling reference, and stored bytes that do not match
    for name, data, reason in [
        ("dangling-ref", None, "does not exist"),
        ("tampered-ref", b'[{"kind":"ConfigMap"}]', "do not match their digest"),
    ]:
        ref = await store_manifests(js, c, name, "r1", [cm(namespace, "stored")])
        if data is None:
            ref = msgspec.structs.replace(ref, name="missing")
        else:
            store = await js.object_store(ref.bucket)
            await store.put(ref.name, data)
        doc = bundle_doc(c, name, [], manifests_ref=msgspec.to_builtins(ref))
        await js.publish(bundle_subject(c, name), orjson.dumps(doc))
        st = await answer(name)
        assert st.phase is BundlePhase.FAILED
        assert reason in st.message, f"{name}: {st.message}"

    # 2. bundles with one bad object. What the planner can tell is bad refuses the revision
    # whole (applying the rest would prune the bad one's live object); what only the API server
    # can tell fails that object, the good one applied; a kind not served waits for its CRD.
    res = await kube.discovery.resource("v1", "ConfigMap")
    for i, (case, bad, reason) in enumerate(PARTIAL):
        name = f"partial-{i}"
        good = f"good-{i}"
        await pipeline.publish(js, name, [cm(namespace, good), bad(namespace, good)])
        if case in WAITS:
            deadline = time.monotonic() + 60
            while not any(
                "Waiting" in f and reason in f
                for st in statuses.get(name, [])
                for f in st.failed_objects
            ):
                assert time.monotonic() < deadline, f"{case}: {statuses.get(name)}"
                await asyncio.sleep(0.1)
            assert statuses[name][-1].phase is BundlePhase.RECONCILING, case
            await kube.get(res, good, namespace)
            continue
        st = await answer(name, settled=case not in REFUSED_WHOLE)
        assert st.phase is BundlePhase.FAILED, case
        if case in REFUSED_WHOLE:
            assert "refused" in st.message, f"{case}: {st.message}"
            assert reason in st.message, f"{case}: {st.message}"
            with pytest.raises(NotFound):
                await kube.get(res, good, namespace)  # nothing of a refused revision applied
            continue
        assert st.counts.total == 2, f"{case}: {st}"
        assert st.counts.failed == 1, f"{case}: {st}"
        assert st.counts.applied == 1, f"{case}: {st}"
        assert any(reason in f for f in st.failed_objects), f"{case}: {st.failed_objects}"
        await kube.get(res, good, namespace)  # the good object was applied all the same

    # 3. garbage facts on the services' own subjects: logged, dropped, nothing stops
    for _case, subject, payload in FACTS:
        await js.publish(subject.format(c=encode_token(c)), payload)
    deadline = time.monotonic() + 30
    while not any(
        o.phase is ObjectPhase.FAILED and "unreadable intent" in o.message for o in objects
    ):
        assert time.monotonic() < deadline, (
            f"the applier never reported a bad intent\n{pipeline.logs()}"
        )
        await asyncio.sleep(0.1)

    # 4. after all of it: every service is alive and a good bundle converges
    watch = StatusWatch()
    await watch.start(pnc, c, "after")
    await pipeline.publish(js, "after", [cm(namespace, "after-1"), cm(namespace, "after-2")])
    await watch.ready("r1", 60, pipeline.logs)
    dead = [n for n, p in pipeline.procs.items() if not p.alive()]
    assert not dead, f"services died: {dead}\n{pipeline.logs()}"
    logs = pipeline.all_logs_text()
    assert "Traceback" not in logs, logs[-5000:]
    for kind in ("server", "applied", "outcome"):
        assert f"ignoring message on driftbus.{kind}." in logs, kind
    for junk in ("junk4", "junk5"):  # a bad intent batch is refused by name, nothing applied
        refused = f"refusing intent on driftbus.intent.{encode_token(c)}.batch.{junk}: not a valid"
        assert refused in logs, logs[-5000:]
    # no cluster's planner follows a subject without a bundle token: the claim round, which
    # lists the bundle subjects every heartbeat interval, reports it
    deadline = time.monotonic() + 10
    while "bundle on a malformed subject" not in logs:
        assert time.monotonic() < deadline, logs[-5000:]
        await asyncio.sleep(0.2)
        logs = pipeline.all_logs_text()
    with pytest.raises(NotFound):
        await kube.get(res, "x", namespace)  # nothing of a refused bundle was applied
    measured(
        f"bad input: {len(WHOLE) + 2} whole bundles refused, {len(PARTIAL)} partially bad "
        f"bundles ({len(REFUSED_WHOLE)} refused whole, {len(WAITS)} waiting for their kind, the "
        f"rest failing only the bad object), {len(FACTS)} garbage facts dropped; no service died"
    )


async def test_a_10000_object_bundle_converges(
    pipeline: Pipeline, pnc: NATS, namespace: str, measured: Any
) -> None:
    n = 10_000
    watch = StatusWatch()
    bundle = unique_name("huge")  # an earlier test's "huge" objects would be pruned meanwhile
    await watch.start(pnc, pipeline.cluster, bundle)
    pipeline.start_all(appliers=2)
    start = time.monotonic()
    manifests = [cm(namespace, f"h-{i}") for i in range(n)]
    await pipeline.publish(pnc.jetstream(), bundle, manifests)  # via the Object Store
    await watch.ready("r1", 480, pipeline.logs)
    measured(f"10,000-object bundle: Ready in {time.monotonic() - start:.1f}s")
