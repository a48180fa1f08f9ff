"""Subject/key encoding: reversible, token-safe, KV-safe, collision-free."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.subjects import (
    MAX_SUBJECT_LEN,
    ObjectKey,
    SubjectError,
    bundle_status_filter,
    bundle_status_subject,
    bundle_statuses_filter,
    bundle_subject,
    decode_token,
    encode_token,
    key_tokens,
    object_status_subject,
    object_subject,
    parse_subject,
    source_status_filter,
    source_status_subject,
    tenant_bundle_filter,
    tenant_status_filter,
)

# What nats-server's KV layer accepts as a key, and what a subject token may not contain.
KV_KEY = re.compile(r"^[-/_=.A-Za-z0-9]+$")
FORBIDDEN_IN_TOKEN = re.compile(r"[.*>\s]")

values = st.text(max_size=80)
keys = st.builds(ObjectKey, group=values, kind=values, namespace=values, name=values)


@given(values)
def test_token_round_trip(value: str) -> None:
    assert decode_token(encode_token(value)) == value


@given(values)
def test_token_has_no_separator_wildcard_or_whitespace(value: str) -> None:
    token = encode_token(value)
    assert token
    assert not FORBIDDEN_IN_TOKEN.search(token)
    assert KV_KEY.match(token)


@given(values, values)
def test_distinct_values_never_share_a_token(a: str, b: str) -> None:
    if a != b:
        assert encode_token(a) != encode_token(b)


@given(keys, keys)
def test_distinct_keys_never_collide(a: ObjectKey, b: ObjectKey) -> None:
    if a != b:
        assert key_tokens(a) != key_tokens(b)


@given(st.text(min_size=1, max_size=40), keys)
def test_object_subject_round_trip_and_is_a_valid_kv_key(cluster: str, key: ObjectKey) -> None:
    for family in ("server", "applied", "intent", "decision"):
        subject = object_subject(family, cluster, key)
        assert KV_KEY.match(subject)
        parsed = parse_subject(subject)
        assert (parsed.family, parsed.cluster, parsed.key) == (family, cluster, key)


bundles = st.text(min_size=1, max_size=60).filter(lambda b: not b.startswith("/"))


@given(st.text(min_size=1, max_size=40), bundles, keys)
def test_status_and_bundle_subjects_round_trip(cluster: str, bundle: str, key: ObjectKey) -> None:
    p = parse_subject(bundle_subject(cluster, bundle))
    assert (p.family, p.cluster, p.bundle) == ("bundle", cluster, bundle)
    p = parse_subject(bundle_status_subject(cluster, bundle))
    assert (p.family, p.cluster, p.bundle) == ("status.bundle", cluster, bundle)
    p = parse_subject(object_status_subject(cluster, bundle, key))
    assert (p.family, p.cluster, p.bundle, p.key) == ("status.object", cluster, bundle, key)


@pytest.mark.parametrize(
    ("key", "tokens"),
    [
        (ObjectKey("", "ConfigMap", "team-a", "settings"), "=.ConfigMap.team-a.settings"),
        (ObjectKey("apps", "Deployment", "shop", "web"), "apps.Deployment.shop.web"),
        (
            ObjectKey("rbac.authorization.k8s.io", "ClusterRole", "", "system:aggregate-to-admin"),
            "rbac=2Eauthorization=2Ek8s=2Eio.ClusterRole.=.system=3Aaggregate-to-admin",
        ),
        (ObjectKey("", "Namespace", "", "prod"), "=.Namespace.=.prod"),
        (ObjectKey("x.io", "Thing", "ns", "a.b=c"), "x=2Eio.Thing.ns.a=2Eb=3Dc"),
    ],
    ids=["core-group", "named-group", "dotted-group-cluster-scoped-colon", "namespace", "escape"],
)
def test_readable_examples(key: ObjectKey, tokens: str) -> None:
    assert key_tokens(key) == tokens


def test_maximum_length_names_fit_in_a_subject() -> None:
    # The longest legal Kubernetes values: 253-character dotted names and groups.
    longest = ".".join(["a" * 63] * 3) + "." + "b" * 61
    assert len(longest) == 253
    key = ObjectKey(group=longest, kind="K" * 63, namespace="n" * 63, name=longest)
    subject = object_status_subject("c" * 63, longest, key)
    assert len(subject) <= MAX_SUBJECT_LEN
    assert parse_subject(subject).key == key


def test_subject_over_the_limit_is_refused_with_a_reason() -> None:
    huge = ObjectKey("g", "K", "ns", "☃" * 400)
    with pytest.raises(SubjectError, match="exceeds"):
        object_subject("server", "c", huge)


@pytest.mark.parametrize("bad", ["a=", "a.b", "=4", "=zz", "a b", "=FF", "*", ">"])
def test_malformed_tokens_are_refused(bad: str) -> None:
    with pytest.raises(SubjectError):
        decode_token(bad)


@pytest.mark.parametrize(
    "subject",
    ["nats.server.c.a.b.c.d", "driftbus.server.c.a.b", "driftbus.nope.c.x", "driftbus.bundle"],
)
def test_foreign_subjects_are_refused(subject: str) -> None:
    with pytest.raises(SubjectError):
        parse_subject(subject)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n"}},
            ObjectKey("", "ConfigMap", "n", "a"),
        ),
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w"}},
            ObjectKey("apps", "Deployment", "", "w"),
        ),
    ],
    ids=["core", "grouped-no-namespace"],
)
def test_key_of_raw_object(obj: dict[str, object], expected: ObjectKey) -> None:
    assert ObjectKey.of(obj) == expected


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({"kind": "ConfigMap", "metadata": {"name": "a"}}, "ConfigMap/a: apiVersion is missing"),
        ({"apiVersion": "v1", "metadata": {"name": "a"}}, r"\?/a: kind is missing"),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}},
            r"ConfigMap/\?: metadata.name is missing",
        ),
        ({"apiVersion": "v1", "kind": "ConfigMap"}, r"ConfigMap/\?: metadata.name is missing"),
    ],
    ids=["no-apiVersion", "no-kind", "no-name", "no-metadata"],
)
def test_key_of_incomplete_object_names_what_is_missing(
    obj: dict[str, object], reason: str
) -> None:
    with pytest.raises(SubjectError, match=reason):
        ObjectKey.of(obj)


@pytest.mark.parametrize(
    ("bundle", "subject"),
    [
        ("web", "driftbus.bundle.c.=.web"),
        ("team-a/web", "driftbus.bundle.c.team-a.web"),
        ("team-a.web", "driftbus.bundle.c.=.team-a=2Eweb"),
    ],
)
def test_a_bundles_tenant_is_a_token_of_its_own(bundle: str, subject: str) -> None:
    assert bundle_subject("c", bundle) == subject
    assert parse_subject(subject).bundle == bundle


def _matches(pattern: str, subject: str) -> bool:
    """NATS wildcard matching: ``*`` one token, ``>`` the rest."""
    p, s = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(s) > i
        if i >= len(s) or (token != "*" and token != s[i]):
            return False
    return len(p) == len(s)


TEAM_A_BUNDLES = [
    ("team-a/web", True),
    ("team-a/x.y", True),
    ("team-b/web", False),
    ("team-a", False),  # a platform bundle named like the tenant
    ("team-a.web", False),
    ("web", False),
    ("team-a-b/web", False),
    ("team/web", False),
]
"""Bundles, and whether they are tenant team-a's: what its subjects and rights must tell."""


@pytest.mark.parametrize(("bundle", "mine"), TEAM_A_BUNDLES)
def test_a_tenants_filters_match_its_bundles_only(bundle: str, mine: bool) -> None:
    key = ObjectKey("", "ConfigMap", "ns", "x")
    assert _matches(tenant_bundle_filter("c", "team-a"), bundle_subject("c", bundle)) is mine
    for subject in (
        bundle_status_subject("c", bundle),
        object_status_subject("c", bundle, key),
        source_status_subject("c", bundle),
    ):
        assert _matches(tenant_status_filter("c", "team-a"), subject) is mine
        assert _matches(bundle_status_filter("c", bundle), subject)
    assert _matches(bundle_statuses_filter("c"), bundle_status_subject("c", bundle))
    assert (
        _matches(bundle_statuses_filter("c", "team-a"), bundle_status_subject("c", bundle)) is mine
    )
    platform = "/" not in bundle
    assert _matches(bundle_statuses_filter("c", ""), bundle_status_subject("c", bundle)) is platform
    assert _matches(source_status_filter("c"), source_status_subject("c", bundle))
