"""Each tenant's share of the notify service's queue (services/notify/shares.py), and the
decisions the replicas' views make alike (Notifier.decide, dispatch) — issue 41."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from schemas.notify import EventKind
from services.notify import config
from services.notify.events import Event
from services.notify.notifier import Notifier, Send
from services.notify.render import Request
from services.notify.send import Outbox, RetryPolicy
from services.notify.shares import Share, Shares

HOOK = "providers:\n- name: hook\n  type: webhook\n  url: http://127.0.0.1:1/x\n"


@pytest.mark.parametrize(("limit", "takes", "taken"), [(0, 1, 0), (2, 3, 2), (5, 5, 5)])
def test_a_share_counts_up_to_its_limit(limit: int, takes: int, taken: int) -> None:
    share = Share("a", None, limit)  # type: ignore[arg-type]
    assert sum(share.take() for _ in range(takes)) == taken
    share.give(10)
    assert share.waiting == 0


async def test_one_tenants_full_queue_refuses_its_messages_only() -> None:
    async with aiohttp.ClientSession() as session:
        shares = Shares(session, lambda: session, tenant_queued=2, owned=False)
        provider = config.load(HOOK + "alerts: []\n", "n.yaml").providers[0]
        req = Request(url="http://127.0.0.1:1/x", body=b"{}", headers={}, what="hook")
        a1 = Outbox(provider, shares.of("a"), RetryPolicy(attempts=1), 1.0)
        a2 = Outbox(provider, shares.of("a"), RetryPolicy(attempts=1), 1.0)
        b = Outbox(provider, shares.of("b"), RetryPolicy(attempts=1), 1.0)
        # two outboxes of tenant a share its queue; tenant b has its own
        assert [a1.put(req), a2.put(req), a1.put(req)] == [True, True, False]
        assert [b.put(req), b.put(req)] == [True, True]
        assert shares.of("") is shares.of("")  # the platform's own
        for box in (a1, a2, b):
            await box.drain(0.0)
        assert shares.of("a").waiting == 0


def test_replicas_decide_alike_and_a_republished_phase_is_no_news() -> None:
    alert = "alerts:\n- providers: [hook]\n  events: [Progressing, Ready, Failed]\n"
    cfg = config.load(HOOK + alert, "n.yaml")

    def ev(kind: EventKind) -> Event:
        return Event(kind, "web", "r1", cluster="c", detail=str(kind))

    seq = [EventKind.PROGRESSING, EventKind.PROGRESSING, EventKind.READY, EventKind.READY]
    seq += [EventKind.FAILED, EventKind.PROGRESSING]
    decided = []
    for _ in range(2):  # two replicas reading the same stream
        n = Notifier(session=None, policy=RetryPolicy(), timeout=1.0)  # type: ignore[arg-type]
        n.configure("platform", cfg)
        decided.append([bool(n.decide(ev(k), 1000.0 + i)) for i, k in enumerate(seq)])
    assert decided[0] == decided[1] == [True, False, True, False, True, True]


async def test_dispatch_is_done_once_every_send_is_over() -> None:
    cfg = config.load(HOOK + "alerts:\n- providers: [hook]\n", "n.yaml")
    async with aiohttp.ClientSession() as session:
        n = Notifier(session=session, policy=RetryPolicy(attempts=1), timeout=1.0)
        n.configure("platform", cfg)
        over = asyncio.Event()
        calls: list[int] = []

        def done() -> None:
            calls.append(1)
            over.set()

        event = Event(EventKind.READY, "web", "r1", cluster="c")
        # a provider removed since the decision: nothing to send, over at once
        n.dispatch(event, [Send("platform", "gone"), Send("tenant.x", "hook")], done)
        assert calls == [1]
        over.clear()
        n.dispatch(event, [Send("platform", "hook")], done)  # nothing listens: refused
        assert calls == [1]
        await asyncio.wait_for(over.wait(), 10)
        assert calls == [1, 1]
        await n.close()


@pytest.mark.parametrize(("retired", "over"), [(True, 2), (False, 0)])
async def test_a_retired_outbox_is_over_and_a_stopped_one_is_not(retired: bool, over: int) -> None:
    """A provider changed or removed: what its outbox still held is over (its messages
    acknowledged, not sent); the service stopping: not (a durable consumer redelivers them)."""

    held: list[asyncio.StreamWriter] = []

    async def hang(_: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        held.append(w)  # never answers; closed when the test ends, not left to the collector

    server = await asyncio.start_server(hang, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    calls: list[int] = []
    try:
        async with aiohttp.ClientSession() as session:
            share = Shares(session, lambda: session, owned=False).of("")
            provider = config.load(HOOK + "alerts: []\n", "n.yaml").providers[0]
            req = Request(url=f"http://127.0.0.1:{port}/x", body=b"{}", headers={}, what="hook")
            box = Outbox(provider, share, RetryPolicy(attempts=1), 30.0)
            assert box.put(req, lambda: calls.append(1))  # being sent when drained
            assert box.put(req, lambda: calls.append(1))  # still queued
            await asyncio.sleep(0.2)
            await box.drain(0.1, retired=retired)
            assert share.waiting == 0
    finally:
        for w in held:
            w.close()
        server.close()
        await server.wait_closed()
    assert len(calls) == over
