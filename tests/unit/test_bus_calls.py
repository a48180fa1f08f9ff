"""NATS behind one door, for calls (issue 33; docs/architecture.md rule 7): outside
``services/common/bus/`` nothing calls a method of a NATS connection, JetStream context, bucket
or subscription; callers use the bus's functions (``bus.publish``, ``bus.request``,
``bus.subscribe``, ``bus.kv_get``, ``bus.bucket`` …), so that retries, timeouts and batching
live in one place. The import-linter contract keeps ``nats`` imports there; this test keeps the
calls.

Read with ``ast`` (nothing is imported). The method names are generic (``get``, ``publish``), so
a call counts only when its receiver is named like a NATS object: ``js``, ``nc``, ``kv``,
``bucket`` …, also as an attribute (``self.js``, ``c.nc``) or a suffix (``self._shard_kv``), or
is ``….jetstream()``. A dict called ``kv`` would be a false alarm: rename it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("services", "schemas", "harness")
BUS = "services/common/bus/"

RAW_METHODS = frozenset(
    {
        # a JetStream context: buckets, streams, consumers, messages
        "key_value",
        "create_key_value",
        "delete_key_value",
        "object_store",
        "create_object_store",
        "delete_object_store",
        "stream_info",
        "streams_info",
        "add_stream",
        "update_stream",
        "delete_stream",
        "purge_stream",
        "consumer_info",
        "consumers_info",
        "add_consumer",
        "update_consumer",
        "delete_consumer",
        "pull_subscribe",
        "pull_subscribe_bind",
        "get_msg",
        "get_last_msg",
        "delete_msg",
        "account_info",
        # a JetStream context or a connection
        "publish",
        "subscribe",
        "request",
        # a key-value bucket (or the Object Store)
        "get",
        "put",
        "create",
        "update",
        "delete",
        "purge",
        "purge_deletes",
        "watch",
        "watchall",
        "keys",
        "history",
        "status",
        "list",
        # a subscription
        "fetch",
        "next_msg",
        "unsubscribe",
    }
)
"""Methods that talk to NATS. Not here: a connection's own life (``jetstream()``, which sends
nothing, ``flush``, ``drain``, ``close``), made where the connection is made."""

NATS_NAMES = frozenset(
    {"js", "jetstream", "nc", "conn", "connection", "kv", "bucket", "store", "sub", "subscription"}
)
"""Names (or ``_``-suffixes of names) of what holds a NATS object."""

ALLOWED: dict[str, str] = {
    # issue 33, handled separately: another change moves these behind the bus (the applier's
    # intent consumer and reports, the planner's sends, the watcher, compare-and-publish);
    # remove each entry with that change.
}
"""Paths (a file, or a folder ending in /) whose raw calls may stay, and why."""


def _receiver(node: ast.expr) -> str | None:
    """The name a call's receiver goes by: ``js`` for ``js``, ``self.js`` and ``c.js``;
    ``jetstream`` for ``nc.jetstream()``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _receiver(node.func)
    return None


def _nats_like(name: str) -> bool:
    bare = name.lower().lstrip("_")
    return bare in NATS_NAMES or any(bare.endswith("_" + n) for n in NATS_NAMES)


def raw_calls(source: str, filename: str = "<probe>") -> Iterator[tuple[int, str]]:
    """(line, ``receiver.method``) of each raw NATS call in ``source``."""
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in RAW_METHODS:
            continue
        name = _receiver(node.func.value)
        if name is not None and _nats_like(name):
            yield node.lineno, f"{ast.unparse(node.func.value)}.{node.func.attr}"


def scanned() -> list[Path]:
    files = [p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))]
    return [p for p in files if not p.relative_to(ROOT).as_posix().startswith(BUS)]


def allowed(rel: str) -> bool:
    return any(rel == path or (path.endswith("/") and rel.startswith(path)) for path in ALLOWED)


def test_no_raw_nats_call_outside_the_bus() -> None:
    files = scanned()
    assert len(files) > 100, "the scan found too few modules: is ROOT right?"
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if allowed(rel):
            continue
        found += [
            f"{rel}:{line}: {call}" for line, call in raw_calls(path.read_text(encoding="utf-8"))
        ]
    assert not found, (
        "raw NATS calls outside services/common/bus (call the bus's function instead, or add "
        "one there; issue 33):\n  " + "\n  ".join(found)
    )


def test_allowed_paths_exist() -> None:
    """An entry whose path went away is stale: remove it."""
    stale = [p for p in ALLOWED if not (ROOT / p).exists()]
    assert not stale, f"allow-list entries naming nothing: {stale}"


@pytest.mark.parametrize(
    "probe",
    [
        "await js.publish('s', b'')",
        "await self.js.stream_info('S')",
        "await c.js.key_value('b')",
        "await nc.jetstream().publish('s', b'')",
        "await nc.request('s', b'', timeout=1)",
        "await self.nc.subscribe('s', cb=f)",
        "await self.kv.put('k', b'')",
        "await self._shard_kv.update('k', b'', last=1)",
        "await bucket.get('k')",
        "await sub.fetch(1)",
        "await self._sub.unsubscribe()",
    ],
)
def test_a_raw_call_is_found(probe: str) -> None:
    assert [line for line, _ in raw_calls(f"async def f():\n    {probe}\n")] == [2], probe


@pytest.mark.parametrize(
    "fine",
    [
        "await bus.publish(js, 's', b'')",
        "await bus.kv_get(js, 'b', 'k')",
        "await self.pub.publish('s', b'', msg_id='m')",
        "labels.get('k')",
        "self.bucket.heartbeat([], ready=True)",
        "self._repo.fetch(head=True)",
        "nc.jetstream()",
        "await nc.drain()",
    ],
)
def test_other_calls_are_not(fine: str) -> None:
    assert not list(raw_calls(f"async def f():\n    {fine}\n")), fine
