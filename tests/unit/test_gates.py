"""What holds a bundle's writes back on one cluster (planner/memory/gates.py): whether a bundle
is held, by what, and what a decision record says of the windows — asked of ``Gates`` alone."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from schemas.decision import DecisionAction, DecisionReason
from schemas.messages import BundlePhase
from schemas.windows import SyncWindow, WindowsFile
from services.planner.memory.gates import Gates
from services.planner.rule.decide import Decision
from services.windows import verdict as w

NOON = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
INSIDE = NOON + dt.timedelta(minutes=10)  # the freeze is open (12:00-13:00)
BEFORE = NOON - dt.timedelta(hours=2)  # it is not
FREEZE = SyncWindow(kind="deny", name="freeze", schedule="0 12 * * *", duration="1h")
OFFICE = SyncWindow(kind="allow", name="office", schedule="0 9 * * *", duration="8h")
DEV_ONLY = SyncWindow(
    kind="deny", name="dev", schedule="0 12 * * *", duration="1h", clusters=("dev-*",)
)
PROD_LABELS = SyncWindow(
    kind="deny", name="prod", schedule="0 12 * * *", duration="1h", cluster_selector="env=prod"
)
HELD = Decision(DecisionAction.HOLD, DecisionReason.WINDOW)
APPLY = Decision(DecisionAction.APPLY, DecisionReason.MANIFEST)
HIT = Decision(DecisionAction.HIT, DecisionReason.HIT)
READY, RECONCILING = BundlePhase.READY, BundlePhase.RECONCILING


@dataclasses.dataclass(frozen=True)
class Case:
    """The gates of cluster ``prod`` at ``at``, asked about bundle ``web``."""

    windows: tuple[SyncWindow, ...] = ()
    at: dt.datetime = INSIDE
    suspended: str | None = None
    override: bool = False
    depends_on: tuple[str, ...] = ()
    phases: tuple[tuple[str, BundlePhase], ...] = ()
    labels: dict[str, str] | None = dataclasses.field(default_factory=dict)

    def gates(self) -> Gates:
        g = Gates(clock=self.at.timestamp, phases=dict(self.phases))
        g.set_windows(w.compiled(WindowsFile(windows=self.windows)))
        if self.suspended is not None:
            g.suspended["web"] = self.suspended
        if self.override:
            g.overrides.add("web")
        return g


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        pytest.param(Case(), None, id="nothing-holds-a-bundle-with-no-gates"),
        pytest.param(
            Case(suspended="incident"),
            (DecisionReason.SUSPENDED, "suspended (incident)", ""),
            id="suspended-says-the-reason-given",
        ),
        pytest.param(
            Case(suspended=""),
            (DecisionReason.SUSPENDED, "suspended", ""),
            id="suspended-with-no-reason-says-suspended",
        ),
        pytest.param(
            Case(windows=(FREEZE,), suspended="incident"),
            (DecisionReason.SUSPENDED, "suspended (incident)", ""),
            id="suspension-comes-before-an-open-window",
        ),
        pytest.param(
            Case(windows=(FREEZE,)),
            (DecisionReason.WINDOW, 'deny window "freeze" until 2026-06-01T13:00+00:00', "freeze"),
            id="an-open-deny-window-holds-naming-itself",
        ),
        pytest.param(Case(windows=(FREEZE,), at=BEFORE), None, id="a-closed-deny-window-holds-not"),
        pytest.param(
            Case(windows=(OFFICE,), at=NOON + dt.timedelta(hours=6)),
            (
                DecisionReason.WINDOW,
                'outside allow window "office" until 2026-06-02T09:00+00:00',
                "office",
            ),
            id="outside-an-allow-window-holds-until-it-opens",
        ),
        pytest.param(Case(windows=(OFFICE,)), None, id="inside-an-allow-window-holds-not"),
        pytest.param(
            Case(windows=(FREEZE,), override=True), None, id="an-override-writes-through-a-window"
        ),
        pytest.param(
            Case(windows=(FREEZE,), override=True, suspended="incident"),
            (DecisionReason.SUSPENDED, "suspended (incident)", ""),
            id="an-override-does-not-lift-a-suspension",
        ),
        pytest.param(
            Case(depends_on=("crds",), phases=(("crds", RECONCILING),)),
            (DecisionReason.DEPENDENCIES, "waits for crds (Reconciling)", ""),
            id="a-dependency-not-ready-holds",
        ),
        pytest.param(
            Case(depends_on=("crds", "db"), phases=(("crds", READY),)),
            (DecisionReason.DEPENDENCIES, "waits for db (not published)", ""),
            id="a-dependency-not-published-holds-naming-only-it",
        ),
        pytest.param(
            Case(depends_on=("crds",), phases=(("crds", READY),)),
            None,
            id="ready-dependencies-hold-not",
        ),
        pytest.param(
            Case(windows=(FREEZE,), depends_on=("crds",)),
            (DecisionReason.WINDOW, 'deny window "freeze" until 2026-06-01T13:00+00:00', "freeze"),
            id="a-window-comes-before-a-dependency",
        ),
        pytest.param(Case(windows=(DEV_ONLY,)), None, id="a-window-of-other-clusters-holds-not"),
        pytest.param(
            Case(windows=(PROD_LABELS,), labels={"env": "prod"}),
            (DecisionReason.WINDOW, 'deny window "prod" until 2026-06-01T13:00+00:00', "prod"),
            id="a-window-by-label-holds-a-cluster-so-labelled",
        ),
        pytest.param(
            Case(windows=(PROD_LABELS,), labels={"env": "dev"}),
            None,
            id="a-window-by-label-holds-not-a-cluster-labelled-otherwise",
        ),
        pytest.param(
            Case(windows=(PROD_LABELS,), labels=None),
            (DecisionReason.WINDOW, 'deny window "prod" until 2026-06-01T13:00+00:00', "prod"),
            id="a-window-by-label-holds-a-cluster-whose-labels-are-unknown",
        ),
    ],
)
def test_what_holds_a_bundle(case: Case, expected: tuple[DecisionReason, str, str] | None) -> None:
    hold = case.gates().hold(
        "web", depends_on=list(case.depends_on), cluster="prod", labels=case.labels
    )
    assert (hold and (hold.reason, hold.message, hold.window)) == expected


@pytest.mark.parametrize(
    ("case", "decision", "note"),
    [
        pytest.param(Case(windows=(FREEZE,)), HELD, "freeze", id="a-hold-names-the-window"),
        pytest.param(Case(windows=(FREEZE,)), APPLY, "", id="a-write-with-no-override-says-none"),
        pytest.param(
            Case(windows=(FREEZE,), override=True),
            APPLY,
            "override: freeze",
            id="a-write-through-an-open-window-names-it-overridden",
        ),
        pytest.param(
            Case(windows=(FREEZE,), override=True),
            HIT,
            "",
            id="a-hit-writes-nothing-so-overrides-nothing",
        ),
        pytest.param(
            Case(windows=(FREEZE,), override=True, at=BEFORE),
            APPLY,
            "",
            id="an-override-outside-the-window-has-nothing-to-override",
        ),
        pytest.param(Case(), HELD, "", id="a-window-hold-with-no-window-left-names-none"),
    ],
)
def test_what_a_decision_record_says_of_windows(case: Case, decision: Decision, note: str) -> None:
    assert case.gates().window_note("web", decision, "prod", case.labels) == note


@pytest.mark.parametrize(
    ("case", "bundles", "expected"),
    [
        pytest.param(Case(), ["web"], None, id="no-windows-no-change"),
        pytest.param(Case(windows=(DEV_ONLY,)), ["web"], None, id="no-window-names-the-cluster"),
        pytest.param(Case(windows=(FREEZE,)), [], None, id="no-bundles-no-change"),
        pytest.param(
            Case(windows=(FREEZE,)), ["web", "db"], NOON + dt.timedelta(hours=1), id="it-closes"
        ),
        pytest.param(Case(windows=(FREEZE,), at=BEFORE), ["web"], NOON, id="it-opens"),
        pytest.param(
            Case(windows=(FREEZE, OFFICE), at=NOON + dt.timedelta(hours=4)),
            ["web"],
            NOON + dt.timedelta(hours=5),
            id="the-soonest-of-several",
        ),
    ],
)
def test_when_a_window_next_changes(
    case: Case, bundles: list[str], expected: dt.datetime | None
) -> None:
    change = case.gates().next_window_change(bundles, "prod", case.labels)
    assert change == (expected.timestamp() if expected is not None else None)


def test_new_windows_drop_the_cached_answers_and_the_complaint() -> None:
    g = Case(windows=(FREEZE,)).gates()
    assert g.window_block("web", "prod", {}) is not None
    g.windows_unusable = "stored windows: JSON is malformed"
    g.set_windows(())
    assert (g.window_block("web", "prod", {}), g.windows_unusable) == (None, "")
