"""Field-level differences between two pruned objects, for ``driftbus plan`` and the status
page's object detail.

Pure. Paths read like kubectl's (``spec.template.spec.containers[0].image``). Sensitive values
are masked on both sides — a Secret's data, and containers' ``env[].value`` (where credentials
end up in practice) — so a plan can say *that* ``data.password`` changes, never to what. A live
object is compared only after ``project`` cut it to the manifest's shape: no live subtree the
manifest does not declare is ever a value of a change (``Withheld`` says its type instead).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from services.core.scrub import MASK

_ABSENT = object()


@dataclasses.dataclass(frozen=True)
class Change:
    path: str
    old: Any  # None with ``added``
    new: Any  # None with ``removed``
    added: bool = False
    removed: bool = False

    def __str__(self) -> str:
        if self.added:
            return f"+ {self.path}: {_short(self.new)}"
        if self.removed:
            return f"- {self.path}: {_short(self.old)}"
        return f"~ {self.path}: {_short(self.old)} → {_short(self.new)}"


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def diff(old: Any, new: Any, path: str = "") -> list[Change]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[Change] = []
        for k in sorted(old.keys() | new.keys()):
            sub = f"{path}.{k}" if path else str(k)
            a, b = old.get(k, _ABSENT), new.get(k, _ABSENT)
            if a is _ABSENT:
                out.append(Change(sub, None, b, added=True))
            elif b is _ABSENT:
                out.append(Change(sub, a, None, removed=True))
            else:
                out += diff(a, b, sub)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out += diff(a, b, f"{path}[{i}]")
        return out
    return [] if old == new else [Change(path, old, new)]


@dataclasses.dataclass(frozen=True)
class Withheld:
    """A live mapping or list where the manifest declares no such subtree (a scalar, or the
    other kind of container): only its type is shown, never its content — the manifest is
    what decides which live fields a difference may show."""

    type: str
    """``mapping`` or ``list``."""

    def __repr__(self) -> str:
        return f"(a {self.type})"


def _withheld(live: Any) -> Any:
    if isinstance(live, dict):
        return Withheld("mapping")
    if isinstance(live, list):
        return Withheld("list")
    return live


def project(live: Any, desired: Any) -> Any:
    """``live`` cut to the shape of ``desired``: only the keys ``desired`` sets (at every depth
    of nested mappings, and item by item in lists), so a diff shows what differs from the
    manifest, not the server's defaults and status. A live mapping or list is returned only
    where ``desired`` has one of the same kind, and then cut to it: elsewhere (a scalar in the
    manifest, or the other kind of container) it is a ``Withheld``, its type without its
    content. A list whose length differs keeps its extra live items, scalars as they are,
    containers withheld (the manifest declared nothing of them)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return _withheld(live)
        return {k: project(live[k], v) for k, v in desired.items() if k in live}
    if isinstance(desired, list):
        if not isinstance(live, list):
            return _withheld(live)
        paired = [project(a, b) for a, b in zip(live, desired, strict=False)]
        return paired + [_withheld(a) for a in live[len(desired) :]]
    return _withheld(live)


_ENV_PATH = re.compile(r"(?:^|\.)env(?:\[\d+\](?:\.value)?)?$")


def _redact_env(value: Any) -> Any:
    """``value`` with every env entry's ``value`` replaced by the mask, at any depth."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "env" and isinstance(v, list):
                out[k] = [
                    {**e, "value": MASK} if isinstance(e, dict) and "value" in e else e for e in v
                ]
            else:
                out[k] = _redact_env(v)
        return out
    if isinstance(value, list):
        return [_redact_env(v) for v in value]
    return value


def _redact_at(path: str, value: Any) -> Any:
    if value is None:
        return None
    m = _ENV_PATH.search(path)
    if m is None:
        return _redact_env(value)
    if path.endswith(".value"):
        return MASK
    if path.endswith("]"):  # one env entry
        return {**value, "value": MASK} if isinstance(value, dict) and "value" in value else value
    return _redact_env({"env": value})["env"]  # the whole env list


def mask_sensitive(changes: list[Change], kind: str) -> list[Change]:
    """Hide sensitive values: the path and the fact of the change stay, the values do not (not
    even a hash of them: weak passwords would be guessable). A Secret's data/stringData, and
    every ``env[].value`` of any kind (a credential in a Deployment's env is still one)."""
    out = []
    for c in changes:
        if kind == "Secret" and c.path.startswith(("data", "stringData")):
            c = dataclasses.replace(
                c, old=None if c.added else MASK, new=None if c.removed else MASK
            )
        else:
            c = dataclasses.replace(c, old=_redact_at(c.path, c.old), new=_redact_at(c.path, c.new))
        out.append(c)
    return out
