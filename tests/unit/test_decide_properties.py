"""One object through the planner rule against a simulated cluster, bus, watchers and appliers.

``test_decide.py`` checks the rule row by row; this file checks the promise behind it: **no state
in which an object that differs from its manifest is never corrected.** A ``World`` holds what the
real system holds, as the shells (``services/*/service.py``) handle it:

* the cluster: the live object's content and resourceVersion (a no-op server-side apply keeps
  both), changed by our applies and by other clients (edits, deletes);
* the bus: BUNDLES, SERVER, APPLIED and OUTCOMES as append-only streams the planner reads in
  order (compacted: a restarted planner sees only the last message of each), and the INTENTS
  work queue, which holds at most one intent per object (a newer one replaces it) and drops a
  publish whose ``Nats-Msg-Id`` it has seen within the dedupe window. A restarted planner sees
  each object's newest SERVER and APPLIED fact: modelled as streams that keep the newest per
  object (before issue 44, a compare-and-publish on the subject's last sequence; since, every
  batch of facts stays until a checkpoint covers it, and the checkpoint holds the facts folded,
  the newest of each by resourceVersion);
* two watchers: facts published in resourceVersion order, coalesced by a relist, and a lagging
  one that publishes an old state once its id has left the dedupe window;
* appliers: take the queued intent, apply (or fail, or keep retrying: ``Working``) and report a
  fact; their facts land in any order, an ack may be lost (the intent is delivered again), a fact
  may be lost;
* the planner: ``step`` on every fact, the intent ids its shell builds, ``Resend`` when an intent
  got no word for ``intent_timeout`` and is not queued any more, and restarts that rebuild with
  ``restore`` over the compacted streams and then ``reevaluate``.

After any sequence of those the environment quiets down: no more edits, losses or restarts;
every fact lands and is read, every queued intent is applied, and the Resend timer fires for
lost ones. Then the live object must be the desired manifest and the entry a HIT. A manifest that
failed is not retried until it is published again (by design), so when anything failed the user
publishes once more at the end.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.subjects import ObjectKey
from services.common.bus import DEDUPE_WINDOW
from services.planner.rule.decide import (
    HIT,
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Resend,
    Working,
    evaluate,
    reevaluate,
    restore,
    step,
)

KEY = ObjectKey("", "ConfigMap", "ns", "cm")
GOOD = ("m1", "m2", "m3")
BAD = "bad"
"""A manifest the API server rejects (422): every apply of it fails."""
FOREIGN = ("f1", "f2")
"""What other clients write into the object."""
TIMEOUT = 60.0
"""The planner's ``intent_timeout`` (its default)."""

Stream = Literal["bundle", "server", "applied", "outcome"]
STREAMS: tuple[Stream, ...] = ("bundle", "server", "applied", "outcome")
Fate = Literal["lands", "lost", "collides"]
"""What becomes of an intent the planner publishes: it lands on the queue, its publish never
lands, or it is dropped as a repeat of an id seen within the dedupe window."""
How = Literal["ok", "fails", "transient", "ack-lost", "fact-lost"]


def manifest_sha(name: str) -> bytes:
    return hashlib.sha256(b"manifest:" + name.encode()).digest()


def live_sha(content: str) -> bytes:
    """applySHA and serverSHA of a live object with this content (the server defaults fields,
    so it differs from the manifestSHA)."""
    return hashlib.sha256(b"live:" + content.encode()).digest()


NAMES = {manifest_sha(n): n for n in (*GOOD, BAD)}
CONTENTS = {live_sha(c): c for c in (*GOOD, BAD, *FOREIGN)}


def describe(e: Entry) -> str:
    """The entry with its digests named (what a failing example prints)."""

    def name(sha: bytes | None) -> str:
        return "-" if sha is None else NAMES.get(sha) or CONTENTS.get(sha) or sha.hex()[:8]

    return (
        f"desired {name(e.manifest_sha)}, applied {name(e.applied_manifest_sha)} as "
        f"{name(e.apply_sha)}@{e.applied_rv}, seen "
        f"{'deleted' if e.server_deleted else name(e.server_sha)}@{e.server_rv}, in flight "
        f"{name(e.inflight)} since {e.inflight_at:.0f}, failed {name(e.failed)}"
    )


# --- actions -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Publish:
    """A user publishes a revision declaring the object with this manifest."""

    manifest: str


@dataclasses.dataclass(frozen=True)
class Consume:
    """The planner reads the next message of one stream; an intent it decides on meets ``fate``."""

    stream: Stream
    fate: Fate = "lands"


@dataclasses.dataclass(frozen=True)
class Take:
    """An applier takes the queued intent (or drops it: fenced, or already carried out)."""


@dataclasses.dataclass(frozen=True)
class Finish:
    """An applier is done with one of the intents it took."""

    index: int
    how: How = "ok"


@dataclasses.dataclass(frozen=True)
class Land:
    """A fact an applier reported lands on its stream (appliers' facts land in any order)."""

    index: int


@dataclasses.dataclass(frozen=True)
class Watch:
    """The watchers publish the oldest change they saw and have not published."""


@dataclasses.dataclass(frozen=True)
class Relist:
    """A watcher relists: the changes not yet published collapse into the current state."""


@dataclasses.dataclass(frozen=True)
class Stale:
    """A lagging watcher publishes a past state; it lands if its id left the dedupe window."""

    index: int


@dataclasses.dataclass(frozen=True)
class Edit:
    """Another client changes (or creates) the object."""

    content: str


@dataclasses.dataclass(frozen=True)
class Delete:
    """Another client deletes the object."""


@dataclasses.dataclass(frozen=True)
class Tick:
    """Time passes and the planner's resend loop looks at the entry."""

    seconds: float
    fate: Fate = "lands"


@dataclasses.dataclass(frozen=True)
class Restart:
    """The planner restarts (or another replica takes the cluster over: a new fencing token)."""

    takeover: bool
    order: int
    """which order the compacted streams are replayed in"""


Action = (
    Publish
    | Consume
    | Take
    | Finish
    | Land
    | Watch
    | Relist
    | Stale
    | Edit
    | Delete
    | Tick
    | Restart
)


# --- the world -----------------------------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Intent:
    seq: int
    manifest: str
    token: int
    delivered: int = 0
    busy: bool = False
    """delivered to an applier that has neither acked nor nakked it"""


@dataclasses.dataclass(frozen=True)
class Fact:
    event: Event
    intent_seq: int = 0
    """the intent an applied fact carried out (how an applier spots a redelivered one)"""


@dataclasses.dataclass
class World:
    entry: Entry = dataclasses.field(default_factory=lambda: Entry(KEY))
    now: float = 1_000_000.0
    token: int = 1
    fence: int = 1
    """the newest fencing token the appliers know"""
    view_seq: int = 0
    """stream sequence of the revision the planner has read (part of intent ids)"""
    # the cluster
    live: str | None = None
    etcd_rv: int = 0
    live_rv: int = 0
    history: list[Observed] = dataclasses.field(default_factory=list)
    # the bus
    streams: dict[Stream, list[Fact]] = dataclasses.field(
        default_factory=lambda: {s: [] for s in STREAMS}
    )
    read: dict[Stream, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(STREAMS, 0))
    server_ids: dict[int, float] = dataclasses.field(default_factory=dict)
    """when each resourceVersion's server fact last landed (its id is ``key@rv``)"""
    watcher_outbox: list[Observed] = dataclasses.field(default_factory=list)
    applier_outbox: list[tuple[Stream, Fact]] = dataclasses.field(default_factory=list)
    queued: Intent | None = None
    working: list[Intent] = dataclasses.field(default_factory=list)
    intent_ids: dict[str, float] = dataclasses.field(default_factory=dict)
    intents: int = 0
    # what the test asserts on
    sent: list[Decision] = dataclasses.field(default_factory=list)
    """every writing decision of the planner (intents that landed or not)"""
    desired: str | None = None
    failures: int = 0
    applies: int = 0
    log: list[str] = dataclasses.field(default_factory=list)
    newest_only: bool = True
    """SERVER and APPLIED facts land only if newer than the survivor (False: the bus as it was,
    last published wins)"""

    def do(self, action: Action) -> None:
        self.now += 1.0
        self.log.append(repr(action))
        match action:
            case Publish(manifest):
                self.publish(manifest)
            case Consume(stream, fate):
                self.consume(stream, fate)
            case Take():
                self.take()
            case Finish(index, how) if self.working:
                self.finish(index % len(self.working), how)
            case Land(index) if self.applier_outbox:
                self.land(*self.applier_outbox.pop(index % len(self.applier_outbox)))
            case Watch() if self.watcher_outbox:
                self.land_server(self.watcher_outbox.pop(0))
            case Relist():
                self.watcher_outbox[:-1] = []
            case Stale(index) if self.history:
                old = self.history[index % len(self.history)]
                if self.now - self.server_ids.get(old.resource_version, -DEDUPE_WINDOW) >= (
                    DEDUPE_WINDOW
                ):
                    self.land_server(old)
            case Edit(content):
                self.change(content)
            case Delete():
                self.change(None)
            case Tick(seconds, fate):
                self.tick(seconds, fate)
            case Restart(takeover, order):
                self.restart(takeover=takeover, order=order)

    # --- users ---------------------------------------------------------------------------

    def publish(self, manifest: str) -> None:
        self.desired = manifest
        seq = len(self.streams["bundle"]) + 1
        self.streams["bundle"].append(Fact(Desired("b", f"r{seq}", manifest_sha(manifest))))

    # --- the cluster and its watchers ----------------------------------------------------

    def change(self, content: str | None) -> None:
        if content == self.live:
            return  # nothing changes: same resourceVersion, no watch event
        self.etcd_rv += 1
        self.live, self.live_rv = content, self.etcd_rv
        seen = Observed(
            self.etcd_rv,
            None if content is None else live_sha(content),
            deleted=content is None,
            owner_bundle="b",
            api_version="v1",
        )
        self.history.append(seen)
        self.watcher_outbox.append(seen)

    def land_server(self, seen: Observed) -> None:
        """watcher/watch.py ``_publish_all``: lands only if newer than what SERVER keeps."""
        last = self.streams["server"][-1].event if self.streams["server"] else None
        if (
            self.newest_only
            and isinstance(last, Observed)
            and last.resource_version >= seen.resource_version
        ):
            return
        self.server_ids[seen.resource_version] = self.now
        self.streams["server"].append(Fact(seen))

    def land(self, stream: Stream, fact: Fact) -> None:
        """An applier's fact; applier/report.py ``supersedes`` for APPLIED."""
        last = self.streams[stream][-1].event if self.streams[stream] else None
        ev = fact.event
        if (
            self.newest_only
            and isinstance(ev, Applied)
            and isinstance(last, Applied)
            and not (ev.deleted or last.deleted)
            and ev.resource_version < last.resource_version
        ):
            return
        self.streams[stream].append(fact)

    # --- the planner (decide.py, folded the way planner/shell/folding.py folds) ----------

    def consume(self, stream: Stream, fate: Fate) -> None:
        i = self.read[stream]
        if i >= len(self.streams[stream]):
            return
        self.read[stream] = i + 1
        ev = self.streams[stream][i].event
        if stream == "bundle":
            self.view_seq = i + 1
        if isinstance(ev, Failed) and ev.at < max(self.entry.applied_at, self.entry.failed_at):
            return  # _on_outcome: older than what the planner knows
        if isinstance(ev, Working) and self.entry.inflight != ev.manifest_sha:
            return  # _on_outcome: about an intent no longer in flight
        self.fold(ev, fate)

    def fold(self, ev: Event, fate: Fate) -> None:
        self.entry, d = step(self.entry, ev, now=self.now)
        self.send(d, fate)

    def send(self, d: Decision | None, fate: Fate) -> None:
        if d is None or not d.writes:
            return
        e = self.entry
        assert d.action is A.APPLY, d
        assert e.manifest_sha is not None
        assert e.inflight == e.manifest_sha, "what goes out is what is in flight"
        # the id PlannerCluster._intent builds
        again = f"|resend@{e.inflight_at:.0f}" if d.reason is R.RESEND else ""
        msg_id = (
            f"{e.manifest_sha.hex()[:16]}|{d.reason}|{self.view_seq}.{e.applied_rv}.{e.server_rv}"
            f"|{self.token}{again}"
        )
        self.sent.append(d)
        self.log.append(f"  planner sends {NAMES[e.manifest_sha]} ({d.reason}): {fate}")
        if fate == "lost":
            return
        last = self.intent_ids.get(msg_id)
        if fate == "collides" or (last is not None and self.now - last < DEDUPE_WINDOW):
            return
        self.intent_ids[msg_id] = self.now
        self.intents += 1
        self.queued = Intent(self.intents, NAMES[e.manifest_sha], self.token)

    def tick(self, seconds: float, fate: Fate) -> None:
        """PlannerCluster._resend_loop."""
        self.now += seconds
        e = self.entry
        if e.inflight is None or not e.inflight_at < self.now - TIMEOUT:
            return
        if self.queued is not None:
            self.fold(Working(e.inflight, self.now), fate)  # queued: not lost
        else:
            self.fold(Resend(), fate)

    def restart(self, *, takeover: bool, order: int) -> None:
        """Rebuild from the last message of each compacted stream, then evaluate once."""
        last = [self.streams[s][-1].event for s in STREAMS if self.streams[s]]
        perms = list(itertools.permutations(last))
        e = Entry(KEY)
        for ev in perms[order % len(perms)]:
            if isinstance(ev, Failed) and ev.at < max(e.applied_at, e.failed_at):
                continue  # _on_outcome: older than what the rebuild already knows
            e = restore(e, ev)
        self.read = {s: len(self.streams[s]) for s in STREAMS}
        self.view_seq = len(self.streams["bundle"])
        if takeover:
            self.token += 1
            self.fence = self.token  # appliers follow the claims
        self.entry, d = reevaluate(e, now=self.now)
        self.send(d, "lands")

    # --- appliers (applier/service.py) ---------------------------------------------------

    def take(self) -> None:
        m = self.queued
        if m is None or m.busy:
            return
        if m.token < self.fence:
            self.queued = None  # a deposed planner's intent: acked and dropped
            return
        applied = self.streams["applied"]
        if m.delivered and applied and applied[-1].intent_seq == m.seq:
            self.queued = None  # carried out before, its ack was lost
            return
        m.delivered += 1
        m.busy = True
        self.working.append(m)

    def finish(self, index: int, how: How) -> None:
        m = self.working.pop(index)
        still_queued = self.queued is m
        sha = manifest_sha(m.manifest)
        if how == "transient":  # 429/5xx/CRD not there yet: Working, nak, delivered again
            self.applier_outbox.append(("outcome", Fact(Working(sha, self.now), m.seq)))
            m.busy = False
            return
        fact: tuple[Stream, Fact]
        if m.manifest == BAD or how == "fails":
            self.failures += 1
            fact = ("outcome", Fact(Failed(sha, at=self.now), m.seq))
        else:
            self.applies += 1
            self.change(m.manifest)
            assert self.live is not None
            applied = Applied(sha, live_sha(self.live), self.live_rv, at=self.now)
            fact = ("applied", Fact(applied, m.seq))
        if how != "fact-lost":
            self.applier_outbox.append(fact)
        m.busy = False
        if still_queued and how != "ack-lost":
            self.queued = None  # acked

    # --- the environment quiets down -----------------------------------------------------

    def settle(self) -> None:
        """Nothing is lost any more and nobody else writes: let everything run its course."""
        for _ in range(1000):
            self.now += 1.0
            unread = [s for s in STREAMS if self.read[s] < len(self.streams[s])]
            if self.watcher_outbox:
                self.land_server(self.watcher_outbox.pop(0))
            elif self.applier_outbox:
                self.land(*self.applier_outbox.pop(0))
            elif unread:
                self.consume(unread[0], "lands")
            elif self.working:
                self.finish(0, "ok")
            elif self.queued is not None:
                self.take()
            elif self.entry.inflight is not None:
                self.tick(TIMEOUT + 1.0, "lands")
            else:
                return
        pytest.fail("the world never quieted down:\n" + self.story())

    def story(self) -> str:
        return "\n".join(
            [
                *self.log,
                f"planner: {describe(self.entry)}",
                f"cluster: {self.live}@{self.live_rv}, now {self.now:.0f}",
            ]
        )


# --- strategies ----------------------------------------------------------------------------------

FATES: tuple[Fate, ...] = ("lands", "lands", "lands", "lands", "lost", "collides")
HOWS: tuple[How, ...] = ("ok", "ok", "ok", "fails", "transient", "ack-lost", "fact-lost")


def actions(*, lagging_watcher: bool, restarts: bool) -> st.SearchStrategy[Action]:
    """Every hazard, each kind drawn about as often as the others (a finite set of values:
    cheap to draw, shrinks to the simplest)."""
    kinds: list[list[Action]] = [
        [Publish(m) for m in (*GOOD, *GOOD, BAD)],
        [Consume(s, f) for s in STREAMS for f in FATES],
        [Consume(s) for s in STREAMS],  # reading is most of what a planner does
        [Take()],
        [Finish(i, h) for i in range(3) for h in HOWS],
        [Land(i) for i in range(4)],
        [Watch()],
        [Relist()],
        [Edit(c) for c in (*FOREIGN, *GOOD)],
        [Delete()],
        [Tick(s, f) for s in (1.0, 30.0, 61.0, 200.0) for f in FATES],
    ]
    if lagging_watcher:
        kinds.append([Stale(i) for i in range(12)])
    if restarts:
        kinds.append([Restart(t, o) for t in (False, True) for o in range(24)])
    return st.one_of([st.sampled_from(k) for k in kinds])


def run(steps: list[Action], *, newest_only: bool = True) -> World:
    w = World(newest_only=newest_only)
    for a in steps:
        w.do(a)
    w.settle()
    if w.failures or w.desired == BAD:
        # failures are reported, not retried in a loop: the user publishes again
        w.log.append("--- quiet; failures seen: the user publishes again")
        w.publish(w.desired if w.desired in GOOD else GOOD[0])
        w.settle()
    return w


def assert_converged(w: World) -> None:
    if w.desired is None:
        assert w.intents == 0, w.story()
        return
    assert w.live == w.desired, "the live object was left different:\n" + w.story()
    assert w.entry.inflight is None, w.story()
    assert evaluate(w.entry) == HIT, w.story()
    _, d = step(w.entry, Desired("b", "again", manifest_sha(w.desired)))
    assert d == HIT, w.story()


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(actions(lagging_watcher=True, restarts=False), max_size=60))
def test_every_object_converges_whatever_the_watchers_and_appliers_do(steps: list[Action]) -> None:
    assert_converged(run(steps))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(actions(lagging_watcher=True, restarts=True), max_size=60))
def test_every_object_converges_across_planner_restarts(steps: list[Action]) -> None:
    assert_converged(run(steps))


# --- what the compacted streams tell a restarted planner -----------------------------------------
# SERVER and APPLIED keep one fact per object, and ``restore`` gets only that one: the live planner
# ignores facts older than what it knows, a restarted one believes the survivor. So the survivor
# must be the newest fact, not the last published (compare-and-publish, newest.py). Each example
# below is also run without that rule, to show what it prevents.

LAGGING_WATCHER_PUBLISHED_LAST: list[Action] = [
    Publish("m1"),
    Consume("bundle"),
    Take(),
    Finish(0),  # applied: m1 live at rv 1
    Land(0),
    Edit("f1"),  # someone changes it: rv 2
    Relist(),  # watcher A relists: publishes rv 2, never rv 1
    Watch(),
    Stale(0),  # watcher B, a moment behind, publishes rv 1 (a new id: the dedupe window is over)
    Restart(takeover=False, order=0),  # rebuilt from the survivor, then everything settles
]


def test_drift_is_corrected_after_a_restart_even_when_a_lagging_watcher_published_last() -> None:
    assert_converged(run(LAGGING_WATCHER_PUBLISHED_LAST))
    unguarded = run(LAGGING_WATCHER_PUBLISHED_LAST, newest_only=False)
    assert unguarded.live == "f1", "without it the restarted planner believes rv 1: a HIT"


APPLIERS_FINISHED_OUT_OF_ORDER: list[Action] = [
    Publish("m1"),
    Consume("bundle"),
    Take(),  # applier A takes m1
    Publish("m2"),
    Consume("bundle"),
    Take(),  # m2 replaces it on the subject; applier B takes m2
    Finish(0),  # A applies m1: rv 1
    Finish(0),  # B applies m2: rv 2
    Land(1),  # B's fact lands first
    Land(0),  # A's comes last: older than B's
]


def writes_of_a_restart(w: World) -> list[Decision]:
    before = len(w.sent)
    w.restart(takeover=False, order=0)
    return w.sent[before:]


def test_a_restart_with_nothing_changed_writes_nothing_after_appliers_finished_out_of_order() -> (
    None
):
    w = run(APPLIERS_FINISHED_OUT_OF_ORDER)
    assert_converged(w)  # the live planner got it right
    assert writes_of_a_restart(w) == [], w.story()
    unguarded = run(APPLIERS_FINISHED_OUT_OF_ORDER, newest_only=False)
    assert writes_of_a_restart(unguarded) != [], "without it APPLIED keeps A's m1: re-applied"
