"""Which objects a bundle's prune concerns, and the event each gets (planner/rule/prune.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import msgspec
import pytest

from schemas.messages import Bundle, BundleOptions
from schemas.subjects import ObjectKey
from services.planner.rule.decide import DELETE_INFLIGHT, Entry, Removed
from services.planner.rule.prune import removed, strays_from
from services.planner.rule.revision import BundleView

KEY = ObjectKey("", "ConfigMap", "ns", "old")
NS = ObjectKey("", "Namespace", "", "ns")
CRD = ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.com")
M = hashlib.sha256(b"m").digest()
S = hashlib.sha256(b"s").digest()


def view(*keys: ObjectKey, prune: bool = True) -> BundleView:
    bundle = Bundle(cluster="c", bundle="b", revision="r2", options=BundleOptions(prune=prune))
    v = BundleView.of(bundle, 1)
    v.keys.update(keys)
    return v


def stray(**fields: object) -> Entry:
    """Live, carrying bundle b's label, applied by b, declared by no revision: what a prune is
    for."""
    base: dict[str, object] = {
        "server_sha": S,
        "server_rv": 7,
        "owner_bundle": "b",
        "applied_bundle": "b",
    }
    return Entry(KEY, **{**base, **fields})  # type: ignore[arg-type]


STRAY_CASES: list[tuple[str, Entry, BundleView, bool]] = [
    ("live-labelled-undeclared-is-a-stray", stray(), view(), True),
    ("released-by-this-bundle-is-a-stray", stray(bundle="b"), view(), True),
    ("still-in-the-revision", stray(), view(KEY), False),
    ("another-bundles-label", stray(owner_bundle="other"), view(), False),
    ("no-label", stray(owner_bundle=""), view(), False),
    ("label-only-never-applied-by-it", stray(applied_bundle=""), view(), False),
    ("label-only-applied-for-another", stray(applied_bundle="other"), view(), False),
    ("desired-again", stray(bundle="b", manifest_sha=M), view(), False),
    ("desired-by-another-bundle", stray(bundle="other"), view(), False),
    ("gone-from-the-cluster", stray(server_deleted=True, server_sha=None), view(), False),
    ("never-seen-live", stray(server_rv=0, server_sha=None), view(), False),
    ("delete-on-its-way", stray(inflight=DELETE_INFLIGHT), view(), False),
    ("apply-on-its-way", stray(inflight=M), view(), False),
]


@pytest.mark.parametrize(
    ("entry", "v", "expected"), [pytest.param(*c[1:], id=c[0]) for c in STRAY_CASES]
)
def test_strays_from(entry: Entry, v: BundleView, expected: bool) -> None:
    assert strays_from(entry, v) is expected


def slot(e: Entry) -> tuple[tuple[str, ObjectKey], Entry]:
    return ("c", e.key), e


def test_removed_names_the_bundle_and_revision_it_left() -> None:
    assert removed(KEY, view(), [], None) == Removed("b", "r2", True, in_use="")


def test_removed_without_prune_reads_nothing() -> None:
    def unread() -> Iterator[tuple[tuple[str, ObjectKey], Entry]]:
        raise AssertionError("entries read although the bundle does not prune")
        yield  # a generator: reading it is what fails

    assert removed(NS, view(prune=False), unread(), None) == Removed("b", "r2", False)


def test_removed_says_what_a_namespace_still_holds() -> None:
    held = Entry(ObjectKey("", "ConfigMap", "ns", "x"), bundle="other", manifest_sha=M)
    event = removed(NS, view(), [slot(held)], None)
    assert event.in_use == "not pruned: still holds ConfigMap/ns/x (bundle other)"


@pytest.mark.parametrize(
    ("kind", "held"),
    [
        pytest.param("Widget", True, id="crd-manifest-names-the-kind-held"),
        pytest.param("Gadget", False, id="crd-manifest-names-another-kind"),
        pytest.param(None, True, id="no-manifest-every-kind-of-the-group-counts"),
    ],
)
def test_removed_reads_a_crds_kind_from_its_manifest(kind: str | None, held: bool) -> None:
    widget = Entry(ObjectKey("example.com", "Widget", "ns", "w"), bundle="other", manifest_sha=M)
    manifest = (
        msgspec.json.encode({"kind": "CustomResourceDefinition", "spec": {"names": {"kind": kind}}})
        if kind
        else None
    )
    event = removed(CRD, view(), [slot(widget)], manifest)
    assert bool(event.in_use) is held
