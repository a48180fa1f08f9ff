"""The applier's namespace gate: objects wait for their namespace's apply in the same replica."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from schemas.messages import ApplyIntent, DeleteIntent
from schemas.subjects import ObjectKey
from services.applier.gate import NamespaceGate


def applying(kind: str, namespace: str, name: str) -> ApplyIntent:
    manifest: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}
    if namespace:
        manifest["metadata"]["namespace"] = namespace
    return ApplyIntent(
        cluster="c1",
        key=ObjectKey("", kind, namespace, name),
        bundle="b",
        revision="r1",
        manifest_sha="0" * 64,
        manifest=manifest,
        reason="new",
    )


def deleting(kind: str, namespace: str, name: str) -> DeleteIntent:
    return DeleteIntent(
        cluster="c1",
        key=ObjectKey("", kind, namespace, name),
        api_version="v1",
        bundle="b",
        revision="r2",
    )


NS_A = applying("Namespace", "", "team-a")
IN_A = applying("ConfigMap", "team-a", "settings")
IN_B = applying("ConfigMap", "team-b", "settings")
NS_A_DELETED = deleting("Namespace", "", "team-a")


async def _order(
    first: ApplyIntent | DeleteIntent, second: ApplyIntent | DeleteIntent
) -> list[str]:
    """Start ``first`` then ``second`` as the consumer does (tasks in fetch order); ``first``
    takes 50 ms inside the gate. Returns the order in which their work ended."""
    gate = NamespaceGate(wait_limit=5)
    ended: list[str] = []

    async def handle(intent: ApplyIntent | DeleteIntent, work: float) -> None:
        async with gate.turn(intent):
            await asyncio.sleep(work)
            ended.append(str(intent.key))

    await asyncio.gather(
        asyncio.create_task(handle(first, 0.05)), asyncio.create_task(handle(second, 0))
    )
    assert not gate.creating("team-a"), "the namespace stays registered after its apply"
    return ended


@pytest.mark.parametrize(
    ("first", "second", "waits"),
    [
        (NS_A, IN_A, True),  # an object in a namespace being made waits for it
        (NS_A, IN_B, False),  # another namespace's object does not
        (NS_A_DELETED, IN_A, False),  # a Namespace being deleted holds nothing back
        (IN_A, NS_A, False),  # started before the Namespace: nothing to wait for yet
    ],
)
async def test_gate_orders_objects_after_their_namespace(
    first: ApplyIntent | DeleteIntent, second: ApplyIntent | DeleteIntent, waits: bool
) -> None:
    ended = await _order(first, second)
    expected = [first, second] if waits else [second, first]
    assert ended == [str(i.key) for i in expected]


async def test_a_stuck_namespace_holds_its_objects_only_up_to_the_limit() -> None:
    gate = NamespaceGate(wait_limit=0.05)
    release = asyncio.Event()
    ended: list[str] = []

    async def stuck() -> None:
        async with gate.turn(NS_A):
            await release.wait()

    async def inside() -> None:
        async with gate.turn(IN_A):
            ended.append("settings")

    holder = asyncio.create_task(stuck())
    await asyncio.wait_for(asyncio.create_task(inside()), 2)
    assert ended == ["settings"]  # went ahead although the Namespace's apply had not ended
    release.set()
    await holder
    assert not gate.creating("team-a")


async def test_a_failing_namespace_apply_still_releases_its_objects() -> None:
    gate = NamespaceGate(wait_limit=5)
    ended: list[str] = []

    async def failing() -> None:
        async with gate.turn(NS_A):
            await asyncio.sleep(0.01)
            raise RuntimeError("the API server said no")

    async def inside() -> None:
        async with gate.turn(IN_A):
            ended.append("settings")

    results = await asyncio.gather(failing(), inside(), return_exceptions=True)
    assert isinstance(results[0], RuntimeError)
    assert ended == ["settings"]
    assert not gate.creating("team-a")
