"""Fleet revisions checked once per replica (issue 43): what a kept check gives a cluster is
exactly what checking the revision for that cluster gives, and anything the check reads that
differs — the bundle's options, the scopes the cluster knows, the length of its name — is a
check of its own."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
import orjson
import pytest

from schemas.messages import Bundle, BundleOptions, ObjectStoreRef
from services.common.bus import OBJECT_STORE_BUCKET
from services.core.scope import Scopes
from services.planner.memory.checked import CheckedRevisions, Shape, revision_key
from services.planner.rule.revision import Plan, checked_revision

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "names": {"kind": "Widget", "plural": "widgets"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}
MANIFESTS: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "v"}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps", "namespace": "x"}},
    {"apiVersion": "gadgets.example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}},
    {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
    {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate", "annotations": {"helm.sh/hook": "pre-install"}},
        "spec": {"template": {"spec": {"containers": []}}},
    },
    WIDGET_CRD,
]
DATA = orjson.dumps(MANIFESTS)
SHA = hashlib.sha256(DATA).hexdigest()
REF = ObjectStoreRef(
    bucket=OBJECT_STORE_BUCKET, name=f"fleet/web/{SHA}", sha=SHA, size=len(DATA), count=6
)


def _bundle(cluster: str, **kw: Any) -> Bundle:
    fields: dict[str, Any] = {
        "cluster": cluster,
        "bundle": "web",
        "revision": "r1",
        "options": BundleOptions(namespace="apps"),
        "manifests_ref": REF,
        "fleet": True,
    }
    return Bundle(**(fields | kw))


def _scopes(gadget_namespaced: bool | None = True, widget_namespaced: bool | None = None) -> Scopes:
    """A cluster's scopes: its discovery knows Gadget (or not), and Widget only if told."""
    scopes = Scopes()
    if gadget_namespaced is not None:
        scopes.learn("gadgets.example.com", "Gadget", gadget_namespaced)
    if widget_namespaced is not None:
        scopes.learn("example.com", "Widget", widget_namespaced)
    return scopes


def _fresh(bundle: Bundle, cluster_scopes: Scopes) -> tuple[list[Any], Plan, Scopes]:
    scopes = cluster_scopes.for_revision(MANIFESTS)
    plan = Plan()
    return checked_revision(bundle, MANIFESTS, scopes, plan), plan, scopes


def _through(cache: CheckedRevisions, bundle: Bundle, cluster_scopes: Scopes) -> Any:
    """What the intake does: a kept check, or a fresh one kept."""
    key = revision_key(bundle)
    assert key is not None
    if (hit := cache.get(key, cluster_scopes, bundle.cluster)) is not None:
        return hit
    desired, plan, scopes = _fresh(bundle, cluster_scopes)
    cache.keep(key, MANIFESTS, scopes, desired, plan)
    return desired, plan, scopes


def _same(got: Any, bundle: Bundle, cluster_scopes: Scopes) -> None:
    desired, plan, scopes = _fresh(bundle, cluster_scopes)
    assert got[0] == desired
    assert got[2].namespaced("example.com", "Widget") == scopes.namespaced("example.com", "Widget")
    assert (got[1].stages, got[1].hooks, got[1].skipped) == (
        plan.stages,
        plan.hooks,
        plan.skipped,
    )


def test_a_second_cluster_gets_the_first_ones_check_in_its_own_slots() -> None:
    cache = CheckedRevisions(1 << 20)
    _through(cache, _bundle("c01"), _scopes())
    got = _through(cache, _bundle("c02"), _scopes())
    assert (cache.counts.hits, cache.counts.kept, len(cache)) == (1, 1, 1)
    assert {slot[0] for slot, _, _ in got[0]} == {"c02"}
    _same(got, _bundle("c02"), _scopes())


def test_each_cluster_gets_a_plan_of_its_own() -> None:
    cache = CheckedRevisions(1 << 20)
    _through(cache, _bundle("c01"), _scopes())
    first = _through(cache, _bundle("c02"), _scopes())
    first[1].stages.clear()
    first[1].hooks.clear()
    _same(_through(cache, _bundle("c03"), _scopes()), _bundle("c03"), _scopes())


@pytest.mark.parametrize(
    ("other", "scopes"),
    [
        # the bundle's options after the tenant's defaults: another default namespace
        (_bundle("c02", options=BundleOptions(namespace="other")), _scopes()),
        # another revision (hooks are stamped with it), another bundle (the owner label)
        (_bundle("c02", revision="r2"), _scopes()),
        (_bundle("c02", bundle="api"), _scopes()),
        # the cluster's discovery says the Gadget kind is cluster-scoped
        (_bundle("c02"), _scopes(gadget_namespaced=False)),
        # its discovery names Widget itself: the cluster's word wins over the revision's CRD
        (_bundle("c02"), _scopes(widget_namespaced=False)),
        # a longer name: the objects' subjects are longer (they must still fit)
        (_bundle("c002"), _scopes()),
    ],
)
def test_what_the_check_reads_differing_is_a_check_of_its_own(
    other: Bundle, scopes: Scopes
) -> None:
    cache = CheckedRevisions(1 << 20)
    _through(cache, _bundle("c01"), _scopes())
    got = _through(cache, other, scopes)
    assert (cache.counts.hits, len(cache)) == (0, 2)
    _same(got, other, scopes)


def test_a_refused_check_is_not_kept_and_inline_manifests_have_no_key() -> None:
    assert revision_key(_bundle("c01", manifests_ref=None, manifests=[MANIFESTS[0]])) is None
    cache = CheckedRevisions(1 << 20)
    key = revision_key(_bundle("c01"))
    assert key is not None
    assert cache.get(key, _scopes(), "c01") is None  # never checked
    with pytest.raises(Exception, match="Gadget"):
        _through(cache, _bundle("c01"), _scopes(gadget_namespaced=None))
    assert len(cache) == 0


def test_a_budget_of_nothing_keeps_nothing() -> None:
    cache = CheckedRevisions(0)
    _through(cache, _bundle("c01"), _scopes())
    _through(cache, _bundle("c02"), _scopes())
    assert (cache.counts.hits, len(cache)) == (0, 0)


def test_the_shape_names_every_kind_looked_up_and_the_revisions_crds() -> None:
    shape = Shape.of([*MANIFESTS, "not an object", {"kind": "NoVersion"}])
    assert shape.kinds == (
        ("", "ConfigMap"),
        ("", "Namespace"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("batch", "Job"),
        ("example.com", "Widget"),
        ("gadgets.example.com", "Gadget"),
    )
    assert shape.crds == (("example.com", "Widget", True),)
    assert msgspec.json.encode(shape.kinds)  # plain data: kept without the manifests
