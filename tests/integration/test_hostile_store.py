"""A hostile Object Store object stalls nobody (issue 30, item 3).

Anyone who may publish a bundle may write to the Object Store. On the real stack (nats-server,
kube-apiserver, the services as processes), with the bundle limit lowered to 4 MiB:

* a reference declaring 24 MiB is refused before a byte of it is fetched (the planner's and the
  watcher's connections receive next to nothing: counted by nats-server's ``/connz``);
* an object whose metadata lies (it says 3 MiB, its chunks hold 24 MiB) is refused after at most
  the declared size plus one chunk;
* each refusal is the bundle's Failed status, one line naming the bundle, the reference and the
  reason (the limit); a good bundle published afterwards converges, and a restarted planner
  replays the refused ones without stalling on them;
* the bucket is created bounded, and a publish over the limit is refused before anything is
  stored; ``load_manifests`` (the one reader: planner, watcher, status page) reads the lying
  object with at most the limit plus a chunk crossing the wire.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import orjson
import pytest
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from harness.pipeline import Pipeline, StatusWatch
from schemas.codec import decode
from schemas.messages import Bundle, BundleOptions, BundlePhase, BundleStatus, ObjectStoreRef
from schemas.subjects import bundle_subject, encode_token
from services.common import bus
from services.revisions.publish import BundleError, load_manifests, publish_bundle

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(600)]

MIB = 1024 * 1024
LIMIT = 4 * MIB
STORED = 24 * MIB
LIE = 3 * MIB
CHUNK = 256 * 1024  # the bucket's largest message (bus.objects.CHUNK_MAX)
WIRE = 4 / 3  # a stream message get carries the chunk in base64


def cm(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": {"k": "v"},
    }


def hostile_payload() -> bytes:
    """24 MiB of a JSON array (of strings: no service would apply any of it)."""
    return orjson.dumps(["x" * (MIB - 16)] * (STORED // MIB))


async def put_raw(js: JetStreamContext, name: str, data: bytes) -> ObjectStoreRef:
    """Store ``data`` as a tenant could, past any driftbus check (nats-py's own put)."""
    store = await js.object_store(bus.OBJECT_STORE_BUCKET)
    await store.put(name, data)
    return ObjectStoreRef(
        bucket=bus.OBJECT_STORE_BUCKET,
        name=name,
        sha=hashlib.sha256(data).hexdigest(),
        size=len(data),
        count=1,
    )


async def forge_meta(js: JetStreamContext, name: str, size: int) -> None:
    """Rewrite ``name``'s metadata to declare ``size`` bytes (its chunks stay as they are)."""
    encoded = base64.urlsafe_b64encode(name.encode()).decode()
    subject = f"$O.{bus.OBJECT_STORE_BUCKET}.M.{encoded}"
    raw = await js.get_last_msg(f"OBJ_{bus.OBJECT_STORE_BUCKET}", subject)
    meta = json.loads(raw.data or b"{}")
    meta["size"] = size
    await js.publish(subject, json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"})


def peak_rss(pid: int) -> int:
    """The peak resident memory of process ``pid`` (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


async def sent_to(pipeline: Pipeline, role: str) -> int:
    """Bytes nats-server has sent to the connections of ``role`` (named driftbus-<role>…)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{pipeline.nats.monitor_url}/connz?limit=1024") as r,
    ):
        conns = (await r.json())["connections"]
    return sum(c["out_bytes"] for c in conns if c.get("name", "").startswith(f"driftbus-{role}"))


async def test_a_hostile_stored_bundle_stalls_nobody(
    pipeline: Pipeline, pnc: NATS, namespace: str, measured: Any
) -> None:
    pipeline.extra_env["DRIFTBUS_BUNDLE_MAX_BYTES"] = str(LIMIT)
    pipeline.extra_env["DRIFTBUS_OBJECT_STORE_MAX_BYTES"] = str(256 * MIB)
    # this process publishes with the harness, which manages the streams (and the bucket) too
    bus.objects.configure(bus.StoreLimits(bundle_max_bytes=LIMIT, store_max_bytes=256 * MIB))
    try:
        await _hostile(pipeline, pnc, namespace, measured)
    finally:
        bus.objects.configure(bus.StoreLimits())


async def _hostile(pipeline: Pipeline, pnc: NATS, namespace: str, measured: Any) -> None:
    c = pipeline.cluster
    js = pnc.jetstream()
    statuses: dict[str, list[BundleStatus]] = {}

    async def on_status(msg: Any) -> None:
        if msg.subject.endswith(".bundle"):
            st = decode(msg.data, BundleStatus)
            statuses.setdefault(st.bundle, []).append(st)

    await pnc.subscribe(f"driftbus.status.{encode_token(c)}.>", cb=on_status)
    pipeline.start_all()
    await bus.ensure_streams(js, manage=False)
    await asyncio.sleep(1.0)  # the planner makes the bucket just after the streams

    async def failed(bundle: str, since: float, within: float = 60) -> str:
        deadline = time.monotonic() + within
        while True:
            for st in statuses.get(bundle, []):
                if st.phase is BundlePhase.FAILED and (st.at is None or st.at.timestamp() >= since):
                    return st.message
            assert time.monotonic() < deadline, f"no Failed status for {bundle}\n{pipeline.logs()}"
            await asyncio.sleep(0.1)

    payload = hostile_payload()
    honest = await put_raw(js, f"{c}/too-big/honest", payload)
    liar = await put_raw(js, f"{c}/liar/lies", payload)
    await forge_meta(js, liar.name, LIE)
    liar = msgspec.structs.replace(liar, size=LIE)
    cases = {"too-big": honest, "liar": liar}

    async def publish_hostile() -> dict[str, str]:
        since = time.time() - 1
        before = {role: (await sent_to(pipeline, role)) for role in ("planner", "watcher")}
        for name, ref in cases.items():
            msg = Bundle(cluster=c, bundle=name, revision="r1", manifests_ref=ref)
            await js.publish(bundle_subject(c, name), msgspec.json.encode(msg))
        messages = {name: await failed(name, since) for name in cases}
        await asyncio.sleep(2.0)  # the watcher reads them too (their kinds are not stated)
        read = {role: (await sent_to(pipeline, role)) - n for role, n in before.items()}
        bound = (LIE + CHUNK) * WIRE + MIB  # + the bus's own traffic
        for role, n in read.items():
            assert n < bound, f"the {role} read {n:,} bytes of two hostile references"
        peak = peak_rss(pipeline.procs["planner"].pid) / MIB
        measured(
            f"hostile store: two hostile references cost the planner {read['planner']:,} "
            f"bytes from NATS, the watcher {read['watcher']:,}; planner peak RSS {peak:.0f} MiB"
        )
        return messages

    messages = await publish_hostile()
    too_big = messages["too-big"]
    assert "\n" not in too_big
    assert f"bundle {c}/too-big@r1" in too_big, too_big
    assert f"{bus.OBJECT_STORE_BUCKET}/{honest.name}" in too_big, too_big
    assert f"over the {LIMIT:,}-byte bundle limit" in too_big, too_big
    assert "refused unread" in too_big, too_big
    assert f"bundle {c}/liar@r1" in messages["liar"], messages["liar"]
    assert "do not match their digest" in messages["liar"], messages["liar"]

    # every other bundle carries on, and so does a restarted planner replaying the hostile ones
    watch = StatusWatch()
    await watch.start(pnc, c, "good")
    await pipeline.publish(js, "good", [cm(namespace, "good-1")])
    await watch.ready("r1", 60, pipeline.logs)
    pipeline.kill("planner")
    statuses.clear()
    started = time.monotonic()
    pipeline.start("planner")
    await pipeline.publish(js, "good", [cm(namespace, "good-2")], revision="r2")
    await watch.ready("r2", 60, pipeline.logs)
    measured(f"hostile store: a restarted planner served r2 in {time.monotonic() - started:.1f}s")
    assert "refused unread" in await failed("too-big", 0), "the refusal is replayed"
    messages = await publish_hostile()  # and refused again, within the same bound
    info = await js.stream_info(f"OBJ_{bus.OBJECT_STORE_BUCKET}")
    assert info.config.max_bytes == 256 * MIB, "the bucket is bounded by the setting"
    assert info.config.max_msg_size == CHUNK, "a chunk is bounded"
    assert "Traceback" not in pipeline.all_logs_text()
    dead = [n for n, p in pipeline.procs.items() if not p.alive()]
    assert not dead, f"services died: {dead}\n{pipeline.logs()}"


async def test_the_one_reader_reads_at_most_the_limit_and_a_chunk(
    pipeline: Pipeline, pnc: NATS
) -> None:
    """``load_manifests`` in this process, against the real nats-server: bytes received are
    counted by the client (``stats['in_bytes']``)."""
    c = pipeline.cluster
    js = pnc.jetstream()
    await bus.ensure_streams(js)
    payload = hostile_payload()
    ref = await put_raw(js, f"{c}/direct/lies", payload)
    await forge_meta(js, ref.name, LIE)
    cases = [
        (msgspec.structs.replace(ref, size=STORED), "refused unread", 0),
        (msgspec.structs.replace(ref, size=LIE), "do not match their digest", LIE),
        (msgspec.structs.replace(ref, size=LIE, name=f"{c}/nothing"), "does not exist", 0),
        (msgspec.structs.replace(ref, size=LIE, bucket="elsewhere"), "outside the", 0),
    ]
    for ref_case, reason, most in cases:
        bundle = Bundle(cluster=c, bundle="direct", revision="r1", manifests_ref=ref_case)
        before = pnc.stats["in_bytes"]
        with pytest.raises(BundleError) as err:
            await load_manifests(js, bundle, limit=LIMIT)
        got = pnc.stats["in_bytes"] - before
        assert reason in str(err.value), str(err.value)
        assert got <= (most + CHUNK) * WIRE + 64 * 1024, (reason, got)
    # an honest object under the limit reads back whole
    good = orjson.dumps([cm("ns", f"cm-{i}") for i in range(20_000)])
    ok = await put_raw(js, f"{c}/direct/good", good)
    bundle = Bundle(cluster=c, bundle="direct", revision="r2", manifests_ref=ok)
    got_back = await load_manifests(js, bundle, limit=LIMIT)
    assert len(got_back) == 20_000
    assert got_back[7]["metadata"]["name"] == "cm-7"


async def test_a_publish_over_the_limit_is_refused_before_storing(
    pipeline: Pipeline, pnc: NATS, namespace: str
) -> None:
    js = pnc.jetstream()
    await bus.ensure_streams(js)
    before = (await js.stream_info(f"OBJ_{bus.OBJECT_STORE_BUCKET}")).state.bytes
    big = [cm(namespace, f"b-{i}") | {"data": {"k": "v" * 1000}} for i in range(3000)]
    bus.objects.configure(bus.StoreLimits(bundle_max_bytes=2 * MIB))
    try:
        with pytest.raises(BundleError, match=r"over the 2,097,152-byte bundle limit"):
            await publish_bundle(
                js,
                cluster=pipeline.cluster,
                bundle="big",
                revision="r1",
                manifests=big,
                options=BundleOptions(),
            )
    finally:
        bus.objects.configure(bus.StoreLimits())
    info = await js.stream_info(f"OBJ_{bus.OBJECT_STORE_BUCKET}")
    assert info.state.bytes == before, "nothing was stored"
    assert info.config.max_bytes == bus.objects.DEFAULT_STORE_MAX_BYTES, "the bucket is bounded"
    assert info.config.max_msg_size == CHUNK, "a chunk is bounded"

    # a full bucket refuses the put (nothing stored is dropped to make room), and says so;
    # an existing bucket (an older driftbus's, unbounded) is brought to the limits
    bus.objects.configure(bus.StoreLimits(store_max_bytes=before + 512 * 1024))
    try:
        await bus.ensure_object_store(js)
        with pytest.raises(BundleError, match=r"cannot be stored: .* refused by the bucket"):
            await publish_bundle(
                js,
                cluster=pipeline.cluster,
                bundle="big",
                revision="r2",
                manifests=big[:900],  # ~900 kB: over the inline limit, stored
                options=BundleOptions(),
            )
    finally:
        bus.objects.configure(bus.StoreLimits())
        await bus.ensure_object_store(js)
