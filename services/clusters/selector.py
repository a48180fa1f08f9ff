"""Label selectors, label changes and cluster specs, read as Kubernetes and kubectl read them.

``parse_selector`` follows ``labels.Parse`` (k8s.io/apimachinery/pkg/labels/selector.go): same
tokens, same quirks (``k=`` and ``k in ()`` mean the value ""), same matching (``!=`` and
``notin`` match a missing key). Two differences: ``==`` is read as ``=``, so a selector has one
canonical form, and the integer operators ``>``/``<`` are refused. Input is bounded (4096
characters, 64 requirements). Pure, no I/O; every error names the text it is about.

A cluster's labels can be unknown (no registry entry, removed, or an entry that cannot be read):
``selects`` reads them as None, never as ``{}``, and then only the empty selector selects it —
``env!=prod`` does not, although it matches a known cluster without ``env``.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final, Literal, NoReturn, get_args

MAX_SELECTOR_CHARS: Final = 4096
MAX_REQUIREMENTS: Final = 64

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_CHARSET = 'letters, digits, "-", "_" and ".", starting and ending with a letter or digit'
# The lexer of labels.Parse: whitespace is " \t\r\n"; a word runs to whitespace or a symbol.
_TOKEN = re.compile(r"!=|==|[=!(),<>]|[^ \t\r\n=!(),<>]+")
_END = ""
_NOT_WORDS = frozenset({"!=", "==", "=", "!", "(", ")", ",", "<", ">", _END})


class SelectorError(ValueError):
    """A label selector that does not parse, or a requirement that cannot exist."""


class LabelError(ValueError):
    """A label key or value Kubernetes would refuse, or contradictory label changes."""


# In canonical order. `exists` is written `k`, `!` is `!k`; `k==v` is read as `k=v`.
Op = Literal["=", "!=", "in", "notin", "exists", "!"]
_OPS: Final[tuple[Op, ...]] = get_args(Op)
# Operators after a key: `in`/`notin` are keywords only there (`in in (notin)` is valid).
_BINARY: Final[dict[str, Op]] = {"=": "=", "==": "=", "!=": "!=", "in": "in", "notin": "notin"}


def _q(text: str, limit: int = 200) -> str:
    """Double-quoted and escaped (no control character reaches a log), cut after ``limit``."""
    return json.dumps(text[:limit]) + ("…" if len(text) > limit else "")


def check_label_key(key: str) -> None:
    """Raise LabelError unless ``key`` is a valid label key: ``[DNS-subdomain/]name``."""
    prefix, slash, name = key.rpartition("/")
    problem = None
    if "/" in prefix:
        problem = 'more than one "/" (a key is an optional DNS-subdomain prefix, "/", a name)'
    elif slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        problem = f"the prefix {_q(prefix)} must be a DNS subdomain (a-z 0-9 - ., ≤ 253)"
    elif not name or len(name) > 63 or not _NAME.fullmatch(name):
        problem = f"the name {_q(name)} must be 1 to 63 {_CHARSET}"
    if problem:
        raise LabelError(f"label key {_q(key)}: {problem}")


def check_label_value(value: str, *, key: str | None = None) -> None:
    """Raise LabelError unless ``value`` is a valid label value (the empty string is)."""
    if len(value) > 63 or (value and not _NAME.fullmatch(value)):
        of = "" if key is None else f" of label {_q(key)}"
        raise LabelError(f"label value {_q(value)}{of}: must be 0 to 63 {_CHARSET}")


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One condition on one key; ``in``/``notin`` values are kept sorted and unique."""

    key: str
    op: Op
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        sets = self.op in ("in", "notin")
        values = tuple(sorted(set(self.values))) if sets else tuple(self.values)
        # in/notin take one value or more, = and != exactly one, exists and ! none
        arity = len(values) > 0 if sets else len(values) == (self.op in ("=", "!="))
        if self.op not in _OPS or not arity:
            raise SelectorError(f"requirement {_q(self.key)} {self.op} with {len(values)} values")
        check_label_key(self.key)
        for value in values:
            check_label_value(value, key=self.key)
        object.__setattr__(self, "values", values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op in ("exists", "!"):
            return (self.key in labels) == (self.op == "exists")
        hit = self.key in labels and labels[self.key] in self.values
        return hit if self.op in ("=", "in") else not hit  # `!=`, `notin`: an absent key matches

    def __str__(self) -> str:
        if self.op in ("in", "notin"):
            return f"{self.key} {self.op} ({','.join(self.values)})"
        if self.op in ("exists", "!"):
            return self.key if self.op == "exists" else f"!{self.key}"
        return f"{self.key}{self.op}{self.values[0]}"


@dataclasses.dataclass(frozen=True)
class Selector:
    """All requirements must match (AND); no requirement matches every label set."""

    requirements: tuple[Requirement, ...] = ()

    def __post_init__(self) -> None:
        ordered = sorted(self.requirements, key=lambda r: (r.key, _OPS.index(r.op), r.values))
        object.__setattr__(self, "requirements", tuple(ordered))

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        """Canonical: by key then operator, values sorted; ``parse_selector`` reads it back."""
        return ",".join(str(r) for r in self.requirements)


def selects(selector: Selector, labels: Mapping[str, str] | None) -> bool:
    """Whether ``selector`` selects an object whose labels are ``labels``; None: they are
    unknown, which matches no requirement (not ``!=``, ``notin`` or ``!k`` either): only the
    empty selector, which depends on no label, selects it."""
    return selector.matches(labels) if labels is not None else selector.empty


def parse_selector(text: str) -> Selector:
    """A kubectl ``-l`` selector; "" (or only whitespace) is the empty one, matching all."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"selector {_q(text, 80)}: over {MAX_SELECTOR_CHARS} characters")
    return _Parser(text).selector()


class _Parser:
    """labels.Parse's recursive descent over (token, offset) pairs, ending with ("", len)."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0
        self.tokens = [(m.group(), m.start()) for m in _TOKEN.finditer(text)] + [(_END, len(text))]

    def fail(self, reason: str, pos: int, found: str | None = None) -> NoReturn:
        if found is not None:
            reason += f", found {_q(found) if found else 'the end'}"
        where = "at the end" if pos >= len(self.text) else f"at column {pos + 1}"
        raise SelectorError(f"selector {_q(self.text)}: {reason} ({where})")

    def take(self) -> tuple[str, int]:
        self.at += 1
        return self.tokens[self.at - 1]

    def peek(self) -> str:
        return self.tokens[self.at][0]

    def selector(self) -> Selector:
        reqs: list[Requirement] = []
        tok = _END if self.peek() == _END else ","
        while tok == ",":
            start = self.tokens[self.at][1]
            if len(reqs) == MAX_REQUIREMENTS:
                self.fail(f"more than {MAX_REQUIREMENTS} requirements", start)
            try:  # the requirement checks its key and values
                reqs.append(self.requirement())
            except LabelError as e:
                self.fail(str(e), start)
            tok, pos = self.take()
            if tok not in (",", _END):
                self.fail('expected "," or the end', pos, tok)
        return Selector(tuple(reqs))

    def requirement(self) -> Requirement:
        key, pos = self.take()
        if negated := key == "!":
            key, pos = self.take()
        if key in _NOT_WORDS:
            self.fail("expected a label key", pos, key)
        if self.peek() in (",", _END):
            return Requirement(key, "!" if negated else "exists")
        tok, pos = self.take()
        if negated or tok not in _BINARY:
            wanted = '"," or the end' if negated else "one of =, ==, !=, in, notin (not > or <)"
            self.fail(f"expected {wanted} after {_q(key)}", pos, tok)
        if tok in ("in", "notin"):
            return Requirement(key, _BINARY[tok], tuple(self.value_set(tok)))
        value, pos = ("", 0) if self.peek() in (",", _END) else self.take()  # `k=`: the value ""
        if value and value in _NOT_WORDS:
            self.fail(f"expected a value after {_q(tok)}", pos, value)
        return Requirement(key, _BINARY[tok], (value,))

    def value_set(self, op: str) -> list[str]:
        tok, pos = self.take()
        if tok != "(":
            self.fail(f'expected "(" after {_q(op)}', pos, tok)
        values = []
        while True:  # `( item (, item)* )`, an item a word or nothing: the value ""
            tok, pos = self.take()
            values.append(tok if tok not in _NOT_WORDS else "")
            if tok not in _NOT_WORDS:
                tok, pos = self.take()
            if tok == ")":
                return values
            if tok == _END:
                self.fail('missing ")"', pos)
            if tok != ",":
                self.fail('expected "," or ")"', pos, tok)


def _add(labels: dict[str, str], key: str, value: str) -> None:
    check_label_key(key)
    check_label_value(value, key=key)
    if labels.setdefault(key, value) != value:
        raise LabelError(f"label {_q(key)} is given twice: {_q(labels[key])} and {_q(value)}")


def parse_label_changes(args: Sequence[str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """``kubectl label`` arguments: ``KEY=VALUE`` sets, ``KEY-`` removes → (sets, removals)."""
    sets: dict[str, str] = {}
    removals: dict[str, None] = {}  # ordered, without repeats
    for arg in args:
        key, eq, value = arg.partition("=")
        try:
            if eq:
                _add(sets, key, value)
            elif arg.endswith("-"):
                check_label_key(arg[:-1])
                removals[arg[:-1]] = None
            else:
                raise LabelError("expected KEY=VALUE to set a label or KEY- to remove it")
        except LabelError as e:
            raise LabelError(f"label change {_q(arg)}: {e}") from None
    if both := sorted(sets.keys() & removals.keys()):
        raise LabelError(f"label {_q(both[0])} is both set and removed")
    return sets, tuple(removals)


def parse_cluster_spec(text: str) -> tuple[str, dict[str, str]]:
    """``NAME`` or ``NAME:KEY=VALUE,KEY=VALUE`` → (name, labels)."""
    name, colon, rest = text.partition(":")
    labels: dict[str, str] = {}
    try:
        if not _DNS_LABEL.fullmatch(name):
            raise LabelError('a cluster name is a DNS label (lower-case letters, digits, "-")')
        for item in rest.split(",") if colon else ():
            key, eq, value = item.partition("=")
            if not eq:
                raise LabelError(f'expected KEY=VALUE after ":", found {_q(item)}')
            _add(labels, key, value)
    except LabelError as e:
        raise LabelError(f"cluster {_q(text)}: {e}") from None
    return name, labels
