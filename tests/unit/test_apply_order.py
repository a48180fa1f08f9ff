"""The apply order: prerequisites first, webhooks last; its text form sorts exactly the same."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import ObjectKey
from services.core.manifest import apply_order, apply_order_text

# names as Kubernetes allows them (no NUL), with the prefixes and empty parts that decide ties
part = st.text(alphabet="ab-.0Z", max_size=4)
kinds = st.sampled_from(
    [
        ("", "Namespace"),
        ("", "ConfigMap"),
        ("", "Service"),
        ("apps", "Deployment"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
        ("example.com", "Widget"),
    ]
)
keys = st.builds(lambda gk, ns, name: ObjectKey(gk[0], gk[1], ns, name), kinds, part, part)


@given(st.lists(keys, max_size=30))
def test_the_text_sorts_as_the_tuple_does(objects: list[ObjectKey]) -> None:
    assert sorted(objects, key=apply_order_text) == sorted(objects, key=apply_order)


def test_prerequisites_first_webhooks_last() -> None:
    ns = ObjectKey("", "Namespace", "", "z")
    cm = ObjectKey("", "ConfigMap", "a", "a")
    hook = ObjectKey("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "", "a")
    deploy = ObjectKey("apps", "Deployment", "a", "a")
    assert sorted([hook, deploy, cm, ns], key=apply_order_text) == [ns, cm, deploy, hook]
