"""One record per object beside the SHA cache: set and dropped field by field, gone when empty."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schemas.messages import Health, ObjectPhase, OutcomeEvent
from schemas.subjects import ObjectKey
from services.planner.memory.codebook import Codebook
from services.planner.memory.object_details import Details

SLOT = ("c", ObjectKey("", "ConfigMap", "ns", "a"))
OTHER = ("c", ObjectKey("", "ConfigMap", "ns", "b"))
FAILED = OutcomeEvent(
    cluster="c",
    key=SLOT[1],
    bundle="b",
    revision="r1",
    manifest_sha="00" * 32,
    phase=ObjectPhase.FAILED,
    message="invalid",
)

Step = Callable[[Details], None]


def manifest(d: Details) -> None:
    d.set_manifest(SLOT, b'{"kind":"ConfigMap"}')


def packed_manifest(d: Details) -> None:
    d.set_manifest(SLOT, CM, Codebook([CM, b'{"kind":"Secret"}']))


def healthy(d: Details) -> None:
    d.set_health(SLOT, Health.READY, "")


def failed(d: Details) -> None:
    d.set_outcome(SLOT, FAILED)


def left_bundle(d: Details) -> None:
    d.drop_manifest(SLOT)


def deleted(d: Details) -> None:
    d.drop_health(SLOT)


def applied(d: Details) -> None:
    d.drop_outcome(SLOT)


UNKNOWN = (Health.UNKNOWN, "")
READY = (Health.READY, "")
CM = b'{"kind":"ConfigMap"}'

# (id, steps, manifest, health, outcome, record kept)
CASES: list[tuple[str, list[Step], bytes | None, tuple[Health, str], OutcomeEvent | None, bool]] = [
    ("nothing-known-reads-as-unknown", [], None, UNKNOWN, None, False),
    ("desired-object-keeps-its-manifest", [manifest], CM, UNKNOWN, None, True),
    ("a-manifest-held-packed-reads-as-it-was", [packed_manifest], CM, UNKNOWN, None, True),
    ("a-packed-manifest-dropped", [packed_manifest, left_bundle], None, UNKNOWN, None, False),
    ("a-new-revision-holds-it-plain-again", [packed_manifest, manifest], CM, UNKNOWN, None,
     True),
    ("seen-healthy", [healthy], None, READY, None, True),
    ("tombstone-forgets-health", [healthy, deleted], None, UNKNOWN, None, False),
    ("failure-is-kept-until-applied", [failed], None, UNKNOWN, FAILED, True),
    ("applied-fact-replaces-the-failure", [failed, applied], None, UNKNOWN, None, False),
    ("left-the-bundle-live-keeps-its-health", [manifest, healthy, left_bundle], None, READY, None,
     True),
    ("a-failure-outlives-a-tombstone", [healthy, failed, deleted], None, UNKNOWN, FAILED, True),
    ("all-three-dropped-leaves-no-record",
     [manifest, healthy, failed, left_bundle, deleted, applied], None, UNKNOWN, None, False),
    ("dropping-what-was-never-set-adds-nothing", [left_bundle, deleted, applied], None, UNKNOWN,
     None, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("steps", "want_manifest", "want_health", "want_outcome", "kept"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_details(
    steps: list[Step],
    want_manifest: bytes | None,
    want_health: tuple[Health, str],
    want_outcome: OutcomeEvent | None,
    kept: bool,
) -> None:
    d = Details()
    for s in steps:
        s(d)
    assert d.manifest(SLOT) == want_manifest
    assert d.health(SLOT) == want_health
    assert d.outcome(SLOT) == want_outcome
    assert (SLOT in d) is kept
    assert len(d) == int(kept)
    assert d.health(OTHER) == UNKNOWN  # one object's record is its own


def test_health_message_travels_with_the_health() -> None:
    d = Details()
    d.set_health(SLOT, Health.FAILED, "CrashLoopBackOff")
    assert d.health(SLOT) == (Health.FAILED, "CrashLoopBackOff")
    d.set_health(SLOT, Health.READY, "")
    assert d.health(SLOT) == (Health.READY, "")
