"""Which status a message of the STATUS stream carries (services/revisions/watch.py:
``decode_status``), as `status -f`, the status page and `publish --wait` read it."""

from __future__ import annotations

from schemas.codec import encode
from schemas.messages import BundleCounts, BundlePhase, BundleStatus, ObjectPhase, ObjectStatus
from schemas.subjects import ObjectKey, bundle_status_subject, object_status_subject
from services.revisions.watch import decode_status


def test_an_object_named_bundle_is_an_object_status() -> None:
    """The subject's last token is the object's name here: classifying by it misread this."""
    key = ObjectKey("", "ConfigMap", "ns", "bundle")
    status = ObjectStatus(
        cluster="c", bundle="team-a/web", revision="r1", key=key, phase=ObjectPhase.APPLIED
    )
    subject = object_status_subject("c", "team-a/web", key)
    assert subject.endswith(".bundle")
    assert decode_status(subject, encode(status)) == status


def test_a_bundle_status_and_what_cannot_be_read() -> None:
    status = BundleStatus(
        cluster="c", bundle="web", revision="r1", phase=BundlePhase.READY, counts=BundleCounts()
    )
    subject = bundle_status_subject("c", "web")
    assert decode_status(subject, encode(status)) == status
    assert decode_status(subject, b"not json") is None
    assert decode_status("driftbus.status", encode(status)) is None  # not a status subject
    assert decode_status("driftbus.decision.c.=.ConfigMap.ns.x", encode(status)) is None
