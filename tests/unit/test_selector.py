"""Label selectors as kubectl reads them: parse, match, canonical form, errors; label changes and
cluster specs. Rows are (id, input, expectation); the ids say the behaviour."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.clusters.selector import (
    MAX_REQUIREMENTS,
    MAX_SELECTOR_CHARS,
    LabelError,
    Requirement,
    Selector,
    SelectorError,
    check_label_key,
    check_label_value,
    parse_cluster_spec,
    parse_label_changes,
    parse_selector,
    selects,
)

PROD_EU = {"env": "prod", "topology.kubernetes.io/region": "eu", "tier": ""}

MATCHES: list[tuple[str, str, Mapping[str, str], bool]] = [
    # empty selector
    ("empty-matches-anything", "", PROD_EU, True),
    ("empty-matches-no-labels", "", {}, True),
    ("whitespace-only-is-empty", " \t\r\n ", {}, True),
    # =, ==
    ("equals-same-value", "env=prod", PROD_EU, True),
    ("equals-other-value", "env=dev", PROD_EU, False),
    ("equals-absent-key", "team=a", PROD_EU, False),
    ("double-equals-same-value", "env==prod", PROD_EU, True),
    ("double-equals-other-value", "env==dev", PROD_EU, False),
    ("equals-nothing-is-empty-value", "tier=", PROD_EU, True),
    ("equals-nothing-not-absent-key", "team=", PROD_EU, False),
    ("equals-nothing-not-other-value", "env=", PROD_EU, False),
    ("equals-is-case-sensitive", "env=Prod", PROD_EU, False),
    # !=
    ("not-equals-other-value", "env!=dev", PROD_EU, True),
    ("not-equals-same-value", "env!=prod", PROD_EU, False),
    ("not-equals-absent-key-matches", "team!=a", PROD_EU, True),
    ("not-equals-nothing-on-empty-value", "tier!=", PROD_EU, False),
    ("not-equals-nothing-on-absent-key", "team!=", PROD_EU, True),
    # in, notin
    ("in-one-of", "env in (dev,prod)", PROD_EU, True),
    ("in-none-of", "env in (dev,qa)", PROD_EU, False),
    ("in-absent-key", "team in (a,b)", PROD_EU, False),
    ("in-empty-parens-is-empty-value", "tier in ()", PROD_EU, True),
    ("in-empty-item-is-empty-value", "tier in (a,,b)", PROD_EU, True),
    ("in-leading-comma-is-empty-value", "tier in (,a)", PROD_EU, True),
    ("in-trailing-comma-is-empty-value", "tier in (a,)", PROD_EU, True),
    ("notin-none-of", "env notin (dev,qa)", PROD_EU, True),
    ("notin-one-of", "env notin (dev,prod)", PROD_EU, False),
    ("notin-absent-key-matches", "team notin (a,b)", PROD_EU, True),
    ("notin-empty-parens-excludes-empty-value", "tier notin ()", PROD_EU, False),
    # exists, !
    ("exists-present", "env", PROD_EU, True),
    ("exists-present-empty-value", "tier", PROD_EU, True),
    ("exists-absent", "team", PROD_EU, False),
    ("not-exists-absent", "!team", PROD_EU, True),
    ("not-exists-present", "!env", PROD_EU, False),
    ("not-exists-present-empty-value", "!tier", PROD_EU, False),
    # keywords as keys and values
    ("in-as-key-exists", "in", {"in": "x"}, True),
    ("in-as-key-and-value", "in in (notin)", {"in": "notin"}, True),
    ("notin-as-value", "k=notin", {"k": "notin"}, True),
    # prefixed keys
    ("prefixed-key-equals", "topology.kubernetes.io/region=eu", PROD_EU, True),
    ("prefixed-key-other-value", "topology.kubernetes.io/region=us", PROD_EU, False),
    ("prefixed-key-in", "topology.kubernetes.io/region in (eu,us)", PROD_EU, True),
    ("prefixed-key-not-exists", "!example.com/owner", PROD_EU, True),
    ("prefix-is-part-of-the-key", "region=eu", PROD_EU, False),
    # AND
    ("and-all-match", "env=prod,topology.kubernetes.io/region=eu,!team", PROD_EU, True),
    ("and-one-fails", "env=prod,team", PROD_EU, False),
    ("and-contradiction-matches-nothing", "env=prod,env=dev", PROD_EU, False),
    ("and-exists-and-not-exists", "env,!env", PROD_EU, False),
    # whitespace
    ("spaces-around-tokens", "  env = prod ,  tier  ", PROD_EU, True),
    ("tabs-and-newlines", "env\t==\nprod\r,\t!team", PROD_EU, True),
    ("space-after-bang", "! team", PROD_EU, True),
    ("no-space-before-parens", "env in(prod)", PROD_EU, True),
    ("spaces-inside-parens", "env notin ( dev , qa )", PROD_EU, True),
    ("equals-space-then-end-is-empty-value", "tier= ", PROD_EU, True),
    ("equals-space-then-comma-is-empty-value", "tier= ,env", PROD_EU, True),
    # values' own characters
    ("value-with-dots-dashes-underscores", "v=1.2-rc_3", {"v": "1.2-rc_3"}, True),
    ("upper-case-key-and-value", "App=Web", {"App": "Web"}, True),
]


@pytest.mark.parametrize(
    ("text", "labels", "expected"), [r[1:] for r in MATCHES], ids=[r[0] for r in MATCHES]
)
def test_selector_matches_as_kubernetes_does(
    text: str, labels: Mapping[str, str], expected: bool
) -> None:
    assert parse_selector(text).matches(labels) is expected


CANONICAL: list[tuple[str, str, str]] = [
    ("empty", "", ""),
    ("whitespace-dropped", "  a = b ,  c  ", "a=b,c"),
    ("double-equals-becomes-equals", "a==b", "a=b"),
    ("sorted-by-key", "z,y=1,x!=2", "x!=2,y=1,z"),
    (
        "same-key-sorted-by-operator",
        "!a,a,a notin (x),a in (x),a!=x,a=x",
        ("a=x,a!=x,a in (x),a notin (x),a,!a"),
    ),
    ("same-key-and-operator-by-values", "a=y,a=x", "a=x,a=y"),
    ("in-values-sorted-and-unique", "a in (c, b, a, b)", "a in (a,b,c)"),
    ("kubernetes-example", "x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
    ("empty-value-kept", "a=,b!=", "a=,b!="),
    ("empty-parens-kept", "a in ()", "a in ()"),
    ("repeated-requirement-kept", "a=b,a=b", "a=b,a=b"),
    ("prefixed-key", "topology.kubernetes.io/region=eu", "topology.kubernetes.io/region=eu"),
    ("keywords", "notin,in in (in,notin)", "in in (in,notin),notin"),
]


@pytest.mark.parametrize(
    ("text", "canonical"), [r[1:] for r in CANONICAL], ids=[r[0] for r in CANONICAL]
)
def test_canonical_string_parses_back_to_the_same_selector(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector
    assert str(parse_selector(canonical)) == canonical


PARSED: list[tuple[str, str, tuple[Requirement, ...]]] = [
    ("exists", "a", (Requirement("a", "exists"),)),
    ("does-not-exist", "!a", (Requirement("a", "!"),)),
    ("equals", "a=b", (Requirement("a", "=", ("b",)),)),
    ("double-equals-is-equals", "a==b", (Requirement("a", "=", ("b",)),)),
    ("not-equals", "a!=b", (Requirement("a", "!=", ("b",)),)),
    ("equals-nothing", "a=", (Requirement("a", "=", ("",)),)),
    ("in", "a in (b,c)", (Requirement("a", "in", ("b", "c")),)),
    ("notin-empty-items", "a notin (,b,,)", (Requirement("a", "notin", ("", "b")),)),
    ("in-empty-parens", "a in ()", (Requirement("a", "in", ("",)),)),
]


@pytest.mark.parametrize(
    ("text", "requirements"), [r[1:] for r in PARSED], ids=[r[0] for r in PARSED]
)
def test_each_operator_parses_to_its_requirement(
    text: str, requirements: tuple[Requirement, ...]
) -> None:
    assert parse_selector(text).requirements == requirements


ERRORS: list[tuple[str, str, str]] = [
    ("unclosed-parens", "env in (a", 'selector "env in (a": missing ")" (at the end)'),
    ("unclosed-empty-parens", "env in (", 'missing ")" (at the end)'),
    ("no-parens-after-in", "env in a", 'expected "(" after "in", found "a" (at column 8)'),
    ("nothing-after-notin", "env notin", 'expected "(" after "notin", found the end'),
    ("space-in-value-list", "a in (x y)", 'expected "," or ")", found "y" (at column 9)'),
    ("parens-in-value-list", "a in ((x))", 'expected "," or ")", found "(" (at column 7)'),
    ("trailing-comma", "a=b,", "expected a label key, found the end (at the end)"),
    ("leading-comma", ",a", 'expected a label key, found "," (at column 1)'),
    ("double-comma", "a,,b", 'expected a label key, found "," (at column 3)'),
    ("bang-alone", "!", "expected a label key, found the end"),
    ("double-bang", "!!a", 'expected a label key, found "!" (at column 2)'),
    ("bang-with-operator", "!a=b", 'expected "," or the end after "a", found "="'),
    ("bang-with-in", "!a in (b)", 'expected "," or the end after "a", found "in"'),
    ("two-words", "a b", 'after "a", found "b" (at column 3)'),
    ("or-is-not-a-selector", "a=b||c=d", 'label value "b||c" of label "a"'),
    ("triple-equals", "a===b", 'expected a value after "==", found "="'),
    ("chained-equals", "a=b=c", 'expected "," or the end, found "=" (at column 4)'),
    ("value-is-parens", "a=(b)", 'expected a value after "=", found "("'),
    ("greater-than-refused", "a>1", 'found ">" (at column 2)'),
    ("less-than-refused", "a<1", "not > or <"),
    ("keyword-cased", "a IN (b)", 'after "a", found "IN"'),
    ("operator-without-key", "=b", 'expected a label key, found "="'),
    ("bad-key-char", "Foo_=x", 'label key "Foo_": the name "Foo_" must be 1 to 63'),
    ("bad-key-start", "-a", 'label key "-a"'),
    ("key-two-slashes", "a/b/c", 'label key "a/b/c": more than one "/"'),
    ("key-empty-prefix", "/a", 'the prefix "" must be a DNS subdomain'),
    ("key-upper-case-prefix", "Example.com/a", 'the prefix "Example.com" must be a DNS'),
    ("key-empty-name", "example.com/", 'the name "" must be 1 to 63'),
    ("key-name-64-chars", "a" * 64, "must be 1 to 63"),
    ("key-prefix-254-chars", "a" * 254 + "/b", "must be a DNS subdomain"),
    ("value-bad-char", "a=b@c", 'label value "b@c" of label "a": must be 0 to 63'),
    ("value-ends-with-dash", "a=b-", 'label value "b-"'),
    ("value-64-chars", "a=" + "b" * 64, "must be 0 to 63"),
    ("value-in-list-bad", "a in (ok,no!)", 'found "!"'),
    ("value-in-list-slash", "a notin (x/y)", 'label value "x/y" of label "a"'),
    ("second-requirement-position", "ok,Bad_", 'label key "Bad_"'),
    ("control-char-escaped", "a=\x00", 'label value "\\u0000"'),
    ("unicode-space-is-not-whitespace", "a\u00a0=b", 'label key "a\\u00a0"'),
    ("vertical-tab-is-not-whitespace", "a=b\v", 'label value "b\\u000b"'),
]


@pytest.mark.parametrize(("text", "fragment"), [r[1:] for r in ERRORS], ids=[r[0] for r in ERRORS])
def test_bad_selector_error_says_what_and_where(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as caught:
        parse_selector(text)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("selector ")


def test_a_bad_requirement_is_located_by_its_column() -> None:
    with pytest.raises(SelectorError, match=r"\(at column 4\)$"):
        parse_selector("ok,Bad_")


@pytest.mark.parametrize(
    ("size", "accepted"),
    [(MAX_SELECTOR_CHARS, True), (MAX_SELECTOR_CHARS + 1, False)],
    ids=["at-the-limit", "over-the-limit"],
)
def test_selector_length_is_bounded(size: int, accepted: bool) -> None:
    text = "a=" + "b" * 60
    text += " " * (size - len(text))
    if accepted:
        assert not parse_selector(text).empty
    else:
        with pytest.raises(SelectorError, match=f"over {MAX_SELECTOR_CHARS} characters"):
            parse_selector(text)


@pytest.mark.parametrize(
    ("count", "accepted"),
    [(MAX_REQUIREMENTS, True), (MAX_REQUIREMENTS + 1, False)],
    ids=["at-the-limit", "over-the-limit"],
)
def test_requirement_count_is_bounded(count: int, accepted: bool) -> None:
    text = ",".join(f"k{i}" for i in range(count))
    if accepted:
        assert len(parse_selector(text).requirements) == count
    else:
        with pytest.raises(SelectorError, match=f"more than {MAX_REQUIREMENTS} requirements"):
            parse_selector(text)


def test_empty_property() -> None:
    assert parse_selector("").empty
    assert Selector().empty
    assert not parse_selector("a").empty


@pytest.mark.parametrize(
    ("text", "known", "unknown"),
    [
        # (selector, selects a known cluster with no labels, selects one whose labels are unknown)
        pytest.param("", True, True, id="empty-depends-on-no-label"),
        pytest.param("env=prod", False, False, id="equality"),
        pytest.param("env!=prod", True, False, id="inequality-is-not-a-missing-key"),
        pytest.param("env notin (prod)", True, False, id="notin-is-not-a-missing-key"),
        pytest.param("!frozen", True, False, id="absence-is-not-unknown"),
        pytest.param("gpu", False, False, id="existence"),
        pytest.param("env in (dev)", False, False, id="in"),
        pytest.param("!frozen,env!=prod", True, False, id="all-negative"),
    ],
)
def test_unknown_labels_are_selected_by_no_selector_that_reads_them(
    text: str, known: bool, unknown: bool
) -> None:
    """Issue 41 item 9: labels the registry cannot give (None) are not ``{}``: a negative
    requirement matches a missing key of known labels, never unknown ones."""
    selector = parse_selector(text)
    assert selects(selector, {}) is known
    assert selects(selector, None) is unknown


def test_selector_built_by_hand_is_ordered_like_a_parsed_one() -> None:
    by_hand = Selector((Requirement("b", "in", ("y", "x", "y")), Requirement("a", "!")))
    assert by_hand == parse_selector("!a,b in (x,y)")
    assert by_hand.requirements[1].values == ("x", "y")


REQUIREMENT_ERRORS: list[tuple[str, tuple[str, str, tuple[str, ...]], str]] = [
    ("equals-without-value", ("a", "=", ()), '"a" = with 0 values'),
    ("equals-two-values", ("a", "=", ("b", "c")), '"a" = with 2 values'),
    ("not-equals-without-value", ("a", "!=", ()), '"a" != with 0 values'),
    ("in-without-values", ("a", "in", ()), '"a" in with 0 values'),
    ("notin-without-values", ("a", "notin", ()), '"a" notin with 0 values'),
    ("exists-with-value", ("a", "exists", ("b",)), '"a" exists with 1 values'),
    ("not-exists-with-value", ("a", "!", ("b",)), '"a" ! with 1 values'),
    ("unknown-operator", ("a", ">", ("1",)), '"a" > with 1 values'),
]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [r[1:] for r in REQUIREMENT_ERRORS],
    ids=[r[0] for r in REQUIREMENT_ERRORS],
)
def test_requirement_refuses_wrong_values(
    args: tuple[str, str, tuple[str, ...]], fragment: str
) -> None:
    with pytest.raises(SelectorError, match=fragment):
        Requirement(*args)  # type: ignore[arg-type]


def test_requirement_checks_its_key_and_values() -> None:
    with pytest.raises(LabelError, match='label key "a b"'):
        Requirement("a b", "exists")
    with pytest.raises(LabelError, match='label value "x y" of label "a"'):
        Requirement("a", "in", ("ok", "x y"))


KEYS: list[tuple[str, str, str | None]] = [
    ("name", "a", None),
    ("all-name-characters", "A-b_c.d", None),
    ("digit", "0", None),
    ("63-character-name", "a" * 63, None),
    ("prefixed", "example.com/a", None),
    ("well-known-prefixed", "topology.kubernetes.io/region", None),
    ("prefix-with-dashes", "a-b.c-d/e", None),
    ("253-character-prefix", ("a" * 63 + ".") * 3 + "a" * 61 + "/x", None),
    ("empty", "", 'label key "": the name ""'),
    ("64-character-name", "a" * 64, "must be 1 to 63"),
    ("name-starts-with-dash", "-a", "must be 1 to 63"),
    ("name-ends-with-dot", "a.", "must be 1 to 63"),
    ("name-with-space", "a b", "must be 1 to 63"),
    ("name-with-final-newline", "a\n", "must be 1 to 63"),  # no Python "$" leniency
    ("non-ascii-name", "é", "must be 1 to 63"),
    ("prefix-with-underscore", "ex_ample.com/a", "must be a DNS subdomain"),
    ("prefix-with-empty-part", "example..com/a", "must be a DNS subdomain"),
    ("prefix-starts-with-dash", "-example.com/a", "must be a DNS subdomain"),
    ("254-character-prefix", ("a" * 63 + ".") * 3 + "a" * 62 + "/x", "must be a DNS subdomain"),
    ("two-slashes", "a/b/c", 'more than one "/"'),
]


@pytest.mark.parametrize(("key", "problem"), [r[1:] for r in KEYS], ids=[r[0] for r in KEYS])
def test_check_label_key(key: str, problem: str | None) -> None:
    if problem is None:
        check_label_key(key)
    else:
        with pytest.raises(LabelError, match=r"^label key ") as caught:
            check_label_key(key)
        assert problem in str(caught.value)


VALUES: list[tuple[str, str, bool]] = [
    ("empty", "", True),
    ("letter", "a", True),
    ("all-characters", "A-b_c.d", True),
    ("version", "1.2.3", True),
    ("63-characters", "b" * 63, True),
    ("64-characters", "b" * 64, False),
    ("starts-with-dash", "-a", False),
    ("ends-with-underscore", "a_", False),
    ("slash", "a/b", False),
    ("space", "a b", False),
    ("final-newline", "a\n", False),
]


@pytest.mark.parametrize(("value", "valid"), [r[1:] for r in VALUES], ids=[r[0] for r in VALUES])
def test_check_label_value(value: str, valid: bool) -> None:
    if valid:
        check_label_value(value)
        check_label_value(value, key="k")
    else:
        with pytest.raises(LabelError, match=r"^label value "):
            check_label_value(value)
        with pytest.raises(LabelError, match='of label "k": must be 0 to 63'):
            check_label_value(value, key="k")


LABEL_CHANGES: list[tuple[str, list[str], dict[str, str], tuple[str, ...]]] = [
    ("nothing", [], {}, ()),
    ("set", ["env=prod"], {"env": "prod"}, ()),
    ("set-empty-value", ["env="], {"env": ""}, ()),
    ("remove", ["env-"], {}, ("env",)),
    ("remove-prefixed", ["example.com/owner-"], {}, ("example.com/owner",)),
    ("set-and-remove-others", ["a=1", "b-", "c=2", "d-"], {"a": "1", "c": "2"}, ("b", "d")),
    ("same-value-twice", ["a=1", "a=1"], {"a": "1"}, ()),
    ("removed-twice-once", ["a-", "a-"], {}, ("a",)),
    ("removals-keep-their-order", ["z-", "a-"], {}, ("z", "a")),
]


@pytest.mark.parametrize(
    ("args", "sets", "removals"),
    [r[1:] for r in LABEL_CHANGES],
    ids=[r[0] for r in LABEL_CHANGES],
)
def test_label_changes(args: list[str], sets: dict[str, str], removals: tuple[str, ...]) -> None:
    assert parse_label_changes(args) == (sets, removals)


LABEL_CHANGE_ERRORS: list[tuple[str, list[str], str]] = [
    ("neither-set-nor-remove", ["env"], 'label change "env": expected KEY=VALUE'),
    ("set-twice-differently", ["a=1", "a=2"], 'label "a" is given twice: "1" and "2"'),
    ("set-and-removed", ["a=1", "a-"], 'label "a" is both set and removed'),
    ("removed-then-set", ["a-", "a=1"], 'label "a" is both set and removed'),
    ("bad-key", ["Bad_=x"], 'label change "Bad_=x": label key "Bad_"'),
    ("bad-value", ["a=b c"], 'label change "a=b c": label value "b c" of label "a"'),
    ("value-with-equals", ["a=b=c"], 'label value "b=c"'),
    ("empty-key", ["=b"], 'label key ""'),
    ("dash-alone", ["-"], 'label change "-": label key ""'),
    ("bad-key-removed", ["a/b/c-"], 'label key "a/b/c"'),
]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [r[1:] for r in LABEL_CHANGE_ERRORS],
    ids=[r[0] for r in LABEL_CHANGE_ERRORS],
)
def test_bad_label_changes(args: list[str], fragment: str) -> None:
    with pytest.raises(LabelError) as caught:
        parse_label_changes(args)
    assert fragment in str(caught.value)


CLUSTERS: list[tuple[str, str, tuple[str, dict[str, str]]]] = [
    ("name-only", "prod-eu-1", ("prod-eu-1", {})),
    ("digit-first", "1a", ("1a", {})),
    ("longest-name", "a" * 63, ("a" * 63, {})),
    ("one-label", "prod:env=prod", ("prod", {"env": "prod"})),
    (
        "labels-with-prefix",
        "prod:env=prod,topology.kubernetes.io/region=eu",
        ("prod", {"env": "prod", "topology.kubernetes.io/region": "eu"}),
    ),
    ("empty-value", "prod:tier=", ("prod", {"tier": ""})),
    ("same-label-twice", "prod:a=1,a=1", ("prod", {"a": "1"})),
]


@pytest.mark.parametrize(
    ("text", "expected"), [r[1:] for r in CLUSTERS], ids=[r[0] for r in CLUSTERS]
)
def test_cluster_spec(text: str, expected: tuple[str, dict[str, str]]) -> None:
    assert parse_cluster_spec(text) == expected


CLUSTER_ERRORS: list[tuple[str, str, str]] = [
    (
        "upper-case-and-underscore",
        "A_b",
        'cluster "A_b": a cluster name is a DNS label (lower-case letters, digits, "-")',
    ),
    ("empty", "", 'cluster "": a cluster name is a DNS label'),
    ("empty-name-with-labels", ":a=b", "a cluster name is a DNS label"),
    ("name-64-chars", "a" * 64, "a cluster name is a DNS label"),
    ("name-ends-with-dash", "prod-", "a cluster name is a DNS label"),
    ("name-with-dot", "prod.eu", "a cluster name is a DNS label"),
    ("colon-without-labels", "prod:", 'cluster "prod:": expected KEY=VALUE after ":", found ""'),
    ("label-without-value", "prod:env", 'expected KEY=VALUE after ":", found "env"'),
    ("trailing-comma", "prod:a=1,", 'found ""'),
    ("space-after-comma", "prod:a=1, b=2", 'label key " b"'),
    ("bad-value", "prod:a=x:y", 'label value "x:y" of label "a"'),
    ("label-twice-differently", "prod:a=1,a=2", 'label "a" is given twice: "1" and "2"'),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [r[1:] for r in CLUSTER_ERRORS], ids=[r[0] for r in CLUSTER_ERRORS]
)
def test_bad_cluster_spec(text: str, fragment: str) -> None:
    with pytest.raises(LabelError) as caught:
        parse_cluster_spec(text)
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("cluster ")


# Property: any set of requirements prints to a string that parses back to the same selector,
# and matching agrees with a reference reading of the Kubernetes rules.

KEYS_POOL = ["a", "b", "in", "notin", "app.kubernetes.io/name", "x-1.y_2"]
VALUES_POOL = ["", "v", "w", "in", "1.0", "A_b-c"]
_values = st.sampled_from(VALUES_POOL)
_requirement = st.one_of(
    st.builds(Requirement, st.sampled_from(KEYS_POOL), st.sampled_from(["exists", "!"])),
    st.builds(
        Requirement,
        st.sampled_from(KEYS_POOL),
        st.sampled_from(["=", "!="]),
        st.tuples(_values),
    ),
    st.builds(
        Requirement,
        st.sampled_from(KEYS_POOL),
        st.sampled_from(["in", "notin"]),
        st.lists(_values, min_size=1, max_size=4).map(tuple),
    ),
)
_selectors = st.lists(_requirement, max_size=8).map(lambda rs: Selector(tuple(rs)))
_labels = st.dictionaries(st.sampled_from(KEYS_POOL), _values, max_size=len(KEYS_POOL))


def reference_matches(selector: Selector, labels: Mapping[str, str]) -> bool:
    for r in selector.requirements:
        value = labels.get(r.key)
        ok = {
            "exists": value is not None,
            "!": value is None,
            "=": value is not None and (value,) == r.values,
            "in": value is not None and value in r.values,
            "!=": value is None or (value,) != r.values,
            "notin": value is None or value not in r.values,
        }[r.op]
        if not ok:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(selector=_selectors, labels=_labels)
def test_round_trip_and_matching_agree(selector: Selector, labels: dict[str, str]) -> None:
    parsed = parse_selector(str(selector))
    assert parsed == selector
    assert str(parsed) == str(selector)
    assert parsed.matches(labels) == selector.matches(labels) == reference_matches(selector, labels)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab=!(), \tinot/.-_", max_size=30))
def test_any_text_parses_or_raises_selector_error(text: str) -> None:
    try:
        selector = parse_selector(text)
    except SelectorError:
        return
    assert parse_selector(str(selector)) == selector
