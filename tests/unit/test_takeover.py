"""An object belongs to one bundle: another bundle's revision takes it only with take-over."""

from __future__ import annotations

import hashlib

import pytest

from schemas.messages import Bundle
from schemas.subjects import ObjectKey
from services.planner.memory.store import EntryStore
from services.planner.rule.decide import Entry
from services.planner.rule.entry import Slot
from services.planner.rule.revision import BundleView
from services.planner.rule.takeover import declared_by_other, take

A = ObjectKey("", "ConfigMap", "ns", "a")
B = ObjectKey("", "ConfigMap", "ns", "b")
M = hashlib.sha256(b"m").digest()


def view(name: str, *keys: ObjectKey) -> BundleView:
    v = BundleView.of(Bundle(cluster="c", bundle=name, revision="r1"), 1)
    v.keys.update(keys)
    return v


def store(*entries: Entry) -> EntryStore:
    s = EntryStore()
    for e in entries:
        s["c", e.key] = e
    return s


def desired(key: ObjectKey, bundle: str) -> Entry:
    return Entry(key, bundle=bundle, revision="r1", manifest_sha=M)


# (id, entry of A, bundles in force, declared by)
CASES: list[tuple[str, Entry | None, list[BundleView], str | None]] = [
    ("never-seen", None, [], None),
    ("declared-by-the-same-bundle", desired(A, "mine"), [view("mine", A)], None),
    ("declared-by-another-current-revision", desired(A, "other"), [view("other", A)], "other"),
    ("other-bundle-gone", desired(A, "other"), [], None),
    ("other-revision-no-longer-declares-it", desired(A, "other"), [view("other", B)], None),
    ("no-longer-desired-by-anyone", Entry(A, owner_bundle="other"), [view("other")], None),
    (
        "released-by-its-bundle-manifest-unknown",
        Entry(A, bundle="other", revision="r1"),
        [view("other", A)],
        None,
    ),
]


@pytest.mark.parametrize(
    ("entry", "views", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_declared_by_other(
    entry: Entry | None, views: list[BundleView], expected: str | None
) -> None:
    entries = store(entry) if entry is not None else store()
    bundles = {(v.cluster, v.name): v for v in views}
    assert declared_by_other(("c", A), "mine", entries, bundles) == expected


def revision(*keys: ObjectKey) -> list[tuple[Slot, bytes, bytes]]:
    return [(("c", k), f"manifest {k.name}".encode(), M) for k in keys]


def test_an_object_of_another_bundle_is_left_out_without_take_over() -> None:
    other = view("other", A)
    mine = view("mine")
    taken = take(mine, revision(A, B), store(desired(A, "other")), {("c", "other"): other},
                 take_over=False)  # fmt: skip
    assert [s[1] for s, _, _ in taken.objects] == [B]
    assert taken.moved == []
    assert mine.keys == {B}
    assert mine.errors == [
        "ConfigMap/ns/a: already declared by bundle other (publish with take-over to move it "
        "to this bundle)"
    ]
    assert other.keys == {A}, "the other bundle's view is the caller's to change"


def test_take_over_moves_it_and_names_where_from() -> None:
    other = view("other", A)
    mine = view("mine")
    taken = take(mine, revision(A, B), store(desired(A, "other")), {("c", "other"): other},
                 take_over=True)  # fmt: skip
    assert [s[1] for s, _, _ in taken.objects] == [A, B]
    assert taken.moved == [(("c", A), "other")]
    assert mine.keys == {A, B}
    assert mine.errors == []


def test_objects_keep_the_revision_order() -> None:
    taken = take(view("mine"), revision(B, A), store(), {}, take_over=False)
    assert [s[1] for s, _, _ in taken.objects] == [B, A]
