"""Ignored fields (issue 15): rules as the CLI takes them, the annotation, removal and hashing."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.messages import Bundle, BundleOptions, IgnoreRule
from schemas.subjects import ObjectKey
from services.core.ignore import (
    IGNORE_ANNOTATION,
    IgnoreError,
    list_index,
    matches,
    owned_at,
    parse_rule,
    pointers_of,
    sparse,
    tokens,
    value_at,
    with_rules,
    without,
)
from services.core.manifest import ManifestError
from services.core.scope import Scopes
from services.core.sha import object_sha
from services.planner.rule.revision import checked_revision


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("apps/Deployment:/spec/replicas", IgnoreRule("Deployment", ["/spec/replicas"], "apps")),
        ("ConfigMap:/data/a,/data/b", IgnoreRule("ConfigMap", ["/data/a", "/data/b"])),
        ("ConfigMap/ns/x:/data/a", IgnoreRule("ConfigMap", ["/data/a"], "", "ns", "x")),
        (
            "admissionregistration.k8s.io/ValidatingWebhookConfiguration//hook:/webhooks/0/clientConfig/caBundle",
            IgnoreRule(
                "ValidatingWebhookConfiguration",
                ["/webhooks/0/clientConfig/caBundle"],
                "admissionregistration.k8s.io",
                "",
                "hook",
            ),
        ),
        (
            "apps/Deployment/*/web:/spec/replicas",
            IgnoreRule("Deployment", ["/spec/replicas"], "apps", "*", "web"),
        ),
    ],
    ids=["group-kind", "core-two-pointers", "core-named", "cluster-scoped", "any-namespace"],
)
def test_parse_rule(text: str, rule: IgnoreRule) -> None:
    assert parse_rule(text) == rule


@pytest.mark.parametrize(
    "text",
    [
        "apps/Deployment",
        "apps/Deployment:",
        ":/spec",
        "apps/Deployment:spec/replicas",
        "a/b/c/d/e:/x",
        "apps/:/x",
        "Deployment/ns/:/x",
        "D:/a~2b",
    ],
)
def test_bad_rules_are_refused_with_the_rule_named(text: str) -> None:
    with pytest.raises(IgnoreError, match=r"ignore rule|JSON pointer"):
        parse_rule(text)


def test_tokens_unescape() -> None:
    assert tokens("/metadata/annotations/a~1b~0c") == ["metadata", "annotations", "a/b~c"]


KEY = ObjectKey("apps", "Deployment", "ns", "web")


@pytest.mark.parametrize(
    ("rule", "hit"),
    [
        (IgnoreRule("Deployment", ["/x"], "apps"), True),
        (IgnoreRule("Deployment", ["/x"]), False),  # core group
        (IgnoreRule("Deployment", ["/x"], "apps", "ns", "web"), True),
        (IgnoreRule("Deployment", ["/x"], "apps", "other"), False),
        (IgnoreRule("Deployment", ["/x"], "apps", "*", "api"), False),
        (IgnoreRule("Deployment", ["/x"], "apps", ""), False),  # cluster-scoped only
    ],
)
def test_matches(rule: IgnoreRule, hit: bool) -> None:
    assert matches(rule, KEY) is hit


def _deploy(**annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "annotations": annotations},
        "spec": {
            "replicas": 3,
            "template": {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}},
        },
    }


def test_rules_merge_into_the_annotation_and_the_fields_go() -> None:
    manifest = _deploy(**{IGNORE_ANNOTATION: "/spec/template/spec/containers/1"})
    rules = [IgnoreRule("Deployment", ["/spec/replicas"], "apps"), IgnoreRule("Service", ["/spec"])]
    merged = with_rules(manifest, rules, KEY)
    assert merged["metadata"]["annotations"][IGNORE_ANNOTATION] == (
        "/spec/replicas,/spec/template/spec/containers/1"
    )
    assert (
        manifest["metadata"]["annotations"][IGNORE_ANNOTATION] == "/spec/template/spec/containers/1"
    )
    stripped = without(merged, pointers_of(merged))
    assert "replicas" not in stripped["spec"]
    assert stripped["spec"]["template"]["spec"]["containers"] == [{"name": "a"}]
    assert manifest["spec"]["replicas"] == 3  # never mutated
    assert with_rules(manifest, [IgnoreRule("Service", ["/spec"])], KEY) is manifest


def test_a_pointer_to_nothing_removes_nothing() -> None:
    obj = _deploy()
    assert without(obj, ["/spec/nothing/here", "/spec/template/spec/containers/7", "/x/0"]) == obj


def test_the_sha_of_a_live_object_leaves_its_ignored_fields_out() -> None:
    a = _deploy(**{IGNORE_ANNOTATION: "/spec/replicas"})
    b = {**a, "spec": {**a["spec"], "replicas": 9}}
    assert object_sha(a) == object_sha(b)
    assert object_sha(_deploy()) != object_sha({**_deploy(), "spec": {**a["spec"], "replicas": 9}})
    # an unusable entry on a live object is passed over, never an error
    assert pointers_of(_deploy(**{IGNORE_ANNOTATION: "spec, /spec/replicas ,"})) == [
        "/spec/replicas"
    ]


def test_value_ownership_and_the_hand_over_body() -> None:
    obj = _deploy()
    assert value_at(obj, "/spec/replicas") == (True, 3)
    assert value_at(obj, "/spec/template/spec/containers/1/name") == (True, "b")
    assert value_at(obj, "/spec/paused") == (False, None)
    fields = {"f:spec": {"f:replicas": {}, "f:template": {}}}
    assert owned_at(fields, "/spec/replicas")
    assert not owned_at(fields, "/spec/paused")
    assert not owned_at(None, "/spec/replicas")
    assert sparse(obj, "/spec/replicas", 3) == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": 3},
    }


def _bundle(manifests: list[Any], *rules: str) -> Bundle:
    return Bundle(
        cluster="c",
        bundle="b",
        revision="r1",
        options=BundleOptions(ignore=[parse_rule(r) for r in rules]),
        manifests=manifests,
    )


def test_the_planner_applies_neither_ignored_fields_nor_a_bad_annotation() -> None:
    manifests = [_deploy()]
    plain = checked_revision(_bundle(manifests), manifests, Scopes())
    ignoring = checked_revision(
        _bundle(manifests, "apps/Deployment:/spec/replicas"), manifests, Scopes()
    )
    assert plain[0][2] != ignoring[0][2]  # manifestSHA: the annotation and the field differ
    assert b'"replicas"' not in ignoring[0][1]
    assert IGNORE_ANNOTATION.encode() in ignoring[0][1]
    # the field's value in Git then changes nothing
    changed = [{**_deploy(), "spec": {**_deploy()["spec"], "replicas": 5}}]
    again = checked_revision(_bundle(changed, "apps/Deployment:/spec/replicas"), changed, Scopes())
    assert again[0][2] == ignoring[0][2]
    bad = [_deploy(**{IGNORE_ANNOTATION: "spec/replicas"})]
    with pytest.raises(
        ManifestError,
        match=r"manifests\[0\]: Deployment.apps/ns/web: 'spec/replicas' is not a JSON pointer",
    ):
        checked_revision(_bundle(bad), bad, Scopes())


@pytest.mark.parametrize(
    "pointer",
    [
        "/kind",
        "/apiVersion",
        "/metadata",
        "/metadata/name",
        "/metadata/namespace",
        "/metadata/labels",
        "/metadata/labels/driftbus.dev~1bundle",
        "/metadata/annotations",
        "/metadata/annotations/driftbus.dev~1ignore",
    ],
)
def test_identity_ownership_and_the_annotation_itself_cannot_be_ignored(pointer: str) -> None:
    with pytest.raises(IgnoreError, match="which driftbus needs"):
        parse_rule(f"ConfigMap:{pointer}")
    bad = [{**_deploy(**{IGNORE_ANNOTATION: pointer})}]
    with pytest.raises(ManifestError, match="which driftbus needs"):
        checked_revision(_bundle(bad), bad, Scopes())


def test_a_rule_without_pointers_is_refused() -> None:
    with pytest.raises(IgnoreError, match="no pointer"):
        parse_rule("Deployment:,")


def test_a_token_that_only_looks_like_a_number_is_no_index() -> None:
    obj = {"l": ["a", "b"]}
    assert list_index("1") == 1
    assert list_index("01") is None
    assert list_index("\u00b2") is None  # "²".isdigit() is True, int("²") raises
    assert without(obj, ["/l/\u00b2"]) == obj
    assert value_at(obj, "/l/\u00b2") == (False, None)


def test_only_an_annotation_driftbus_owns_switches_fields_off() -> None:
    """Someone else's ``driftbus.dev/ignore`` on a live object must not hide drift."""
    live = _deploy(**{IGNORE_ANNOTATION: "/spec"})
    live["metadata"]["managedFields"] = [
        {
            "manager": "driftbus",
            "operation": "Apply",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        }
    ]
    changed = {**live, "spec": {**live["spec"], "replicas": 4}}
    assert object_sha(changed) != object_sha(live)
