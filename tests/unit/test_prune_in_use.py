"""A Namespace or CRD is not pruned while it holds what others (or the revision itself) want."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.subjects import ObjectKey
from services.planner.rule.decide import (
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Observed,
    Removed,
    step,
)
from services.planner.rule.prune import MAX_NAMED, crd_kind, in_use

NS = ObjectKey("", "Namespace", "", "team-a")
CRD = ObjectKey("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.com")
M = hashlib.sha256(b"manifest").digest()
S = hashlib.sha256(b"server").digest()

Slots = list[tuple[tuple[str, ObjectKey], Entry]]


def live(key: ObjectKey, owner: str) -> Entry:
    """Seen live carrying ``owner``'s label; no bundle declares it any more."""
    return Entry(key, server_sha=S, server_rv=7, owner_bundle=owner)


def gone(key: ObjectKey, owner: str) -> Entry:
    """A tombstone: it carried ``owner``'s label when it was deleted."""
    return Entry(key, server_rv=9, server_deleted=True, owner_bundle=owner)


def desired(key: ObjectKey, bundle: str) -> Entry:
    """Declared by ``bundle``'s current revision (applied and live, or not yet)."""
    return Entry(key, bundle=bundle, revision="r1", manifest_sha=M)


def cm(name: str, namespace: str = "team-a") -> ObjectKey:
    return ObjectKey("", "ConfigMap", namespace, name)


def widget(name: str, group: str = "example.com", kind: str = "Widget") -> ObjectKey:
    return ObjectKey(group, kind, "team-a", name)


def slots(*entries: Entry, cluster: str = "c") -> Slots:
    return [((cluster, e.key), e) for e in entries]


NAMESPACE_CASES: list[tuple[str, Slots, str]] = [
    ("empty-namespace-is-pruned", [], ""),
    ("the-namespace-itself-does-not-hold-it", slots(live(NS, "b")), ""),
    (
        "holding-another-bundles-live-object-is-in-use",
        slots(live(NS, "b"), live(cm("x"), "other")),
        "not pruned: still holds ConfigMap/team-a/x (bundle other)",
    ),
    (
        "holding-only-the-pruning-bundles-own-leftovers-is-pruned-with-them",
        slots(live(cm("x"), "b"), live(cm("y"), "b")),
        "",
    ),
    ("a-deleted-object-of-another-bundle-holds-nothing", slots(gone(cm("x"), "other")), ""),
    (
        "the-pruning-bundles-own-annotated-object-holds-it",
        slots(Entry(cm("k"), server_sha=S, server_rv=7, owner_bundle="b", keep=True)),
        "not pruned: still holds ConfigMap/team-a/k (bundle b)",
    ),
    (
        "an-unlabelled-annotated-object-holds-it",
        slots(Entry(cm("k"), server_sha=S, server_rv=7, keep=True)),
        "not pruned: still holds ConfigMap/team-a/k",
    ),
    ("an-unlabelled-object-holds-nothing", slots(live(cm("x"), "")), ""),
    (
        "holding-a-desired-object-of-another-bundle-is-in-use",
        slots(desired(cm("x"), "other")),
        "not pruned: still holds ConfigMap/team-a/x (bundle other)",
    ),
    (
        "holding-an-object-its-own-revision-still-declares-is-in-use",
        slots(desired(cm("x"), "b")),
        "not pruned: still holds ConfigMap/team-a/x (bundle b)",
    ),
    (
        "a-desired-object-counts-even-when-labelled-for-the-pruning-bundle",
        slots(Entry(cm("x"), bundle="b", manifest_sha=M, server_rv=3, owner_bundle="b")),
        "not pruned: still holds ConfigMap/team-a/x (bundle b)",
    ),
    (
        "objects-of-other-namespaces-do-not-count",
        slots(live(cm("x", "team-b"), "other"), desired(cm("y", "team-ab"), "other")),
        "",
    ),
    (
        "cluster-scoped-objects-do-not-count",
        slots(desired(ObjectKey("", "Namespace", "", "team-b"), "other")),
        "",
    ),
    (
        "what-it-holds-is-named-in-order-and-bounded",
        slots(*(live(cm(f"cm-{i}"), "other") for i in (4, 2, 0, 3, 1))),
        "not pruned: still holds ConfigMap/team-a/cm-0 (bundle other), ConfigMap/team-a/cm-1 "
        "(bundle other), ConfigMap/team-a/cm-2 (bundle other) and 2 more",
    ),
]


@pytest.mark.parametrize(
    ("case", "entries", "why"), NAMESPACE_CASES, ids=[c[0] for c in NAMESPACE_CASES]
)
def test_namespace_in_use(case: str, entries: Slots, why: str) -> None:
    assert in_use(NS, entries, pruning="b") == why


CRD_CASES: list[tuple[str, Slots, str | None, str]] = [
    ("no-custom-resources-is-pruned", [], "Widget", ""),
    (
        "another-bundles-custom-resource-of-its-kind-is-in-use",
        slots(live(widget("w"), "other")),
        "Widget",
        "not pruned: still holds Widget.example.com/team-a/w (bundle other)",
    ),
    (
        "a-desired-custom-resource-of-its-kind-is-in-use",
        slots(desired(widget("w"), "b")),
        "Widget",
        "not pruned: still holds Widget.example.com/team-a/w (bundle b)",
    ),
    (
        "its-own-leftover-custom-resources-go-down-with-it",
        slots(live(widget("w"), "b")),
        "Widget",
        "",
    ),
    (
        "another-kind-of-the-same-group-is-not-held-when-the-kind-is-known",
        slots(desired(widget("g", kind="Gadget"), "other")),
        "Widget",
        "",
    ),
    (
        "without-the-manifest-every-kind-of-its-group-counts",
        slots(desired(widget("g", kind="Gadget"), "other")),
        None,
        "not pruned: still holds Gadget.example.com/team-a/g (bundle other)",
    ),
    (
        "another-group-is-never-held",
        slots(desired(widget("w", group="example.org"), "other")),
        None,
        "",
    ),
    (
        "a-subgroup-is-another-group",
        slots(desired(widget("w", group="sub.example.com"), "other")),
        None,
        "",
    ),
    (
        "core-objects-are-not-custom-resources",
        slots(desired(cm("x"), "other")),
        None,
        "",
    ),
]


@pytest.mark.parametrize(
    ("case", "entries", "kind", "why"), CRD_CASES, ids=[c[0] for c in CRD_CASES]
)
def test_crd_in_use(case: str, entries: Slots, kind: str | None, why: str) -> None:
    assert in_use(CRD, entries, pruning="b", crd_kind=kind) == why


@pytest.mark.parametrize(
    "key",
    [
        cm("x"),
        ObjectKey("apps", "Deployment", "team-a", "web"),
        ObjectKey("example.com", "Namespace", "", "team-a"),  # a CR named like a core kind
        ObjectKey("rbac.authorization.k8s.io", "ClusterRole", "", "team-a"),
    ],
    ids=str,
)
def test_other_kinds_hold_nothing(key: ObjectKey) -> None:
    everything = slots(desired(cm("x"), "other"), live(widget("w"), "other"), live(cm("y"), "o"))
    assert in_use(key, everything, pruning="b") == ""


def test_at_most_max_named_objects_are_named() -> None:
    many = slots(*(desired(cm(f"cm-{i:02}"), "other") for i in range(MAX_NAMED + 7)))
    why = in_use(NS, many, pruning="b")
    assert why.count("(bundle other)") == MAX_NAMED
    assert why.endswith(" and 7 more")


@pytest.mark.parametrize(
    ("manifest", "kind"),
    [
        ({"spec": {"names": {"kind": "Widget", "plural": "widgets"}}}, "Widget"),
        ({"spec": {"names": {"kind": ""}}}, None),
        ({"spec": {"names": {"kind": 7}}}, None),
        ({"spec": {"names": ["Widget"]}}, None),
        ({"spec": "Widget"}, None),
        ({"metadata": {"name": "widgets.example.com"}}, None),
    ],
    ids=["kind", "empty", "not-a-string", "names-not-a-map", "spec-not-a-map", "no-spec"],
)
def test_crd_kind(manifest: dict[str, Any], kind: str | None) -> None:
    assert crd_kind(manifest) == kind


# --- the planner keeps what in_use names ---------------------------------------------------------

HOLDS = "not pruned: still holds ConfigMap/team-a/x (bundle other)"
DRIFTED = hashlib.sha256(b"someone-else-changed-it").digest()


def planned(key: ObjectKey, events: list[Event]) -> tuple[Entry, Decision | None]:
    e, d = Entry(key), None
    for ev in events:
        e, d = step(e, ev)
    return e, d


APPLIED_AND_LIVE: list[Event] = [
    Desired("b", "r1", M),
    Applied(M, S, 10, bundle="b"),
    Observed(10, S, owner_bundle="b", api_version="v1"),
]


def test_a_namespace_in_use_is_kept() -> None:
    _, d = planned(NS, [*APPLIED_AND_LIVE, Removed("b", "r2", in_use=HOLDS)])
    assert d == Decision(A.KEEP, R.IN_USE)


def test_a_namespace_no_longer_in_use_is_pruned() -> None:
    _, d = planned(NS, [*APPLIED_AND_LIVE, Removed("b", "r2")])
    assert d == Decision(A.DELETE, R.PRUNE)


@pytest.mark.parametrize(
    ("key", "manifest"),
    [(NS, "Namespace"), (CRD, "CustomResourceDefinition")],
    ids=["namespace", "crd"],
)
def test_an_apply_on_its_way_does_not_make_a_container_in_use_deletable(
    key: ObjectKey, manifest: str
) -> None:
    # r1's correction of a drifted Namespace (or CRD) is on its way (a webhook is down: it is
    # retried for minutes) when r2 drops it while another bundle's objects are still inside
    e, d = planned(key, [*APPLIED_AND_LIVE, Observed(11, DRIFTED, owner_bundle="b")])
    assert d == Decision(A.APPLY, R.DRIFT), manifest
    _, d = step(e, Removed("b", "r2", in_use=HOLDS))
    assert d == Decision(A.KEEP, R.IN_USE), f"{manifest} deleted with what it holds: {d}"
