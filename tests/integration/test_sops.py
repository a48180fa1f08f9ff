"""SOPS-encrypted Secrets on the real stack (issue 34): encrypted by the real ``sops`` for a key
the real ``age-keygen`` made, published with ``driftbus publish``, decrypted by the applier
only. The Secret is applied with its plaintext and put back after a hand edit; the planted
plaintext (and its base64) is in no message of any stream on the bus, in no service log (at
DEBUG), in no output of ``publish``, ``status``, ``why`` or ``plan``, and in no response of the
status page. An applier with another key, and a file whose ciphertext was changed, leave that
object ``Failed``, naming it and the reason, with nothing of it applied, while the rest of the
bundle is applied."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from harness.pipeline import Pipeline, StatusWatch, settle, write_counts, writes_since
from services.common import binaries
from services.controlplane import servers
from services.core.manifest import OWNER_LABEL
from services.kube import KubeClient, NotFound

from ..agekeys import age_key
from .test_cli import driftbus
from .test_ui import page_token

pytestmark = pytest.mark.reliability


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def encrypted(doc: dict[str, Any], recipient: str) -> str:
    """``doc`` as a user encrypts it (as Flux documents): only data and stringData."""
    argv = [str(binaries.require("sops")), "encrypt", "--age", recipient]
    argv += ["--encrypted-regex", "^(data|stringData)$", "--filename-override", "secret.yaml"]
    res = subprocess.run(
        argv, input=yaml.safe_dump(doc, sort_keys=False), capture_output=True, text=True, check=True
    )
    assert "ENC[AES256_GCM," in res.stdout
    return res.stdout


def secret(name: str, ns: str, marker: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": "shop"}},
        "type": "Opaque",
        "stringData": {"password": marker + "-string"},
        "data": {"token": b64(marker + "-data")},
    }


def configmap(name: str, ns: str) -> str:
    meta = f"metadata:\n  name: {name}\n  namespace: {ns}\n"
    return f"apiVersion: v1\nkind: ConfigMap\n{meta}data:\n  a: b\n"


def forms(marker: str) -> list[str]:
    """Every form the plaintext was given in: raw (both values contain it) and base64."""
    return [marker, b64(marker + "-string"), b64(marker + "-data"), b64(marker)]


def hits(text: str, marker: str) -> list[str]:
    return [line[:300] for line in text.splitlines() if any(f in line for f in forms(marker))]


async def every_stream(js: Any) -> dict[str, str]:
    """The text of every message of every stream on the server (the DRIFTBUS_* streams, the KV
    buckets, the Object Store), read by sequence: a work queue's too, without a consumer."""
    out: dict[str, str] = {}
    for info in await js.streams_info():
        name, state = info.config.name, info.state
        lines = []
        for seq in range(max(1, state.first_seq), state.last_seq + 1):
            try:
                msg = await js.get_msg(name, seq)
            except NotFoundError:  # deleted (an acked intent, a compacted fact): gone
                continue
            lines.append(f"{msg.subject} {(msg.data or b'').decode(errors='replace')}")
            if msg.headers:
                lines.append(str(msg.headers))
        out[name] = "\n".join(lines)
    return out


class Wire:
    """Every message published on the server while the test runs (a core subscription to
    ``>``): what the streams no longer keep too — intents acked and gone, replies, batch
    answers."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    async def start(self, nc: NATS) -> None:
        async def on_msg(msg: Any) -> None:
            self.lines.append(f"{msg.subject} {msg.data.decode(errors='replace')} {msg.headers}")

        await nc.subscribe(">", cb=on_msg)

    def text(self) -> str:
        return "\n".join(self.lines)


async def live_secret(kube: KubeClient, name: str, ns: str) -> dict[str, Any] | None:
    res = await kube.discovery.resource("v1", "Secret")
    try:
        return await kube.get(res, name, ns)
    except NotFound:
        return None


async def until_data(
    kube: KubeClient, name: str, ns: str, data: dict[str, str], within: float, logs: Any
) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        got = await live_secret(kube, name, ns)
        if got is not None and got.get("data") == data:
            return got
        assert time.monotonic() < deadline, f"Secret {name}: data never {data}: {got}\n{logs()}"
        await asyncio.sleep(0.2)


async def test_sops_secret_applied_corrected_and_never_printed(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path, measured: Any
) -> None:
    assert pipeline.log_level == "DEBUG"
    marker = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
    key = tmp_path / "age.txt"
    recipient = age_key(key)
    src = tmp_path / "src"
    src.mkdir()
    (src / "secret.yaml").write_text(encrypted(secret("sealed", namespace, marker), recipient))
    (src / "config.yaml").write_text(configmap("plain", namespace))
    assert marker not in (src / "secret.yaml").read_text()
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": str(key)}
    port = servers.free_port()
    _, auth = page_token(pipeline)
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, "sealed")
    wire = Wire()
    await wire.start(pnc)
    pipeline.start_all()
    pipeline.start("ui", None, "--port", str(port))
    outputs = []

    async def run(*args: str) -> tuple[int, str]:
        code, out, err = await driftbus(pipeline, *args)
        outputs.append(f"$ driftbus {' '.join(args)} -> {code}\n{out}\n{err}")
        return code, out + err

    code, out = await run(
        "publish", str(src), "--cluster", c, "--bundle", "sealed", "--force", "--wait",
        "--timeout", "120",
    )  # fmt: skip
    assert code == 0, f"{out}\n{pipeline.logs()}"
    want = {"password": b64(marker + "-string"), "token": b64(marker + "-data")}
    live = await until_data(kube, "sealed", namespace, want, 30, pipeline.logs)
    assert "sops" not in live
    assert live["metadata"]["labels"] == {"app": "shop", OWNER_LABEL: "sealed"}
    assert live["type"] == "Opaque"

    # drift: a hand edit is put back, decrypted again by the applier
    tampered = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "sealed", "namespace": namespace},
        "data": {"token": b64("hand-edited")},
    }
    await kube.apply(tampered, field_manager="intruder", force=True)
    await watch.object_status(
        lambda o: o.key.name == "sealed" and o.message == "applied (drift)", 60, pipeline.logs
    )
    await until_data(kube, "sealed", namespace, want, 30, pipeline.logs)

    # the user's commands, and a plan of the same Secret encrypted again with new values
    await run("status", "--cluster", c, "--bundle", "sealed")
    await run("status", "--cluster", c, "--bundle", "sealed", "-o", "json")
    await run("why", f"Secret/{namespace}/sealed", "--cluster", c)
    kubeconfig = ["--kubeconfig", str(pipeline.stack.cluster.kubeconfig)]
    code, out = await run("plan", str(src), "--cluster", c, "--bundle", "sealed", *kubeconfig)
    assert code == 0, out
    assert "sealed" in out, out
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / "secret.yaml").write_text(
        encrypted(secret("sealed", namespace, marker + "-v2"), recipient)
    )
    (changed / "config.yaml").write_text(configmap("plain", namespace))
    for extra in ([], ["-o", "json"], ["-o", "markdown"]):
        code, out = await run(
            "plan", str(changed), "--cluster", c, "--bundle", "sealed", *kubeconfig, *extra,
            "--exit-code",
        )  # fmt: skip
        assert code == 2, out  # changes, and no error: the ciphertext is not dry-run
        assert "SOPS-encrypted" in out, out  # would be applied: said so, nothing compared

    # the status page: its state and the Secret explained (decisions, difference, last error)
    url = f"http://127.0.0.1:{port}/"
    pages = []
    async with aiohttp.ClientSession(headers=auth) as session:
        for _ in range(150):  # the page server may still be starting
            try:
                async with session.get(f"{url}api/state") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        q = {"cluster": c, "bundle": "sealed", "kind": "Secret"}
        q |= {"namespace": namespace, "name": "sealed"}
        for path, params in (("api/state", {}), ("api/object", q), ("api/bundle", q)):
            async with session.get(f"{url}{path}", params=params) as resp:
                pages.append(f"{path} {resp.status}\n{await resp.text()}")
    assert pages[1].startswith("api/object 200"), pages[1]
    assert "sealed" in pages[1], pages[1]
    # its difference leaves the ciphertext out and says so (it always differs from the live)
    assert "SOPS-encrypted: stringData, data not compared" in pages[1], pages[1]

    await settle(2)
    searched = {
        "service logs (DEBUG)": pipeline.all_logs_text(),
        "CLI output": "\n".join(outputs),
        "status page": "\n".join(pages),
        "every message on the wire": wire.text(),
        **{f"stream {s}": text for s, text in (await every_stream(pnc.jetstream())).items()},
    }
    assert any("DRIFTBUS_DECISIONS" in s for s in searched), list(searched)
    assert "ENC[AES256_GCM," in searched["stream DRIFTBUS_BUNDLES"]  # it travelled encrypted
    assert f"driftbus.intent.{c}." in searched["every message on the wire"]
    leaks = {where: hits(text, marker) for where, text in searched.items()}
    assert not any(leaks.values()), {k: v for k, v in leaks.items() if v}
    sizes = ", ".join(f"{where} {len(text):,} B" for where, text in searched.items())
    measured(f"SOPS plaintext: 0 hits in {sizes}")


async def test_wrong_key_and_tampered_file_fail_the_object_only(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    marker = f"PLANTED-PLAINTEXT-{uuid.uuid4().hex}"
    other = age_key(tmp_path / "other.txt")  # the file's recipient; not the applier's
    key = tmp_path / "applier.txt"
    recipient = age_key(key)
    src = tmp_path / "src"
    src.mkdir()
    (src / "a-wrong-key.yaml").write_text(encrypted(secret("wrong-key", namespace, marker), other))
    text = encrypted(secret("tampered", namespace, marker), recipient)
    at = text.index("password: ENC[AES256_GCM,data:") + len("password: ENC[AES256_GCM,data:")
    (src / "b-tampered.yaml").write_text(
        text[:at] + ("A" if text[at] != "A" else "B") + text[at + 1 :]
    )
    (src / "c-good.yaml").write_text(encrypted(secret("good", namespace, marker), recipient))
    (src / "d-config.yaml").write_text(configmap("plain", namespace))
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": str(key)}
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, "mixed")
    pipeline.start_all()
    before = write_counts(pipeline.api)
    code, out, err = await driftbus(
        pipeline, "publish", str(src), "--cluster", c, "--bundle", "mixed", "--wait",
        "--timeout", "120",
    )  # fmt: skip
    assert code != 0, out  # two objects failed
    st = await watch.until(
        lambda s: s.counts.total == 4 and s.counts.applied + s.counts.failed == 4,
        90,
        pipeline.logs,
    )
    assert st.counts.failed == 2, st
    failures = {o.key.name: o.message for o in watch.objects if str(o.phase) == "Failed"}
    wrong, tampered = failures["wrong-key"], failures["tampered"]
    assert wrong.startswith(f"Secret/{namespace}/wrong-key: not applied: its SOPS encryption: ")
    assert "Failed to get the data key" in wrong, wrong
    assert other in wrong, wrong  # the recipient it is encrypted for
    assert tampered.startswith(f"Secret/{namespace}/tampered: not applied"), tampered
    assert "message authentication failed" in tampered, tampered
    assert set(failures) == {"wrong-key", "tampered"}, failures
    # nothing of the failed ones reached the cluster; the rest of the bundle did
    assert await live_secret(kube, "wrong-key", namespace) is None
    assert await live_secret(kube, "tampered", namespace) is None
    good = await live_secret(kube, "good", namespace)
    assert good is not None
    assert good["data"]["password"] == b64(marker + "-string")
    res = await kube.discovery.resource("v1", "ConfigMap")
    assert (await kube.get(res, "plain", namespace))["data"] == {"a": "b"}
    assert writes_since(pipeline.api, before, {"secrets"}) == 1, write_counts(pipeline.api)
    await settle(1)
    logs = pipeline.all_logs_text() + out + err
    assert not hits(logs, marker), hits(logs, marker)
    for name, text in (await every_stream(pnc.jetstream())).items():
        assert not hits(text, marker), (name, hits(text, marker))


async def test_an_applier_without_a_key_fails_the_object(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    recipient = age_key(tmp_path / "age.txt")
    src = tmp_path / "src"
    src.mkdir()
    (src / "secret.yaml").write_text(encrypted(secret("nokey", namespace, "x" * 12), recipient))
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": ""}
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, "nokey")
    pipeline.start_all()
    await driftbus(pipeline, "publish", str(src), "--cluster", c, "--bundle", "nokey")
    o = await watch.object_status(lambda o: str(o.phase) == "Failed", 90, pipeline.logs)
    assert o.message.startswith(f"Secret/{namespace}/nokey: not applied"), o.message
    assert "no age key" in o.message, o.message
    assert await live_secret(kube, "nokey", namespace) is None


async def test_an_unreadable_key_file_stops_the_applier_at_start(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    pipeline.role_env["applier"] = {"SOPS_AGE_KEY_FILE": str(tmp_path / "absent.txt")}
    proc = pipeline.start("applier")
    for _ in range(300):
        if not proc.alive():
            break
        await asyncio.sleep(0.1)
    assert proc.proc is not None
    assert proc.proc.poll() not in (None, 0)
    log = proc.log_path.read_text()
    assert "SOPS_AGE_KEY_FILE" in log, log
    assert "not a readable file" in log, log
