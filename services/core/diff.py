"""Field-level differences between two pruned objects, for ``driftbus plan``.

Pure. Paths read like kubectl's (``spec.template.spec.containers[0].image``); a Secret's values
are masked on both sides, so a plan can say *that* ``data.password`` changes, never to what.
"""

from __future__ import annotations

import dataclasses
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


def mask_secret(changes: list[Change], kind: str) -> list[Change]:
    """For a Secret, hide every value under data/stringData: the path and the fact of the change
    stay, the values do not (not even a hash of them: weak passwords would be guessable)."""
    if kind != "Secret":
        return changes
    return [
        dataclasses.replace(
            c,
            old=None if c.added else MASK,
            new=None if c.removed else MASK,
        )
        if c.path.startswith(("data.", "stringData.", "data", "stringData"))
        else c
        for c in changes
    ]
