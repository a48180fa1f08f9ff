"""The rollout driver: one process at a time takes every fleet bundle's rollout a tick further.

It runs beside every planner replica (``driftbus planner``); the one holding the lease (the
``driver`` entry of the rollouts bucket, renewed by compare-and-set) drives, the others watch the
lease and take it when it has not changed for ``lease_timeout`` on their own clock (the lease
rule the planners' shard claims follow too). A driver whose
renewals have failed for longer than the timeout minus one interval stops before anyone else
can start. The lease is asked again before the state write and before every publish of a tick
(``Placer``), and every placement carries its fencing token, which the clusters' planners hold
placements to: a driver that stalled past its lease (a stopped process, a starved loop) wakes
up publishing nothing more, and a placement already on its way is refused.

A tick is decided by ``deciding`` (the steering requests applied, then the pure rule asked), and
then, in this order: the new state is written with compare-and-set on the revision read (the
driver is the only writer of rollout states: a lost race is another driver's, and changes
nothing), then the revisions are placed and the transitions published. A driver killed between
the two leaves a state that says more than the bus; the next driver, before its first tick,
publishes what is missing (``_recover``): each placement whose bundle subject does not carry it,
each transition the rollout log lacks. Each has a message id of its own, so nothing is sent twice.

A test hook (off unless set; for tests only): ``DRIFTBUS_TEST_DRIVER_EXIT_FILE`` names a file; a
driver that finds it right after a state write whose tick places anything deletes it and kills
its own process (SIGKILL) before the first placement, the one moment recovery exists for, or
stops it (SIGSTOP: a stall past the lease) when the file says ``STOP``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import signal
from collections.abc import Iterator, Sequence

import msgspec

from schemas.fleet import (
    RolloutEvent,
    RolloutPhase,
    RolloutState,
)
from schemas.subjects import rollout_key
from services.common import bus
from services.common.bus.streams import PUBLISH_RETRIED
from services.fleet.driver.deciding import Decider
from services.fleet.driver.lease import Lease, LeaseLost
from services.fleet.driver.placing import Placer
from services.fleet.driver.recovery import missing
from services.fleet.driver.views import FleetViews, Stored
from services.fleet.rollout.steps import DEFAULT_LEAVE_BUDGET, LeaveBudget, Place, Remove, Tick
from services.fleet.rollout.substitute import SubstitutionError
from services.revisions.publish import BundleError

log = logging.getLogger("driftbus.fleet")
RECENT = 20
TICK_SHARE = 0.2
"""At most this share of its replica's time goes to ticking rollouts: after ticks that took t
seconds the driver rests t × (1 / share − 1) before the next (at most one tick interval), what
woke it meanwhile taken in by that next tick. A tick walks every cluster of a rollout; at 1,000
clusters every status change woke one, back to back, and the driver took a quarter of its
planner's loop during a rollout (py-spy, 2026-11-30)."""
PLACEMENTS_AT_ONCE = 256
"""Placements of a tick published at once. Each is an acknowledged publish; one after the other,
a step of 2,700 clusters took the driver about two minutes on a loaded NATS (fleet-sim, 3,000
clusters, 2026-11-30), and the clusters' planners could not start before their placement came.
32 at once it still took 25-45 s: each group waits for its slowest answer, read by the event
loop of a planner busy taking in the placements just made (fleet-sim's curve: Ready flat at 300
all that time, then 1,200 at once when the tick ended).
Each still asks the lease first (``Placer.perform``), and each has its own message id, so a
tick cut short is completed by the next, or by recovery after a take-over."""
FINISHED_NEXT_TICK: tuple[type[BaseException], ...] = (
    BundleError,
    bus.BusError,
    SubstitutionError,
    *PUBLISH_RETRIED,
)
"""What a tick's actions may fail of and the next tick completes (logged, not raised)."""
EXIT_FILE_HOOK = "DRIFTBUS_TEST_DRIVER_EXIT_FILE"
"""A test hook (see the module's docstring); never set outside tests."""


def at_once(actions: Sequence[Place | Remove]) -> Iterator[list[Place | Remove]]:
    """``actions`` in order, in groups published together: at most ``PLACEMENTS_AT_ONCE``, and
    never two of one cluster (they go to the same subject, where their order is the order
    they were made in)."""
    group: list[Place | Remove] = []
    clusters: set[str] = set()
    for action in actions:
        if len(group) >= PLACEMENTS_AT_ONCE or action.cluster in clusters:
            yield group
            group, clusters = [], set()
        group.append(action)
        clusters.add(action.cluster)
    if group:
        yield group


class Driver:
    """The rollout driver beside one planner replica (it drives only while it holds the
    lease)."""

    def __init__(
        self,
        js: bus.JetStream,
        *,
        driver_id: str,
        tick: float = 1.0,
        lease_interval: float = 2.0,
        lease_timeout: float = 10.0,
        leave_budget: LeaveBudget = DEFAULT_LEAVE_BUDGET,
    ) -> None:
        self.js = js
        self.id = driver_id
        self.tick_interval = tick
        self.lease_interval = lease_interval
        self.lease_timeout = lease_timeout
        self.wake = asyncio.Event()
        self.views = FleetViews(js, self.wake.set)
        self.lease = Lease(
            js, holder=driver_id, interval=lease_interval, timeout=lease_timeout, taken=self._took
        )
        self._recovered = False
        self.placer = Placer(js, self.views, self.lease.check)
        self.decider = Decider(self.views, self.placer, leave_budget)

    @property
    def leading(self) -> bool:
        return self.lease.held

    def _took(self) -> None:
        self._recovered = False
        self.views.mark_all()  # what changed while another drove is not known here
        self.wake.set()

    async def run(self) -> None:
        tasks = self.views.tasks()
        try:
            await self.views.ready()
            # the lease only once the views have caught up: a replica still replaying the bus
            # would hold it without driving
            tasks.append(asyncio.create_task(self.lease.hold(), name="rollout driver lease"))
            loop = asyncio.get_running_loop()
            rest = 0.0
            while True:
                if rest > 0:
                    await asyncio.sleep(rest)
                    rest = 0.0
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.tick_interval)
                self.wake.clear()
                if not self.leading:
                    self._recovered = False
                    continue
                try:
                    if not self._recovered:
                        await self._recover()
                        self._recovered = True
                    started = loop.time()
                    await self._tick_all()
                    rest = rest_after(loop.time() - started, self.tick_interval)
                except LeaseLost as exc:
                    log.warning("rollout driver stopped: %s", exc)
                    self._recovered = False
                except Exception:
                    log.exception("rollout tick failed; trying again")
                    self._recovered = False
                    await asyncio.sleep(self.tick_interval)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # --- a tick --------------------------------------------------------------------------------

    async def _tick_all(self) -> None:
        """One tick of every rollout whose inputs changed, and of those under way (their bake
        and timeout run on the clock): an idle fleet costs no work."""
        now = dt.datetime.now(dt.UTC)
        dirty = self.views.take_dirty()
        for bundle, (seq, fb) in sorted(self.views.fleets.items()):
            if not self.leading:
                return
            stored = self.views.states.get(bundle)
            if not (dirty is None or bundle in dirty or _running(stored, seq)):
                continue
            try:
                tick = await self.decider.decide(bundle, seq, fb, stored, now)
                if tick is not None and await self._write(bundle, stored, tick):
                    _exit_hook(tick)
                    await self._act(bundle, tick)
            except LeaseLost as exc:
                log.warning("rollout of %s: %s; the next driver completes the tick", bundle, exc)
                self._recovered = False
                return
            except Exception as exc:  # noqa: BLE001 - bad input never stops the driver
                # one fleet bundle that cannot be read or written holds up no other
                log.error("rollout of %s not advanced: %r", bundle, exc)

    async def _write(self, bundle: str, stored: Stored | None, tick: Tick) -> bool:
        """Write the tick's state (numbering its events) with compare-and-set; False when
        another writer (a driver that took over) came first: the next tick decides again."""
        old = stored.state.events if stored is not None else 0
        events = [
            RolloutEvent(
                bundle=bundle,
                revision=tick.state.target.revision,
                seq=old + i,
                event=e.event,
                phase=e.phase or tick.state.phase,
                step=tick.state.step,
                clusters=list(e.clusters),
                message=e.message,
                at=tick.state.updated_at,
                driver=self.id,
            )
            for i, e in enumerate(tick.events)
        ]
        state = msgspec.structs.replace(
            tick.state,
            events=old + len(events),
            recent=[*tick.state.recent, *events][-max(RECENT, len(events)) :],
        )
        data = msgspec.json.encode(state)
        key = rollout_key(bundle)
        self.lease.check()  # a state written by a deposed driver would be acted on by no one
        if stored is None:
            rev = await bus.kv_create(self.js, bus.ROLLOUTS_BUCKET, key, data)
        else:
            rev = await bus.kv_update(self.js, bus.ROLLOUTS_BUCKET, key, data, last=stored.revision)
        if rev is None:  # another writer came first: read what it wrote, decide next tick
            entry = await bus.kv_get(self.js, bus.ROLLOUTS_BUCKET, key)
            if entry is not None:
                self.views.states[bundle] = Stored(
                    entry.revision, msgspec.json.decode(entry.value, type=RolloutState)
                )
            self.wake.set()
            return False
        self.views.states[bundle] = Stored(int(rev), state)
        self._pending_events = events
        return True

    async def _act(self, bundle: str, tick: Tick) -> None:
        state = self.views.states[bundle].state
        try:
            for together in at_once(tick.actions):
                done = await asyncio.gather(
                    *(self.placer.perform(state, a) for a in together), return_exceptions=True
                )
                failed = [r for r in done if isinstance(r, BaseException)]
                if failed:  # a lost lease first: it ends the driving, the rest is logged
                    raise next(
                        (f for f in failed if not isinstance(f, FINISHED_NEXT_TICK)), failed[0]
                    )
            for event in self._pending_events:
                await self.placer.record(event)
        except (BundleError, bus.BusError, SubstitutionError) as exc:
            log.error("rollout of %s: %s; completed on the next tick", bundle, exc)
            self._recovered = False
        except PUBLISH_RETRIED as exc:
            log.error(
                "rollout of %s: the bus is away (%r); completed on the next tick", bundle, exc
            )
            self._recovered = False

    # --- taking over ---------------------------------------------------------------------------

    async def _recover(self) -> None:
        """Publish what the states say and the bus lacks (a predecessor killed mid-tick), one
        rollout at a time: one that cannot be completed holds up no other."""
        for bundle, stored in sorted(self.views.states.items()):
            try:
                events, actions = await missing(self.js, bundle, stored.state)
                for event in events:
                    await self.placer.record(event)
                for action in actions:
                    log.info(
                        "rollout of %s: placing in %s what the state says", bundle, action.cluster
                    )
                    await self.placer.perform(stored.state, action)
            except LeaseLost as exc:
                log.warning("rollouts not completed after a take-over: %s", exc)
                raise
            except Exception as exc:  # noqa: BLE001 - bad input never stops the driver
                log.error("rollout of %s: not completed after a take-over: %r", bundle, exc)


def rest_after(spent: float, interval: float) -> float:
    """How long the driver rests after ticks that took ``spent`` seconds (``TICK_SHARE``)."""
    return min(interval, max(0.0, spent) * (1 / TICK_SHARE - 1))


def _exit_hook(tick: Tick) -> None:
    """The test hook: killed (or stopped) between the state write and the first placement
    (off unless ``DRIFTBUS_TEST_DRIVER_EXIT_FILE`` names a file that exists; used once)."""
    path = os.environ.get(EXIT_FILE_HOOK)
    if not path or not tick.actions:
        return
    try:
        with open(path) as f:
            stop = f.read().strip() == "STOP"
        os.remove(path)
    except FileNotFoundError:
        return
    how = signal.SIGSTOP if stop else signal.SIGKILL
    log.warning("test hook %s: %s after the state write, before the placements", path, how.name)
    os.kill(os.getpid(), how)


def _running(stored: Stored | None, seq: int) -> bool:
    """Whether a rollout must be ticked on the clock: under way (bake, timeout, a rollback
    waiting for Ready), a new revision of it waits to start, or clusters that left it settle
    (the fleet prune budget's ``settle``). Clusters held for an approval are not: an approval
    or a relabel back is an event that ticks the rollout (nothing polled while nothing
    happens, DESIGN §14)."""
    if stored is None or seq > stored.state.source_seq:
        return True
    if any(c not in stored.state.leave_held for c in stored.state.left_at):
        return True
    return stored.state.phase in (
        RolloutPhase.PROGRESSING,
        RolloutPhase.PAUSED,
        RolloutPhase.ROLLING_BACK,  # its timeout runs on the clock too
    )
