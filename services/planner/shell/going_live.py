"""The go-live after a rebuild (``loop.Planner``): every desired object evaluated once, what
that decides sent (pure decisions, sent by ``sending``).

A restart with nothing changed is all hits: 100,000 of them at a big cluster. A hit sends
nothing and changes nothing of its entry, so hits are counted where they are decided, in the
store's order, and neither packed again nor sorted; only the decisions that send something are
put in apply order (Namespaces first) and sent by bundle, the bundles in the order of their
first such decision. The hits of a bundle whose publish is traced stay with its other
decisions: sent in its span when it writes (``loop.Planner._go_live``), each a ``decide`` span
as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from schemas.decision import DecisionAction
from services.core.manifest import apply_order_text
from services.planner.memory.cluster import ClusterState
from services.planner.rule.decide import Decision, reevaluate
from services.planner.rule.entry import Slot
from services.planner.rule.replay import Inputs
from services.planner.shell.folding import Folder
from services.planner.shell.intent_batches import Lone, none_alone
from services.planner.shell.sending import Decisions, never_written
from services.planner.shell.yielding import in_order, pace

Decided = list[tuple[Slot, Decision | None, Inputs | None]]


async def deciding(
    state: ClusterState,
    folder: Folder,
    decisions: Decisions,
    traced: Callable[[str], bool] = lambda bundle: False,
) -> dict[str, Decided]:
    """Evaluate every desired object of the restored ``state`` once (``reevaluate``): hits
    counted at once (``Decisions.rebuilt_hit``), unless their bundle is ``traced``; the rest
    by bundle, in apply order."""
    rest: list[tuple[Slot, Decision, Inputs]] = []
    now = time.time()
    for i, slot in enumerate(list(state.entries.desired_slots())):
        entry = state.entries[slot]
        hold, of_bundle = folder.hold_of(slot, entry.bundle)
        inputs = Inputs(entry, None, hold.reason if hold else None)  # its record's
        after, decision = reevaluate(entry, now=now, hold=inputs.hold)
        if after is not entry:  # a hit changes nothing: not packed again
            state.entries[slot] = after
        await pace(i)
        if decision is None:
            continue
        if of_bundle and decision.action is DecisionAction.HOLD:
            state.gates.held.add(entry.bundle)
        if decision.action is DecisionAction.HIT and not traced(entry.bundle):
            await decisions.rebuilt_hit(slot, entry, decision)
        else:
            rest.append((slot, decision, inputs))
    by_bundle: dict[str, Decided] = {}
    for slot, decision, inputs in await in_order(rest, lambda d: apply_order_text(d[0][1])):
        by_bundle.setdefault(state.entries[slot].bundle, []).append((slot, decision, inputs))
    return by_bundle


async def publishing(decisions: Decisions, decided: Decided, lone: Lone) -> None:
    """Send what the go-live decided (``deciding``); ``lone``: the cluster's intents queued
    alone, which a batched apply of the same object must not overtake."""
    entries = decisions.state.entries
    for i, (slot, d, inputs) in enumerate(decided):
        # restored: in flight now only by this decision
        batchable = d is not None and d.writes and never_written(entries[slot])
        batchable = batchable and none_alone(slot, lone)
        await decisions.publish(slot, d, after_rebuild=True, inputs=inputs, batchable=batchable)
        await pace(i)
