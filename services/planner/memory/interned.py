"""Strings that repeat across the planner's packed entries (bundle names, revisions, API
versions) as small integer ids (pure; ``store`` keeps one table per store)."""

from __future__ import annotations


class Interned:
    """Interned strings as small ids; id 0 is the empty string. Ids no longer used are handed
    out again (``keep_only``), so a table that sees revision after revision does not grow."""

    def __init__(self) -> None:
        self.by_id: list[str] = [""]
        self.ids: dict[str, int] = {"": 0}
        self.free: list[int] = []

    def id(self, s: str) -> int:
        i = self.ids.get(s)
        if i is None:
            if self.free:
                i = self.free.pop()
                self.by_id[i] = s
            else:
                i = len(self.by_id)
                self.by_id.append(s)
            self.ids[s] = i
        return i

    def keep_only(self, used: set[int]) -> None:
        for i, s in enumerate(self.by_id):
            if i and i not in used and self.ids.get(s) == i:
                del self.ids[s]
                self.by_id[i] = ""
                self.free.append(i)

    def __len__(self) -> int:
        return len(self.ids)
