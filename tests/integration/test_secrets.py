"""Secrets kept (issue 6, the class of CVE-2022-24449): a unique value is planted in a Secret,
in a Deployment's env, and in applies that fail with the API server echoing what it refused.
Everything driftbus wrote while reconciling them at DEBUG level — every service log line, every
status, decision, applied and server message on the bus, and every CLI output — is searched
for it, raw and base64-encoded: zero hits."""

from __future__ import annotations

import base64
import copy
import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from nats.aio.client import Client as NATS

from harness.pipeline import Pipeline, StatusWatch, settle
from services.common import bus
from services.kube import KubeClient

from .test_cli import driftbus

pytestmark = pytest.mark.reliability

PLANTED = f"pl4nted-{secrets.token_hex(8)}"


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


def _objects(ns: str, value: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "creds", "namespace": ns},
            "data": {"token": b64(value + "-data")},
            "stringData": {"password": value + "-string"},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {
                "selector": {"matchLabels": {"app": "app"}},
                "template": {
                    "metadata": {"labels": {"app": "app"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "example/app:1",
                                "env": [{"name": "TOKEN", "value": value + "-env"}],
                            }
                        ]
                    },
                },
            },
        },
        # applies that fail, the API server quoting the refused value back in its error:
        # a Secret value that is not base64 ...
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "not-base64", "namespace": ns},
            "data": {"token": value + "-not-base64!"},
        },
        # ... a Secret value in a key that is not a valid key ...
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "bad-key", "namespace": ns},
            "stringData": {"bad key!": value + "-bad-key"},
        },
        # ... and a Deployment carrying the value in its env that the server refuses
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "broken", "namespace": ns},
            "spec": {
                "replicas": "three",
                "selector": {"matchLabels": {"app": "broken"}},
                "template": {
                    "metadata": {"labels": {"app": "broken"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "app",
                                "image": "example/app:1",
                                "env": [{"name": "TOKEN", "value": value + "-env-failed"}],
                            }
                        ]
                    },
                },
            },
        },
    ]


def _hits(text: str, value: str) -> list[str]:
    """Lines of ``text`` that carry the planted value in any form it was given to us."""
    forms = [value, b64(value + "-data"), b64(value + "-string")]
    return [line[:300] for line in text.splitlines() if any(f in line for f in forms)]


async def _stream_text(js: Any, stream: str) -> str:
    follower = bus.Follower(js, stream, ">", history=True)
    lines = []
    async for msg in follower.snapshot(timeout=10):
        lines.append(f"{msg.subject} {msg.data.decode(errors='replace')}")
    return "\n".join(lines)


async def test_planted_secret_never_printed(
    pipeline: Pipeline, pnc: NATS, kube: KubeClient, namespace: str, tmp_path: Path, measured: Any
) -> None:
    assert pipeline.log_level == "DEBUG"
    c = pipeline.cluster
    watch = StatusWatch()
    await watch.start(pnc, c, "planted")
    pipeline.start_all()
    js = pnc.jetstream()
    objects = _objects(namespace, PLANTED)
    await pipeline.publish(js, "planted", objects, force=True)  # takes drifted fields back
    st = await watch.until(
        lambda s: s.counts.applied + s.counts.failed == s.counts.total, 120, pipeline.logs
    )
    assert st.counts.failed == 3, st  # the three refused applies, each named with its reason
    failures = "\n".join(st.failed_objects)
    for name in ("not-base64", "bad-key", "broken"):
        assert name in failures, failures

    # drift on the Secret: seen and corrected (the watcher hashes it, never prints it)
    res = await kube.discovery.resource("v1", "Secret")
    live = await kube.get(res, "creds", namespace)
    tampered = copy.deepcopy(live)
    tampered["data"]["token"] = b64(PLANTED + "-tampered")
    for f in ("resourceVersion", "managedFields", "uid", "creationTimestamp"):
        tampered["metadata"].pop(f, None)
    await kube.apply(tampered, field_manager="intruder", force=True)
    # the correction's own row (a wait on bundle statuses would miss a correction that starts
    # and ends between two of them: the bundle's summary never changes)
    await watch.object_status(
        lambda o: o.key.name == "creds" and o.message == "applied (drift)", 60, pipeline.logs
    )
    await settle(3)
    fixed = await kube.get(res, "creds", namespace)
    assert fixed["data"]["token"] == b64(PLANTED + "-data"), "drift on the Secret not corrected"

    # the user's commands: status (table and JSON), why, and a plan that changes the values
    outputs = []
    for args in (
        ["status", "--cluster", c, "--bundle", "planted"],
        ["status", "--cluster", c, "--bundle", "planted", "-o", "json"],
        ["status", "--cluster", c],
        ["why", f"Secret/{namespace}/creds", "--cluster", c],
        ["why", f"Secret/{namespace}/not-base64", "--cluster", c],
        ["why", f"Deployment.apps/{namespace}/broken", "--cluster", c, "-o", "json"],
    ):
        code, out, err = await driftbus(pipeline, *args)
        outputs.append(f"$ driftbus {' '.join(args)} -> {code}\n{out}\n{err}")
    src = tmp_path / "changed"
    src.mkdir()
    (src / "all.yaml").write_text(yaml.safe_dump_all(_objects(namespace, PLANTED + "-v2")))
    for extra in ([], ["-o", "json"]):
        code, out, err = await driftbus(
            pipeline,
            "plan",
            str(src),
            "--cluster",
            c,
            "--bundle",
            "planted",
            "--kubeconfig",
            str(pipeline.stack.cluster.kubeconfig),
            *extra,
        )
        assert code in (0, 1, 2), err
        assert "creds" in out, out  # the plan does show the Secret changing, without its values
        outputs.append(f"$ driftbus plan {' '.join(extra)} -> {code}\n{out}\n{err}")

    searched = {
        "service logs (DEBUG)": pipeline.all_logs_text(),
        "CLI output": "\n".join(outputs),
        **{f"stream {s}": await _stream_text(js, s) for s in (bus.STATUS, bus.DECISIONS)},
        **{f"stream {s}": await _stream_text(js, s) for s in (bus.APPLIED, bus.SERVER)},
    }
    leaks = {where: _hits(text, PLANTED) for where, text in searched.items()}
    assert not any(leaks.values()), leaks
    sizes = ", ".join(f"{where} {len(text):,} B" for where, text in searched.items())
    measured(f"planted secret: 0 hits in {sizes}")
