"""The resend check: only the very intent an entry waits for counts as "still queued"."""

from __future__ import annotations

import pytest

from schemas.codec import encode
from schemas.messages import ApplyIntent, DeleteIntent
from schemas.subjects import ObjectKey
from services.planner.rule.decide import DELETE_INFLIGHT, Entry
from services.planner.rule.messages import is_inflight as _is_inflight

KEY = ObjectKey("", "ConfigMap", "ns", "a")
NEW, OLD = b"\x01" * 32, b"\x02" * 32


def apply(sha: bytes) -> bytes:
    return encode(
        ApplyIntent(
            cluster="c", key=KEY, bundle="b", revision="r", manifest_sha=sha.hex(),
            manifest={}, reason="new",
        )
    )  # fmt: skip


DELETE = encode(DeleteIntent(cluster="c", key=KEY, api_version="v1", bundle="b", revision="r"))


@pytest.mark.parametrize(
    ("queued", "inflight", "expected"),
    [
        pytest.param(apply(NEW), NEW, True, id="the-apply-waited-for-is-queued"),
        pytest.param(apply(OLD), NEW, False, id="older-apply-waiting-hides-a-lost-new-one"),
        pytest.param(DELETE, DELETE_INFLIGHT, True, id="the-delete-waited-for-is-queued"),
        pytest.param(apply(NEW), DELETE_INFLIGHT, False, id="apply-queued-while-a-delete-is-due"),
        pytest.param(DELETE, NEW, False, id="a-delete-queued-while-an-apply-is-due"),
        pytest.param(b"\xff", NEW, False, id="unreadable"),
    ],
)
def test_is_inflight(queued: bytes, inflight: bytes, expected: bool) -> None:
    assert _is_inflight(queued, Entry(KEY, manifest_sha=NEW, inflight=inflight)) is expected
