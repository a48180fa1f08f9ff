"""Which statuses a message of the STATUS stream carries (services/revisions/watch.py:
``decode_statuses``), as `status -f`, the status page and `publish --wait` read it."""

from __future__ import annotations

import pytest

from schemas.codec import encode
from schemas.messages import (
    BundleCounts,
    BundlePhase,
    BundleStatus,
    ObjectPhase,
    ObjectRows,
    ObjectStatus,
)
from schemas.subjects import (
    ObjectKey,
    bundle_status_subject,
    object_rows_subject,
    object_status_subject,
    parse_subject,
)
from services.revisions.watch import decode_statuses


def row(name: str, *, cluster: str = "c", bundle: str = "team-a/web") -> ObjectStatus:
    return ObjectStatus(
        cluster=cluster,
        bundle=bundle,
        revision="r1",
        key=ObjectKey("", "ConfigMap", "ns", name),
        phase=ObjectPhase.APPLIED,
    )


def test_an_object_named_bundle_is_an_object_status() -> None:
    """The subject's last token is the object's name here: classifying by it misread this."""
    status = row("bundle")
    subject = object_status_subject("c", "team-a/web", status.key)
    assert subject.endswith(".bundle")
    assert decode_statuses(subject, encode(status)) == [status]


def test_a_bundle_status_and_what_cannot_be_read() -> None:
    status = BundleStatus(
        cluster="c", bundle="web", revision="r1", phase=BundlePhase.READY, counts=BundleCounts()
    )
    subject = bundle_status_subject("c", "web")
    assert decode_statuses(subject, encode(status)) == [status]
    assert decode_statuses(subject, b"not json") == []
    assert decode_statuses("driftbus.status", encode(status)) == []  # not a status subject
    assert decode_statuses("driftbus.decision.c.=.ConfigMap.ns.x", encode(status)) == []


def test_rows_sent_together_are_each_a_status_in_order() -> None:
    rows = [row("a"), row("rows"), row("b")]
    subject = object_rows_subject("c", "team-a/web", "x1")
    assert parse_subject(subject).family == "status.rows"
    data = encode(ObjectRows(cluster="c", bundle="team-a/web", rows=rows))
    assert decode_statuses(subject, data) == rows


@pytest.mark.parametrize(
    ("where", "rows"),
    [
        ("a row of another bundle", [row("a"), row("b", bundle="team-b/db")]),
        ("a row of another cluster", [row("a", cluster="d")]),
    ],
)
def test_rows_are_read_only_where_their_subject_says(where: str, rows: list[ObjectStatus]) -> None:
    """A rows message is read under its subject's bundle (what a tenant may read is decided by
    subject): one naming another bundle or cluster is refused whole."""
    subject = object_rows_subject("c", "team-a/web", "x1")
    data = encode(ObjectRows(cluster="c", bundle="team-a/web", rows=rows))
    assert decode_statuses(subject, data) == [], where


def test_rows_on_an_object_subject_are_not_read_as_one_row() -> None:
    status = row("a")
    data = encode(ObjectRows(cluster="c", bundle="team-a/web", rows=[status]))
    assert decode_statuses(object_status_subject("c", "team-a/web", status.key), data) == []
