"""A planner replica's hub: one follower per stream for every cluster the replica plans, and the
settings every cluster reads, followed once.

Before (issue 43), each claimed cluster was a whole planner on the bus: eight consumers, each
with its own idle heartbeat, three of them following the same global settings 1,000 times over,
and two direct gets of its members' heartbeats every five seconds. A replica's cost then grew
with its clusters, not with its work (DESIGN §14). Now a replica holds a constant set of
consumers, whatever it plans:

- a live tap per cluster stream (bundles, server, applied, outcomes, control), from the stream's
  end at the replica's start, demultiplexed by the cluster token of each subject to the
  cluster's planner (``Tap``); messages of clusters the replica does not plan are dropped;
- the tenant policy, the sync windows and the cluster registry, each followed once and held with
  its last value, handed to every cluster's planner when it starts and on every change;
- the stored manifests of fleet revisions, read and split once for all clusters that take them
  (``manifests.ManifestCache``);
- the members' heartbeats, followed once (the MEMBERS stream keeps the last per subject), and
  looked at again every ``sweep`` seconds for the ones that went stale.

A cluster just claimed rebuilds from its own compacted history (``inbox.Inbox.replay``:
short-lived consumers, as many at once as the replica's replay budget allows, ``budget``) while
the tap's messages for it are held back; the planner drops what its replay already covered by
stream sequence. Nine consumers per replica in all (five taps, four settings), plus at most five
per cluster while it replays (none for a stream that keeps nothing of it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from schemas.codec import WireError
from schemas.messages import MemberHeartbeat
from schemas.subjects import MEMBER_ROLES, encode_token, family_filter
from schemas.windows import WindowsFile
from services.clusters import members, registry
from services.common import bus
from services.planner.shell.budget import Backlog, WorkBudget
from services.planner.shell.manifests import ManifestCache
from services.stored.document import Good
from services.tenancy import store as policy_store
from services.windows import store as windows_store

log = logging.getLogger("driftbus.planner")

CLUSTER_STREAMS = {
    "bundle": bus.BUNDLES,
    "server": bus.SERVER,
    "applied": bus.APPLIED,
    "outcome": bus.OUTCOMES,
    "control": bus.CONTROL,
}
"""The streams whose subjects name a cluster, by the kind of message the run loop reads."""
FOLLOWED = len(CLUSTER_STREAMS) + 4
"""Consumers a replica holds however many clusters it plans: a tap per cluster stream, and the
policy, the windows, the registry and the members' heartbeats (what the tests count)."""


class HubStopped(RuntimeError):
    """A follower of the hub ended: every cluster of the replica would go deaf to it."""


class Subscriber(Protocol):
    """What the hub hands a cluster's planner (``shell.loop.Planner``)."""

    cluster: str

    def deliver(self, kind: str, msg: bus.Message) -> None:
        """A live message of one of the cluster's streams (``CLUSTER_STREAMS``); never waits
        (the tap serves every cluster)."""

    def setting(self, kind: str, value: Any) -> None:
        """A new version of a followed setting: ``policy`` and ``registry`` (a message),
        ``windows`` (the last good ``Good``)."""

    def members_seen(self) -> None:
        """The cluster's heartbeats changed, or time passed: look at them again."""


class Hub:
    """The replica's followers, shared by the clusters it plans (module doc)."""

    def __init__(
        self,
        js: bus.JetStream,
        *,
        sweep: float = members.INTERVAL,
        nc: bus.Connection | None = None,
    ) -> None:
        self.js = js
        self.nc = nc
        self.sweep = sweep
        self.ready = asyncio.Event()
        """Every follower subscribed and every setting read: clusters may be planned."""
        self.policy: bus.Message | None = None
        """The tenant policy's last stored message (None: never applied: the empty policy)."""
        self.windows: Good[WindowsFile] | None = None
        """The last good sync windows (None: not read yet)."""
        self._planners: dict[str, Subscriber] = {}
        """Encoded cluster token -> its planner."""
        self._registry: dict[str, bus.Message] = {}
        """Registry entry subject -> its last message."""
        self._beats: dict[str, dict[str, MemberHeartbeat | None]] = {}
        """Encoded cluster token -> role -> its last heartbeat (None: unreadable)."""
        self.backlog = Backlog()
        """Events queued across the clusters' queues: the taps wait while it is full."""
        self.replays = WorkBudget()
        """How much of the clusters' replays at start runs at once (``budget``)."""
        self.manifests = ManifestCache()
        """Stored revisions read once for every cluster that takes them."""

    # --- what the planners ask ----------------------------------------------------------

    def attach(self, planner: Subscriber) -> None:
        self._planners[encode_token(planner.cluster)] = planner

    def detach(self, planner: Subscriber) -> None:
        token = encode_token(planner.cluster)
        if self._planners.get(token) is planner:
            del self._planners[token]

    def labels(self, cluster: str) -> dict[str, str] | None:
        """The cluster's registry labels (None: unknown, ``registry.labels_in``)."""
        msg = self._registry.get(registry.entry_subject(cluster))
        return None if msg is None else registry.labels_in(msg)

    def heartbeats(self, cluster: str) -> dict[str, MemberHeartbeat | None]:
        """The last heartbeat of each role of ``cluster`` (None: none, or unreadable)."""
        beats = self._beats.get(encode_token(cluster), {})
        return {role: beats.get(role) for role in MEMBER_ROLES}

    # --- following --------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow until cancelled; ``HubStopped`` when a follower ended."""
        taps = {
            kind: bus.Follower(self.js, stream, family_filter(kind), from_now=True)
            for kind, stream in CLUSTER_STREAMS.items()
        }
        followers = {
            "policy": bus.Follower(self.js, bus.TENANTS_STREAM, policy_store.POLICY_SUBJECT),
            "registry": bus.Follower(self.js, bus.CLUSTERS_STREAM, registry.KV_PREFIX + ">"),
            "members": bus.Follower(self.js, bus.MEMBERS, family_filter("member")),
        }
        windows = windows_store.STORED.following(self.js)
        tasks = [
            asyncio.create_task(self._tap(kind, f), name=f"tap {kind}") for kind, f in taps.items()
        ]
        tasks += [
            asyncio.create_task(self._follow(kind, f), name=f"follow {kind}")
            for kind, f in followers.items()
        ]
        tasks.append(asyncio.create_task(self._follow_windows(windows), name="follow windows"))
        tasks.append(asyncio.create_task(self._sweep(), name="members sweep"))
        caught_up = [f.caught_up for f in (*taps.values(), *followers.values())]
        caught_up.append(windows.caught_up)
        ready = asyncio.create_task(self._when_ready(caught_up), name="hub ready")
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            ended = next(iter(done))
            raise HubStopped(f"{ended.get_name()} ended: {ended.exception()!r}")
        finally:
            ready.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(ready, *tasks, return_exceptions=True)

    async def _when_ready(self, events: list[asyncio.Event]) -> None:
        for event in events:
            await event.wait()
        self.ready.set()
        log.info("hub: %d followers for every cluster of this replica", FOLLOWED)

    async def _tap(self, kind: str, follower: bus.Follower) -> None:
        planners = self._planners
        async for msg in follower.messages():
            # driftbus.<family>.<cluster token>.…: no full parse for a message we may drop
            parts = msg.subject.split(".", 3)
            planner = planners.get(parts[2]) if len(parts) > 3 else None
            if planner is None:
                continue
            planner.deliver(kind, msg)
            await self.backlog.room()

    async def _follow(self, kind: str, follower: bus.Follower) -> None:
        async for msg in follower.messages():
            if kind == "members":
                self._heartbeat(msg)
            elif kind == "policy":
                self.policy = msg
                for planner in list(self._planners.values()):
                    planner.setting("policy", msg)
            else:
                self._registry[msg.subject] = msg
                token = msg.subject.removeprefix(registry.KV_PREFIX)
                if (one := self._planners.get(token)) is not None:
                    one.setting("registry", msg)

    async def _follow_windows(self, windows: Any) -> None:
        async for good in windows.versions():
            self.windows = good
            for planner in list(self._planners.values()):
                planner.setting("windows", good)

    def _heartbeat(self, msg: bus.Message) -> None:
        parts = msg.subject.split(".")
        if len(parts) != 4 or parts[3] not in MEMBER_ROLES:
            return
        token, role = parts[2], parts[3]
        hb = None
        if msg.data:
            try:
                hb = members.heartbeat_of(msg.data)
            except WireError as exc:
                log.warning("ignoring the %s heartbeat of cluster %s: %s", role, token, exc)
        beats = self._beats.setdefault(token, {})
        if beats.get(role) == hb:
            return
        beats[role] = hb
        if (planner := self._planners.get(token)) is not None:
            planner.members_seen()

    async def _sweep(self) -> None:
        """Heartbeats that stopped coming are noticed here: one look every ``sweep`` seconds
        for the whole replica, not a timer per cluster. Not while NATS is away, nor for two
        heartbeat intervals after it is back: no heartbeat could come meanwhile, and every
        cluster would read as unserved (the per-cluster reads this replaces kept their last
        view when the bus did not answer)."""
        loop = asyncio.get_running_loop()
        quiet_until = 0.0
        while True:
            await asyncio.sleep(self.sweep)
            if not bus.connected(self.nc):
                quiet_until = loop.time() + 2 * members.INTERVAL
                continue
            if loop.time() < quiet_until:
                continue
            for planner in list(self._planners.values()):
                planner.members_seen()
