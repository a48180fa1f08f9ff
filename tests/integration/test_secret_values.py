# ruff: noqa: E501 - the table reads best one case per line
"""A Secret value that is not a string never comes back in what driftbus publishes (issue 30,
item 7).

``stringData: {pin: 12345678}`` is refused by the API server, whose error repeats the value; so
does ``data`` with a number or a boolean. On the real stack, the Failed apply of such Secrets is
read back wherever a user or an operator reads text — object and bundle status, the outcome
facts, the decision records, every service's log — and no value may appear in any of it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline
from schemas.messages import ObjectPhase, ObjectStatus
from schemas.subjects import encode_token
from services.revisions.watch import decode_statuses

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(300)]

PIN = 12345678
FLOAT = 27182818.5
SECRETS: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    # (name, field, values, every form a value may be printed in)
    ("pin", "stringData", {"pin": PIN}, ("12345678",)),
    ("ratio", "stringData", {"ratio": FLOAT}, ("27182818.5", "2.71828185e+07", "27182818")),
    ("numbers", "data", {"n": 987654321}, ("987654321",)),
    ("nested", "stringData", {"list": [55554444, "inner-secret-text"]}, ("55554444", "inner-secret-text")),
]  # fmt: skip


def secret(ns: str, name: str, field: str, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": "Opaque",
        field: values,
    }


async def test_a_failed_secret_apply_says_no_value(
    pipeline: Pipeline, pnc: NATS, namespace: str
) -> None:
    c = encode_token(pipeline.cluster)
    texts: list[str] = []
    failed: dict[str, ObjectStatus] = {}

    async def on_msg(msg: Any) -> None:
        texts.append(f"{msg.subject} {msg.data.decode(errors='replace')}")
        for st in decode_statuses(msg.subject, msg.data):
            if isinstance(st, ObjectStatus) and st.phase is ObjectPhase.FAILED:
                failed[st.key.name] = st

    for family in ("status", "decision", "outcome"):
        await pnc.subscribe(f"driftbus.{family}.{c}.>", cb=on_msg)
    pipeline.start_all()
    manifests = [secret(namespace, n, f, v) for n, f, v, _ in SECRETS]
    await pipeline.publish(pnc.jetstream(), "secrets", manifests)
    deadline = time.monotonic() + 90
    while len(failed) < len(SECRETS):
        assert time.monotonic() < deadline, f"failed: {sorted(failed)}\n{pipeline.logs()}"
        await asyncio.sleep(0.2)
    await asyncio.sleep(2.0)  # the bundle status and decisions that follow
    for name, _, _, _ in SECRETS:
        assert failed[name].message, name  # the reason is reported, only without the value
    logs = pipeline.all_logs_text()
    for name, _, _, forms in SECRETS:
        for form in forms:
            leaks = [t for t in texts if form in t]
            assert not leaks, f"{name}: {form} published in:\n" + "\n".join(leaks)
            at = logs.find(form)
            assert at < 0, f"{name}: {form} in a log line: {logs[max(0, at - 300) : at + 100]}"
