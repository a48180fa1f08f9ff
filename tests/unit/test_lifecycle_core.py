"""The pure core of the bundle lifecycle: holds (suspend, dependsOn), held decisions, the phase of
a held or deleted bundle, choosing a rollback revision, and the control/rollback subjects."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import msgspec
import pytest

from schemas.decision import DecisionAction as A
from schemas.decision import DecisionReason as R
from schemas.messages import Bundle
from schemas.messages import BundlePhase as P
from schemas.subjects import (
    ObjectKey,
    control_subject,
    parse_subject,
    rollback_subject,
    tenant_control_filter,
    tenant_rollback_filter,
)
from services.access import permissions
from services.core.manifest import ManifestError
from services.planner.rule import holds
from services.planner.rule.decide import (
    DELETE_INFLIGHT,
    HIT,
    Applied,
    Decision,
    Desired,
    Entry,
    Event,
    Failed,
    Observed,
    Release,
    Removed,
    Resend,
    reevaluate,
    step,
)
from services.planner.shell.rollback import choose
from services.planner.status.phase import Tally, bundle_phase
from tests.unit.test_subjects import _matches

# --- holds: resolve, dependencies, cycle, hold_of ---------------------------------------------


@pytest.mark.parametrize(
    ("owner", "ref", "full"),
    [
        pytest.param("team-a/web", "db", "team-a/db", id="tenant-name-is-same-tenant"),
        pytest.param("web", "db", "db", id="platform-name-is-platform"),
        pytest.param("team-a/web", "/crds", "crds", id="slash-name-is-platform"),
        pytest.param("web", "/crds", "crds", id="platform-slash-name"),
        pytest.param("team-a/web", "team-b/db", "team-b/db", id="tenant-slash-name-as-is"),
        pytest.param("web", "team-a/db", "team-a/db", id="platform-names-a-tenant-bundle"),
    ],
)
def test_resolve(owner: str, ref: str, full: str) -> None:
    assert holds.resolve(owner, ref) == full


@pytest.mark.parametrize(
    ("owner", "refs", "expected"),
    [
        pytest.param("team-a/web", [], [], id="none"),
        pytest.param("team-a/web", ["db", "/crds"], ["team-a/db", "crds"], id="own-and-platform"),
        pytest.param("team-a/web", ["team-a/db"], ["team-a/db"], id="own-tenant-spelled-out"),
        pytest.param("team-a/web", ["db", "team-a/db", "db"], ["team-a/db"], id="dedup"),
        pytest.param("team-a/web", ["crds", "/crds"], ["team-a/crds", "crds"], id="not-same"),
        pytest.param("web", ["crds", "/db", "crds"], ["crds", "db"], id="platform-dedup-order"),
        pytest.param("web", ["team-a/db"], ["team-a/db"], id="platform-may-wait-for-a-tenant"),
    ],
)
def test_dependencies(owner: str, refs: list[str], expected: list[str]) -> None:
    assert holds.dependencies(owner, refs) == expected


@pytest.mark.parametrize(
    ("owner", "refs", "match"),
    [
        pytest.param("team-a/web", ["web"], "depends on itself", id="self"),
        pytest.param("team-a/web", ["team-a/web"], "depends on itself", id="self-spelled-out"),
        pytest.param("web", ["/web"], "depends on itself", id="platform-self"),
        pytest.param("team-a/web", ["team-b/db"], "another tenant", id="other-tenant"),
        pytest.param("team-a/web", ["db", "team-b/db"], "team-b/db", id="names-the-first-bad"),
        pytest.param("team-a/web", ["Bad Name"], "must be a valid label", id="invalid-name"),
        pytest.param("team-a/web", ["Team_A/db"], "DNS label", id="invalid-tenant"),
        pytest.param("team-a/web", ["/"], "must be a valid label", id="empty-platform-name"),
        pytest.param("web", ["-db"], "must be a valid label", id="platform-invalid"),
    ],
)
def test_dependencies_refused(owner: str, refs: list[str], match: str) -> None:
    with pytest.raises(ManifestError, match=match):
        holds.dependencies(owner, refs)


@pytest.mark.parametrize(
    ("owner", "deps", "graph", "expected"),
    [
        pytest.param("a", [], {"b": ["a"]}, [], id="no-dependencies"),
        pytest.param("a", ["b"], {}, [], id="dependency-unknown"),
        pytest.param("a", ["b"], {"b": ["c"], "c": []}, [], id="chain"),
        pytest.param("a", ["b"], {"b": ["a"]}, ["a", "b", "a"], id="direct"),
        pytest.param("a", ["b"], {"b": ["c"], "c": ["d"], "d": ["a"]}, list("abcda"), id="long"),
        pytest.param("a", ["x", "b"], {"x": ["y"], "y": [], "b": ["c"], "c": ["a"]}, list("abca"),
                     id="through-the-second-dependency"),
        pytest.param("a", ["b"], {"b": ["c"], "c": ["b"], "z": ["a"]}, [],
                     id="unrelated-cycle-and-node"),
        pytest.param("a", ["b", "c"], {"b": ["d"], "c": ["d"], "d": []}, [],
                     id="diamond-without-cycle"),
        pytest.param("a", ["b", "c"], {"b": ["d"], "c": ["d"], "d": ["a"]}, list("abda"),
                     id="diamond-with-cycle"),
        pytest.param("a", ["b"], {"a": ["b"], "b": []}, [], id="owner-old-edges-ignored"),
        pytest.param("a", ["b"], {"a": [], "b": ["a"]}, list("aba"), id="new-edge-closes-it"),
    ],
)  # fmt: skip
def test_cycle(
    owner: str, deps: list[str], graph: dict[str, list[str]], expected: list[str]
) -> None:
    assert holds.cycle(owner, deps, graph) == expected


@pytest.mark.parametrize(
    ("deps", "phases", "suspended", "expected"),
    [
        pytest.param([], {}, None, None, id="free"),
        pytest.param(["db"], {"db": P.READY}, None, None, id="dependency-ready"),
        pytest.param([], {}, "an incident", holds.Hold(R.SUSPENDED, "suspended (an incident)"),
                     id="suspended-with-reason"),
        pytest.param([], {}, "", holds.Hold(R.SUSPENDED, "suspended"), id="suspended-no-reason"),
        pytest.param(["db"], {"db": P.RECONCILING}, "freeze",
                     holds.Hold(R.SUSPENDED, "suspended (freeze)"), id="suspended-wins"),
        pytest.param(["db"], {"db": P.RECONCILING}, None,
                     holds.Hold(R.DEPENDENCIES, "waits for db (Reconciling)"),
                     id="dependency-not-ready"),
        pytest.param(["crds", "db", "cache"], {"crds": P.READY, "cache": P.FAILED}, None,
                     holds.Hold(R.DEPENDENCIES, "waits for db (not published), cache (Failed)"),
                     id="only-the-waiting-named-in-order"),
    ],
)  # fmt: skip
def test_hold_of(
    deps: list[str], phases: dict[str, P], suspended: str | None, expected: holds.Hold | None
) -> None:
    assert holds.hold_of(deps, phases, suspended=suspended) == expected


# --- decide: a held write is recorded, not sent ------------------------------------------------

KEY = ObjectKey("", "ConfigMap", "ns", "cm")


def sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


M1, M2 = sha("manifest-1"), sha("manifest-2")
S1, FOREIGN = sha("server-after-1"), sha("someone-else-changed-it")
BASE = [Desired("b", "r1", M1), Applied(M1, S1, 10, bundle="b"), Observed(10, S1, owner_bundle="b")]
SUSP = Decision(A.HOLD, R.SUSPENDED)
DEPS = Decision(A.HOLD, R.DEPENDENCIES)


def settle(events: list[Event]) -> Entry:
    e = Entry(KEY)
    for ev in events:
        e, _ = step(e, ev, now=1.0)
    return e


SETTLED = settle(BASE)
DRIFTED = msgspec.structs.replace(SETTLED, server_sha=FOREIGN, server_rv=12)  # seen changed
FAILING = settle([Desired("b", "r1", M1), Failed(M1, at=5.0)])
APPLYING = settle([Desired("b", "r1", M1)])
DELETING = msgspec.structs.replace(SETTLED, bundle="", manifest_sha=None, inflight=DELETE_INFLIGHT)

HELD_CASES: list[tuple[str, Entry, Event, R, Decision | None]] = [
    ("new-object", Entry(KEY), Desired("b", "r1", M1), R.SUSPENDED, SUSP),
    ("new-manifest", SETTLED, Desired("b", "r2", M2), R.DEPENDENCIES, DEPS),
    ("newer-manifest-over-one-in-flight", APPLYING, Desired("b", "r2", M2), R.SUSPENDED, SUSP),
    ("drift", SETTLED, Observed(12, FOREIGN, owner_bundle="b"), R.SUSPENDED, SUSP),
    ("out-of-band-delete", SETTLED, Observed(12, None, deleted=True), R.SUSPENDED, SUSP),
    ("republish-retrying-a-failure", FAILING, Desired("b", "r1", M1), R.SUSPENDED, SUSP),
    ("release-still-held", DRIFTED, Release(), R.DEPENDENCIES, DEPS),
    ("resend-of-lost-apply", APPLYING, Resend(), R.SUSPENDED, SUSP),
    ("hit-is-a-hit", SETTLED, Desired("b", "r1", M1), R.SUSPENDED, HIT),
    ("no-change-is-nothing", SETTLED, Observed(11, S1, owner_bundle="b"), R.SUSPENDED, None),
    ("failure-waits-without-hold", FAILING, Observed(3, FOREIGN), R.SUSPENDED, None),
    ("keep-not-owned", SETTLED, Removed("other", "r2"), R.SUSPENDED, None),
    ("keep-prune-disabled", SETTLED, Removed("b", "r2", prune=False), R.SUSPENDED,
     Decision(A.KEEP, R.PRUNE_DISABLED)),
    ("keep-in-use", SETTLED, Removed("b", "r2", in_use="ns"), R.DEPENDENCIES,
     Decision(A.KEEP, R.IN_USE)),
    ("prune", SETTLED, Removed("b", "r2"), R.SUSPENDED, SUSP),
]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "event", "hold", "expected"),
    [pytest.param(*c[1:], id=c[0]) for c in HELD_CASES],
)
def test_a_held_write_is_a_hold_and_nothing_goes_in_flight(
    entry: Entry, event: Event, hold: R, expected: Decision | None
) -> None:
    e, d = step(entry, event, now=99.0, hold=hold)
    assert d == expected
    assert e.inflight == (None if isinstance(event, Resend) else entry.inflight)
    assert e.inflight_at == entry.inflight_at  # nothing was sent
    assert e.failed == entry.failed
    free, unheld = step(entry, event, now=99.0)
    if expected is not None and expected.action is A.HOLD:
        assert unheld is not None
        assert unheld.writes  # the hold stands for a write
    else:
        assert (free, unheld) == (e, d)  # non-writes are unaffected by the hold


def test_a_held_prune_clears_the_desired_state_but_is_not_a_delete_in_flight() -> None:
    e, d = step(SETTLED, Removed("b", "r2"), now=5.0, hold=R.SUSPENDED)
    assert d == SUSP
    assert (e.bundle, e.revision, e.manifest_sha) == ("", "r2", None)
    assert e.inflight is None  # not DELETE_INFLIGHT
    free, d = step(SETTLED, Removed("b", "r2"), now=5.0)
    assert d == Decision(A.DELETE, R.PRUNE)
    assert (free.inflight, free.inflight_at) == (DELETE_INFLIGHT, 5.0)


def test_the_failure_stays_on_a_held_retry() -> None:
    e, d = step(FAILING, Desired("b", "r1", M1), hold=R.SUSPENDED)
    assert d == SUSP
    assert (e.failed, e.failing, e.inflight) == (M1, True, None)
    e, d = step(FAILING, Desired("b", "r1", M1))
    assert d == Decision(A.APPLY, R.RETRY)
    assert (e.failed, e.inflight) == (None, M1)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        pytest.param(DRIFTED, Decision(A.APPLY, R.DRIFT), id="drifted-entry-gets-drift"),
        pytest.param(msgspec.structs.replace(SETTLED, manifest_sha=M2, revision="r2"),
                     Decision(A.APPLY, R.MANIFEST), id="held-new-manifest-gets-manifest"),
        pytest.param(APPLYING, None, id="in-flight-waits"),
        pytest.param(SETTLED, None, id="settled-no-hit-recorded"),
    ],
)  # fmt: skip
def test_release_decides_again(entry: Entry, expected: Decision | None) -> None:
    e, d = step(entry, Release(), now=7.0)
    assert d == expected
    if expected is not None:
        assert (e.inflight, e.inflight_at) == (e.manifest_sha, 7.0)


def test_a_lost_delete_is_not_sent_again_while_held() -> None:
    e, d = step(DELETING, Resend(), now=9.0, hold=R.DEPENDENCIES)
    assert d == DEPS
    assert e.inflight is None
    e, d = step(DELETING, Resend(), now=9.0)
    assert d == Decision(A.DELETE, R.RESEND)
    assert (e.inflight, e.inflight_at) == (DELETE_INFLIGHT, 9.0)


@pytest.mark.parametrize(
    ("entry", "hold", "expected"),
    [
        pytest.param(Entry(KEY, bundle="b", manifest_sha=M1), R.SUSPENDED, SUSP, id="new-held"),
        pytest.param(DRIFTED, R.DEPENDENCIES, DEPS, id="drift-held"),
        pytest.param(SETTLED, R.SUSPENDED, HIT, id="hit-unaffected"),
        pytest.param(Entry(KEY, bundle="b", manifest_sha=M1), None, Decision(A.APPLY, R.NEW),
                     id="new-free"),
        pytest.param(DRIFTED, None, Decision(A.APPLY, R.DRIFT), id="drift-free"),
    ],
)  # fmt: skip
def test_reevaluate_with_hold(entry: Entry, hold: R | None, expected: Decision) -> None:
    e, d = reevaluate(entry, now=3.0, hold=hold)
    assert d == expected
    if expected.writes:
        assert (e.inflight, e.inflight_at, e.failed) == (M1, 3.0, None)
    else:
        assert e == entry


# --- status: the phase of a held or deleted bundle ---------------------------------------------


def tally(**fields: Any) -> Tally:
    """A revision of 9 objects, all applied, seen and ready, changed by ``fields``."""
    return dataclasses.replace(Tally("r2", total=9, applied=9, ready=9), **fields)


SUSPENDED = {"hold": "suspended (an incident)", "suspended": True}
WAITS = {"hold": "waits for crds (Reconciling)"}

PHASE_CASES: list[tuple[str, Tally, P, str, str]] = [
    # (id, tally, phase, message starts with, message contains)
    ("suspended-drift", tally(drifted=2, **SUSPENDED), P.OUT_OF_SYNC, "suspended (an incident): ",
     "2 objects drifted"),
    ("suspended-pending-is-out-of-sync", tally(applied=7, ready=7, **SUSPENDED), P.OUT_OF_SYNC,
     "suspended (an incident): 7/9 applied", "7/9 ready"),
    ("suspended-pruning", tally(pruning=1, **SUSPENDED), P.OUT_OF_SYNC, "suspended (an incident)",
     "1 to prune"),
    ("suspended-ready", tally(**SUSPENDED), P.READY, "revision r2 applied and ready",
     "(suspended)"),
    ("waits-pending", tally(applied=8, ready=8, **WAITS), P.RECONCILING,
     "waits for crds (Reconciling): ", "8/9 applied"),
    ("waits-drift-is-reconciling", tally(drifted=1, **WAITS), P.RECONCILING,
     "waits for crds (Reconciling): ", "drifted"),
    ("waits-but-ready", tally(**WAITS), P.READY, "revision r2 applied and ready", "ready"),
    ("failed-wins-over-suspended", tally(failed=1, applied=8, **SUSPENDED), P.FAILED,
     "1 of 9 objects failed", "failed"),
    ("conflict-wins-over-a-wait", tally(conflicts=1, **WAITS), P.CONFLICT, "1 of 9 objects",
     "conflict"),
    ("deleting-pruning", tally(deleting=True, pruning=3), P.RECONCILING,
     "deleting: 3 objects to prune", "prune"),
    ("deleting-prune-failed", tally(deleting=True, pruning=1, prune_failed=2), P.FAILED,
     "deleting: 2 prunes failed", "failed"),
    ("deleted", tally(deleting=True), P.DELETED, "deleted; its objects are pruned", "pruned"),
    ("deleted-kept", tally(deleting=True, kept=2, held=1), P.DELETED, "deleted; 3 objects kept",
     "(not pruned)"),
    ("deleted-held-only", tally(deleting=True, held=1), P.DELETED, "deleted; 1 objects kept",
     "kept"),
    ("deleting-while-suspended", tally(deleting=True, pruning=2, **SUSPENDED), P.OUT_OF_SYNC,
     "suspended (an incident): deleting: 2 objects to prune", "prune"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("t", "phase", "starts", "contains"),
    [pytest.param(*c[1:], id=c[0]) for c in PHASE_CASES],
)
def test_held_and_deleted_phases(t: Tally, phase: P, starts: str, contains: str) -> None:
    got, message = bundle_phase(t)
    assert (got, message.startswith(starts)) == (phase, True), message
    assert contains in message


def test_suspended_ready_message() -> None:
    ready = (P.READY, "revision r2 applied and ready (suspended)")
    assert bundle_phase(tally(**SUSPENDED)) == ready


# --- rollback: which revision to republish -----------------------------------------------------


def rev(revision: str, *, delete: bool = False, rollback_of: str = "") -> Bundle:
    return Bundle(
        cluster="c", bundle="web", revision=revision, delete=delete, rollback_of=rollback_of
    )


R1, R2, R3 = rev("r1"), rev("r2"), rev("r3")
ROLLED = rev("r2", rollback_of="r3")  # r2 republished by a rollback from r3
GONE = rev("r4", delete=True)


@pytest.mark.parametrize(
    ("history", "in_force", "to", "expected"),
    [
        pytest.param([R1, R2, R3], "r3", "", R2, id="newest-before-in-force"),
        pytest.param([R1, R2, R3, ROLLED], "r2", "", R3, id="rolling-back-a-rollback"),
        pytest.param([R1, R2, R3, ROLLED], "r2", "r1", R1, id="to-an-existing-revision"),
        pytest.param([R1, R2, R3], "r3", "r1", R1, id="to-older"),
        pytest.param([R1, R2, R3, ROLLED], "r2", "r2", "revision r2 is the one in force",
                     id="to-the-one-in-force"),
        pytest.param([R1, R2, R3, ROLLED], "r2", "r9",
                     "revision r9 is not among the revisions on the bus (r1, r2, r3)",
                     id="to-unknown-lists-each-once-oldest-first"),
        pytest.param([R1, R2, GONE], "r2", "r4",
                     "revision r4 is not among the revisions on the bus (r1, r2)",
                     id="to-a-deletion-is-refused"),
        pytest.param([R1, R2, GONE], "", "", R2, id="deleted-bundle-undeleted"),
        pytest.param([R1, GONE, R2, GONE], "r2", "", R1, id="deletions-skipped"),
        pytest.param([R1, R2, GONE], "", "r1", R1, id="deleted-bundle-to-named"),
        pytest.param([R1], "r1", "", "no revision before r1 on the bus (r1)", id="nothing-before"),
        pytest.param([GONE], "", "", "no revision before the deletion on the bus (none)",
                     id="only-deletions"),
        pytest.param([R1, R2], "r9", "", R2, id="in-force-no-longer-on-the-bus"),
    ],
)  # fmt: skip
def test_choose(history: list[Bundle], in_force: str, to: str, expected: Bundle | str) -> None:
    chosen = choose(history, in_force, to)
    assert chosen == expected
    assert isinstance(chosen, str) or not chosen.delete  # a deletion is never chosen


# --- subjects and permissions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bundle", "control", "rollback"),
    [
        ("web", "driftbus.control.c1.=.web", "driftbus.rollback.c1.=.web"),
        ("team-a/web", "driftbus.control.c1.team-a.web", "driftbus.rollback.c1.team-a.web"),
        ("team-a/x.y", "driftbus.control.c1.team-a.x=2Ey", "driftbus.rollback.c1.team-a.x=2Ey"),
    ],
)
def test_control_and_rollback_subjects_round_trip(bundle: str, control: str, rollback: str) -> None:
    assert control_subject("c1", bundle) == control
    assert rollback_subject("c1", bundle) == rollback
    for family, subject in (("control", control), ("rollback", rollback)):
        parsed = parse_subject(subject)
        got = (parsed.family, parsed.cluster, parsed.bundle, parsed.key)
        assert got == (family, "c1", bundle, None)
    mine = bundle.startswith("team-a/")
    assert _matches(tenant_control_filter("c1", "team-a"), control) is mine
    assert _matches(tenant_rollback_filter("c1", "team-a"), rollback) is mine
    assert not _matches(tenant_control_filter("c2", "team-a"), control)
    assert not _matches(tenant_control_filter("c1", "team-a"), rollback)


def test_tenant_filters() -> None:
    assert tenant_control_filter("c1", "team-a") == "driftbus.control.c1.team-a.*"
    assert tenant_rollback_filter("c1", "team-a") == "driftbus.rollback.c1.team-a.*"


@pytest.mark.parametrize(
    ("cluster", "bundle", "allowed"),
    [
        ("c1", "team-a/web", True),
        ("c1", "team-a/x.y", True),
        ("c1", "team-b/web", False),
        ("c1", "web", False),
        ("c1", "team-a", False),  # a platform bundle named like the tenant
        ("c2", "team-a/web", False),  # a cluster not granted
    ],
)
def test_a_tenant_controls_and_rolls_back_only_its_own_bundles(
    cluster: str, bundle: str, allowed: bool
) -> None:
    perms = permissions.tenant("team-a", ["c1"])
    for subject in (control_subject(cluster, bundle), rollback_subject(cluster, bundle)):
        assert any(_matches(p, subject) for p in perms.publish) is allowed, subject
