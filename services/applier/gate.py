"""Objects inside a namespace wait for that namespace's apply when this replica is making it.

The planner sends a revision's intents in apply order, Namespaces first, and a replica fetches
and starts them in that order, up to ``concurrency`` at once. Started together, a ConfigMap's
apply can still reach the API server before its new Namespace exists: a 404, a ``Waiting``
retry, and one wasted write per object that lost the race (possible by construction; not seen
in our runs, which is why this is a cheap in-process wait and not a planner stage). So an apply
into a namespace that this replica is applying right now waits for that apply to end first,
successful or not; an intent handled by another replica still races and is retried as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from schemas.messages import ApplyIntent, DeleteIntent

WAIT_LIMIT = 30.0
"""Seconds an object waits for its namespace's apply before going ahead anyway (a stuck apply
must not hold the objects back: theirs then fails or waits the usual way)."""


class NamespaceGate:
    """The Namespaces whose apply this replica has started and not finished."""

    def __init__(self, wait_limit: float = WAIT_LIMIT) -> None:
        self._creating: dict[str, asyncio.Event] = {}
        self._wait_limit = wait_limit

    def creating(self, namespace: str) -> bool:
        return namespace in self._creating

    def holds(self, intent: ApplyIntent | DeleteIntent) -> bool:
        """Whether ``turn`` will make the intent wait (its namespace's apply is under way here)."""
        ns = intent.key.namespace
        return bool(ns) and ns in self._creating

    @contextlib.asynccontextmanager
    async def turn(self, intent: ApplyIntent | DeleteIntent) -> AsyncIterator[None]:
        """Hold the intent until its namespace's apply here has ended; while an apply of a
        Namespace is inside this block, objects in it wait. The Namespace is registered before
        the first suspension, so intents started after it in the same fetch see it."""
        key = intent.key
        made = (
            key.name
            if isinstance(intent, ApplyIntent)
            and (key.group, key.kind) == ("", "Namespace")
            and key.name not in self._creating
            else None
        )
        if made is not None:
            self._creating[made] = asyncio.Event()
        elif key.namespace and (done := self._creating.get(key.namespace)) is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self._wait_limit)
        try:
            yield
        finally:
            if made is not None:
                self._creating.pop(made).set()
