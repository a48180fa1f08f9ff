"""Events from bus messages, alert matching and the de-dup / rate-limit gate (pure parts of
services/notify)."""

from __future__ import annotations

import datetime as dt

import pytest

from schemas.decision import DecisionAction, DecisionReason, DecisionRecord
from schemas.fleet import RolloutEvent, RolloutPhase
from schemas.messages import BundleCounts, BundlePhase, BundleStatus
from schemas.notify import Alert, EventKind, Limits, NotifyConfig, Provider, ProviderType
from schemas.subjects import ObjectKey
from services.notify import events, match
from services.notify.events import Event
from services.notify.gate import Gate, Verdict

AT = dt.datetime(2026, 11, 26, 12, tzinfo=dt.UTC)
KEY = ObjectKey("", "ConfigMap", "shop", "settings")


def status(phase: BundlePhase, bundle: str = "team-a/web", revision: str = "r1") -> BundleStatus:
    return BundleStatus(
        cluster="prod-1",
        bundle=bundle,
        revision=revision,
        phase=phase,
        counts=BundleCounts(total=1),
        source="https://github.com/acme/shop.git@" + "a" * 40,
        at=AT,
    )


@pytest.mark.parametrize(
    ("phase", "kind"),
    [
        (BundlePhase.READY, EventKind.READY),
        (BundlePhase.FAILED, EventKind.FAILED),
        (BundlePhase.CONFLICT, EventKind.FAILED),
        (BundlePhase.DEGRADED, EventKind.DEGRADED),
        (BundlePhase.RECONCILING, EventKind.PROGRESSING),
        (BundlePhase.OUT_OF_SYNC, EventKind.PROGRESSING),
        (BundlePhase.PRUNE_HELD, EventKind.PRUNE_HELD),  # someone must approve: its own kind
        (BundlePhase.DELETED, None),
    ],
)
def test_a_bundle_status_is_an_event_of_its_phase(phase: BundlePhase, kind: EventKind) -> None:
    got = events.from_bundle_status(status(phase))
    assert (got.kind if got else None) == kind
    if got:
        assert (got.cluster, got.bundle, got.tenant, got.detail) == (
            "prod-1",
            "team-a/web",
            "team-a",
            str(phase),
        )


def decision(action: DecisionAction, reason: DecisionReason) -> DecisionRecord:
    return DecisionRecord(
        cluster="prod-1", key=KEY, bundle="team-a/web", revision="r1", action=action, reason=reason
    )


@pytest.mark.parametrize(
    ("action", "reason", "is_event"),
    [
        (DecisionAction.APPLY, DecisionReason.DRIFT, True),
        (DecisionAction.APPLY, DecisionReason.DELETED, True),
        (DecisionAction.APPLY, DecisionReason.NEW, False),
        (DecisionAction.APPLY, DecisionReason.MANIFEST, False),
        (DecisionAction.HIT, DecisionReason.HIT, False),
        (DecisionAction.HOLD, DecisionReason.DRIFT, False),  # held: nothing was corrected
        (DecisionAction.DELETE, DecisionReason.PRUNE, False),
    ],
)
def test_only_a_drift_correction_decision_is_an_event(
    action: DecisionAction, reason: DecisionReason, is_event: bool
) -> None:
    got = events.from_decision(decision(action, reason))
    assert (got is not None) == is_event
    if got:
        assert got.kind is EventKind.DRIFT_CORRECTED
        assert got.object == "ConfigMap/shop/settings"
        assert "drifted, corrected" in got.title() or "re-created" in got.title()


def test_a_rollout_transition_is_a_rollout_step_over_its_clusters() -> None:
    r = RolloutEvent(
        bundle="web",
        revision="r2",
        seq=3,
        event="step",
        phase=RolloutPhase.PROGRESSING,
        step=2,
        clusters=["prod-1", "prod-2"],
    )
    got = events.from_rollout(r)
    assert (got.kind, got.detail, got.where, got.tenant) == (
        EventKind.ROLLOUT_STEP,
        "step 2",
        ("prod-1", "prod-2"),
        "",
    )


def test_a_rollback_under_way_and_its_end_are_each_sent() -> None:
    """RollingBack is no end: its end (rolled back, or failed naming the clusters) is news of
    its own, never a repeat of the rollback starting."""
    gate = Gate(Limits(dedupe_seconds=600))
    sent = []
    for seq, (event, phase, clusters) in enumerate(
        [
            ("rolling-back", RolloutPhase.ROLLING_BACK, ["prod-1", "prod-2"]),
            ("rollback-failed", RolloutPhase.ROLLBACK_FAILED, ["prod-2"]),
        ]
    ):
        r = RolloutEvent(
            bundle="web", revision="r2", seq=seq, event=event, phase=phase, step=0,
            clusters=clusters, message=f"{event}: prod-2",
        )  # fmt: skip
        got = events.from_rollout(r)
        sent.append((gate.admit("hook", got, float(seq)), got.title(), got.where))
    assert sent == [
        (Verdict.SEND, "rollout of web r2: rolling-back", ("prod-1", "prod-2")),
        (Verdict.SEND, "rollout of web r2: rollback-failed", ("prod-2",)),
    ]


# --- matching ------------------------------------------------------------------------------

HOOK = Provider(name="hook", type=ProviderType.WEBHOOK, url="http://x")
CHAT = Provider(name="chat", type=ProviderType.SLACK, url_file="/u")


def ev(
    kind: EventKind = EventKind.READY,
    bundle: str = "team-a/web",
    cluster: str = "prod-1",
    **kw: str,
) -> Event:
    return Event(kind=kind, bundle=bundle, revision="r1", cluster=cluster, **kw)  # type: ignore[arg-type]


LABELS = {"prod-1": {"env": "prod"}, "dev-1": {"env": "dev"}}


@pytest.mark.parametrize(
    ("alert", "event", "admitted"),
    [
        (Alert(providers=("hook",)), ev(), True),
        (Alert(providers=("hook",)), ev(EventKind.PROGRESSING), False),  # not by default
        (Alert(providers=("hook",)), ev(EventKind.PRUNE_HELD), True),  # someone must approve
        (
            Alert(providers=("hook",), events=(EventKind.PROGRESSING,)),
            ev(EventKind.PROGRESSING),
            True,
        ),
        (Alert(providers=("hook",), bundles=("team-a/*",)), ev(), True),
        (Alert(providers=("hook",), bundles=("team-a/*",)), ev(bundle="team-b/web"), False),
        (Alert(providers=("hook",), bundles=("web",)), ev(bundle="web"), True),
        (Alert(providers=("hook",), tenants=("",)), ev(bundle="web"), True),
        (Alert(providers=("hook",), tenants=("",)), ev(), False),
        (Alert(providers=("hook",), tenants=("team-*",)), ev(), True),
        (Alert(providers=("hook",), clusters=("prod-*",)), ev(), True),
        (Alert(providers=("hook",), clusters=("prod-*",)), ev(cluster="dev-1"), False),
        (Alert(providers=("hook",), cluster_selector="env=prod"), ev(), True),
        (Alert(providers=("hook",), cluster_selector="env=prod"), ev(cluster="dev-1"), False),
        (Alert(providers=("hook",), cluster_selector="env=prod"), ev(cluster="unknown"), False),
        (Alert(providers=("hook",), cluster_selector="env in (a"), ev(), False),
        (
            Alert(providers=("hook",), clusters=("dev-*",)),
            Event(EventKind.ROLLOUT_STEP, "web", "r1", clusters=("prod-1", "dev-1")),
            True,
        ),
        (
            Alert(providers=("hook",), clusters=("dev-*",)),
            Event(EventKind.ROLLOUT_STEP, "web", "r1"),
            False,
        ),
    ],
)
def test_an_alert_admits_what_every_filter_admits(
    alert: Alert, event: Event, admitted: bool
) -> None:
    assert match.admits(alert, event, lambda c: LABELS.get(c, {})) is admitted


def test_a_tenants_configuration_is_never_told_of_another_tenants_bundles() -> None:
    """Even an alert admitting everything (a stored configuration that slipped past apply)."""
    cfg = NotifyConfig(providers=(HOOK, CHAT), alerts=(Alert(providers=("chat", "hook")),))
    none: match.Labels = lambda _: {}  # noqa: E731
    assert match.providers_for(cfg, "team-a", ev(), none) == ["hook", "chat"]
    assert match.providers_for(cfg, "team-a", ev(bundle="team-b/web"), none) == []
    assert match.providers_for(cfg, "team-a", ev(bundle="web"), none) == []
    assert match.providers_for(cfg, "", ev(bundle="team-b/web"), none) == ["hook", "chat"]


# --- the gate ------------------------------------------------------------------------------


def run(gate: Gate, steps: list[tuple[float, Event]], provider: str = "hook") -> list[str]:
    return [str(gate.admit(provider, e, t)) for t, e in steps]


DRIFT = ev(EventKind.DRIFT_CORRECTED, object="ConfigMap/shop/settings", detail="drift")


@pytest.mark.parametrize(
    ("steps", "verdicts"),
    [
        pytest.param(
            [(0, DRIFT), (5, DRIFT), (10, DRIFT), (20, DRIFT)],
            ["send", "repeat", "repeat", "repeat"],
            id="flapping-object-sends-once-within-the-window",
        ),
        pytest.param(
            [(0, DRIFT), (61, DRIFT)], ["send", "send"], id="the-same-drift-after-the-window-sends"
        ),
        pytest.param(
            [(0, DRIFT), (1, ev(EventKind.DRIFT_CORRECTED, object="ConfigMap/shop/other"))],
            ["send", "send"],
            id="another-object-is-another-message",
        ),
        pytest.param(
            [(0, ev()), (1, ev()), (2, ev())],
            ["send", "unchanged", "unchanged"],
            id="a-status-republished-in-the-same-phase-is-no-news",
        ),
        pytest.param(
            [(0, ev()), (1, ev(EventKind.DEGRADED)), (2, ev()), (3, ev())],
            ["send", "send", "send", "unchanged"],
            id="a-change-of-phase-is-always-news-so-the-last-message-is-the-state-in-force",
        ),
        pytest.param(
            [(0, ev()), (1, ev(EventKind.PROGRESSING)), (2, ev()), (3, ev(EventKind.FAILED))],
            ["send", "unchanged", "unchanged", "send"],
            id="a-ready-revision-reconciled-again-(drift)-is-no-news",
        ),
        pytest.param(
            [
                (0, ev(EventKind.PROGRESSING)),
                (1, ev()),
                (2, Event(EventKind.PROGRESSING, "team-a/web", "r2", cluster="prod-1")),
                (3, Event(EventKind.READY, "team-a/web", "r2", cluster="prod-1")),
            ],
            ["send", "send", "send", "send"],
            id="a-new-revision-progressing-then-ready",
        ),
        pytest.param(
            [
                (0, ev(EventKind.FAILED, detail="Failed")),
                (1, ev(EventKind.FAILED, detail="Conflict")),
            ],
            ["send", "send"],
            id="another-detail-of-a-phase-is-news",
        ),
        pytest.param(
            [(0, ev()), (1, Event(EventKind.READY, "team-a/web", "r2", cluster="prod-1"))],
            ["send", "send"],
            id="a-new-revision-ready-is-news",
        ),
        pytest.param(
            [(0, ev()), (1, ev(cluster="prod-2"))],
            ["send", "send"],
            id="each-cluster-its-own-phase",
        ),
    ],
)
def test_the_gate(steps: list[tuple[float, Event]], verdicts: list[str]) -> None:
    assert run(Gate(Limits(dedupe_seconds=60)), steps) == verdicts


def test_the_rate_limit_drops_the_excess_per_provider_per_minute() -> None:
    gate = Gate(Limits(per_minute=3))
    drifts = [ev(EventKind.DRIFT_CORRECTED, object=f"ConfigMap/shop/c{i}") for i in range(6)]
    got = run(gate, [(float(i), e) for i, e in enumerate(drifts[:5])])
    assert got == ["send", "send", "send", "rate-limited", "rate-limited"]
    assert run(gate, [(5.0, drifts[5])], provider="chat") == ["send"]  # another provider
    assert run(gate, [(60.5, drifts[5])]) == ["send"]  # the first one left the minute
    assert gate.dropped[("hook", Verdict.RATE)] == 2


def test_observing_the_replay_learns_the_phase_without_sending() -> None:
    gate = Gate(Limits())
    gate.observe("hook", ev())
    assert run(gate, [(0, ev()), (1, ev(EventKind.FAILED))]) == ["unchanged", "send"]


def test_a_new_phase_is_never_rate_limited() -> None:
    # a dropped phase would not come again (a status is published when it changes): the
    # provider's last word would stay the previous phase; a phase counts against the rate
    gate = Gate(Limits(per_minute=1))
    other = ev(cluster="prod-2")
    assert run(gate, [(0, other), (1, ev()), (61, ev())]) == ["send", "send", "unchanged"]
