"""The pure parts of the fleet plan (issue 45): which clusters a targeting names and the step
each falls in, what is refused (the tenant's clusters, a label a variable needs), what a window
holds, each cluster's verdicts from recorded facts, the counts per cluster and the PR comment."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from schemas.fleet import ClusterRecord
from schemas.messages import AppliedEvent, ServerEvent
from schemas.subjects import ObjectKey
from schemas.tenants import Tenant, TenantPolicy
from schemas.windows import SyncWindow, WindowsFile
from services.cli.plan import fleetview
from services.cli.plan.fleet import ClusterPlan, Recorded, Targeting, plan_fleet, values
from services.cli.plan.verdict import Known, PlanRow
from services.core.sha import manifest_sha
from services.planner.rule import facts
from services.planner.rule.entry import Entry
from services.windows.document import compiled

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)
LABELS = {
    "canary": {"env": "canary", "region": "eu"},
    "prod-a": {"env": "prod", "region": "eu"},
    "prod-b": {"env": "prod"},
    "prod-c": {"env": "prod", "region": "us"},
}
RECORDS = {n: ClusterRecord(name=n, labels=lab) for n, lab in LABELS.items()}


def cm(name: str, data: dict[str, str], ns: str = "app") -> dict[str, Any]:
    meta = {"name": name, "namespace": ns}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def plan(t: Targeting, **rec: Any) -> dict[str, ClusterPlan]:
    recorded = Recorded(RECORDS, rec.pop("known", {}), **rec)
    return {p.cluster: p for p in plan_fleet(t, recorded, NOW)}


def settled(t: Targeting, cluster: str, manifests: list[dict[str, Any]]) -> Known:
    """The facts a cluster records once ``manifests`` were applied and seen, untouched since:
    the applied and the watcher's fact of each object as the planner would send it."""
    known: dict[ObjectKey, Entry] = {}
    first = plan(Targeting(t.bundle, manifests, substitute=t.substitute))[cluster]
    for i, r in enumerate(first.rows):
        assert r.manifest is not None
        sha = manifest_sha(r.manifest).hex()
        live = f"{i:064x}"
        known[r.key] = facts.rebuilt(r.key, [
            AppliedEvent(
                cluster=cluster, key=r.key, bundle=t.bundle, revision="r1", manifest_sha=sha,
                apply_sha=live, resource_version=str(i + 1), applied_at=NOW,
            ),
            ServerEvent(
                cluster=cluster, key=r.key, resource_version=str(i + 1), bundle=t.bundle,
                watcher="w", server_sha=live,
            ),
        ])  # fmt: skip
    return known


STEPS: list[tuple[str, list[str], dict[str, int]]] = [
    ("no-steps-every-cluster-in-the-one-step", [], {"prod-a": 1, "prod-b": 1, "prod-c": 1}),
    ("a-selector-step-then-the-rest", ["region=eu"], {"prod-a": 1, "prod-b": 2, "prod-c": 2}),
    ("a-percentage-in-name-order", ["34%"], {"prod-a": 1, "prod-b": 1, "prod-c": 2}),
    (
        "later-steps-hold-only-the-new-clusters",
        ["region=eu", "region=us"],
        {"prod-a": 1, "prod-b": 3, "prod-c": 2},
    ),
]


@pytest.mark.parametrize(("steps", "expected"), [s[1:] for s in STEPS], ids=[s[0] for s in STEPS])
def test_each_cluster_falls_in_its_rollout_step(steps: list[str], expected: dict[str, int]) -> None:
    got = plan(Targeting("web", [cm("a", {})], selector="env=prod", steps=steps))
    assert {c: p.step for c, p in got.items()} == expected


TARGETS: list[tuple[str, str, list[str], list[str]]] = [
    ("a-selector", "env=prod", [], ["prod-a", "prod-b", "prod-c"]),
    ("named-clusters", "", ["canary", "prod-b"], ["canary", "prod-b"]),
    ("named-and-selected", "region=eu", ["canary", "prod-b"], ["canary"]),
    ("not-registered-named", "", ["nowhere"], []),
    ("every-cluster", "", [], ["canary", "prod-a", "prod-b", "prod-c"]),
]


@pytest.mark.parametrize(
    ("selector", "named", "expected"), [t[1:] for t in TARGETS], ids=[t[0] for t in TARGETS]
)
def test_the_plan_names_exactly_the_clusters_a_publish_would_reach(
    selector: str, named: list[str], expected: list[str]
) -> None:
    got = plan(Targeting("web", [cm("a", {})], selector=selector, named=named))
    assert sorted(got) == expected


def test_a_tenant_refused_a_cluster_is_named_and_has_no_step() -> None:
    policy = TenantPolicy(
        tenants={"team": Tenant(service_account="team/deployer", cluster_selector="env=prod")}
    )
    got = plan(Targeting("team/web", [cm("a", {})], named=["canary", "prod-a"]), policy=policy)
    assert got["canary"].step is None
    assert "clusterSelector" in got["canary"].refused
    assert got["prod-a"].refused == ""
    assert got["prod-a"].step == 1


def test_substituted_values_per_cluster_and_a_missing_label_refuses_that_cluster() -> None:
    manifests = [cm("a", {"who": "${cluster.name}", "region": "${cluster.labels.region}"})]
    got = plan(Targeting("web", manifests, selector="env=prod", substitute=True))
    assert got["prod-a"].values == {"${cluster.labels.region}": "eu", "${cluster.name}": "prod-a"}
    assert got["prod-a"].rows[0].manifest is not None
    assert got["prod-a"].rows[0].manifest["data"] == {"who": "prod-a", "region": "eu"}
    assert "has no label for ${cluster.labels.region}" in got["prod-b"].refused
    assert got["prod-b"].rows == []


def test_values_lists_each_variable_once() -> None:
    ms = [cm("a", {"x": "${cluster.name}-${cluster.name}", "y": "${cluster.labels.k}"})]
    assert values(ms, "c1", {}) == {"${cluster.labels.k}": "", "${cluster.name}": "c1"}


def test_verdicts_per_cluster_new_changed_unchanged_and_prune() -> None:
    t1 = Targeting("web", [cm("a", {"v": "1"}), cm("b", {"v": "1"}), cm("c", {"v": "1"})])
    known = settled(t1, "prod-a", list(t1.manifests))
    t2 = Targeting(
        "web",
        [cm("a", {"v": "2"}), cm("b", {"v": "1"}), cm("d", {"v": "1"})],
        named=["prod-a", "prod-b"],
    )
    got = plan(t2, known={"prod-a": known})
    rows = {r.key.name: f"{r.action}:{r.reason}" for r in got["prod-a"].rows}
    assert rows == {
        "a": "apply:manifest",
        "b": "unchanged:hit",
        "c": "delete:prune",
        "d": "apply:new",
    }
    assert {r.key.name for r in got["prod-b"].rows} == {"a", "b", "d"}  # nothing recorded: new
    assert fleetview.counts(got["prod-b"].rows).new == 3


def test_a_cluster_leaving_the_fleet_is_pruned_unless_orphaned() -> None:
    t1 = Targeting("web", [cm("a", {})])
    known = {"canary": settled(t1, "canary", list(t1.manifests))}
    t = Targeting("web", [cm("a", {})], selector="env=prod")
    got = plan(t, known=known, placed=["canary", "prod-a"])
    assert got["canary"].leaving
    assert [(r.action, r.key.name) for r in got["canary"].rows] == [("delete", "a")]
    orphan = Targeting("web", [cm("a", {})], selector="env=prod", on_leave="orphan")
    got = plan(orphan, known=known, placed=["canary"])
    assert [(r.action, r.reason) for r in got["canary"].rows] == [("keep", "prune-disabled")]


def test_a_deny_window_open_now_is_named_on_the_clusters_it_holds() -> None:
    spec = WindowsFile(
        windows=(
            SyncWindow(
                kind="deny", schedule="0 0 * * *", duration="24h", cluster_selector="region=eu",
                name="freeze",
            ),
        )
    )  # fmt: skip
    got = plan(Targeting("web", [cm("a", {})], selector="env=prod"), windows=compiled(spec))
    assert got["prod-a"].held.startswith('deny window "freeze" until')
    assert got["prod-b"].held == ""


KEY = ObjectKey("", "ConfigMap", "ns", "x")
BUCKETS: list[tuple[str, PlanRow, str]] = [
    ("new", PlanRow(KEY, "apply", "new"), "new"),
    ("new-created-by-dry-run", PlanRow(KEY, "apply", "new (create)"), "new"),
    ("manifest", PlanRow(KEY, "apply", "manifest"), "changed"),
    ("retry-after-failure", PlanRow(KEY, "apply", "retry"), "changed"),
    ("drift", PlanRow(KEY, "apply", "drift"), "drift"),
    ("deleted-out-of-band", PlanRow(KEY, "apply", "deleted"), "drift"),
    ("sops-secret", PlanRow(KEY, "apply", "new; SOPS-encrypted: …"), "new"),
    ("prune", PlanRow(KEY, "delete", "prune"), "prune"),
    ("kept", PlanRow(KEY, "keep", "annotation"), "keep"),
    ("hit", PlanRow(KEY, "unchanged", "hit"), "unchanged"),
    ("dry-run-error", PlanRow(KEY, "error", "422"), "error"),
]


@pytest.mark.parametrize(("row", "expected"), [b[1:] for b in BUCKETS], ids=[b[0] for b in BUCKETS])
def test_each_row_counts_in_one_column(row: PlanRow, expected: str) -> None:
    assert fleetview.bucket(row) == expected


def _doc() -> Any:
    a = ClusterPlan(
        "prod-a",
        {"env": "prod"},
        1,
        [PlanRow(KEY, "apply", "manifest"), PlanRow(KEY, "unchanged", "hit")],
        values={"${cluster.name}": "prod-a"},
    )
    b = ClusterPlan("prod-b", {"env": "prod"}, 2, [PlanRow(KEY, "unchanged", "hit")], held="x")
    c = ClusterPlan("zz", {}, None, refused='tenant t may not publish to cluster "zz"')
    t = Targeting("web", [], selector="env=prod", steps=["region=eu"])
    return fleetview.document([a, b, c], t, unregistered=["gone"], diff=False)


def test_the_summary_rows_read_at_a_glance() -> None:
    doc = _doc()
    assert fleetview.summary_rows(doc) == [
        {"cluster": "prod-a", "step": "1", "new": 0, "changed": 1, "drift": 0, "prune": 0,
         "unchanged": 1, "note": ""},
        {"cluster": "prod-b", "step": "2", "new": 0, "changed": 0, "drift": 0, "prune": 0,
         "unchanged": 1, "note": "held: x"},
        {"cluster": "zz", "step": "-", "new": 0, "changed": 0, "drift": 0, "prune": 0,
         "unchanged": 0, "note": 'refused: tenant t may not publish to cluster "zz"'},
    ]  # fmt: skip
    assert doc.changes
    assert doc.errors  # a refused cluster: --exit-code 1
    assert fleetview.exit_code(doc) == 1
    assert [e.objects[0].name for e in doc.clusters if e.objects] == ["x"]  # hits left out


def test_the_pull_request_comment_has_a_row_per_cluster_and_folds_the_changes() -> None:
    md = fleetview.markdown(_doc())
    assert md.startswith("### driftbus plan: `web` on a fleet of 3 clusters (selector `env=prod`)")
    assert "**3 clusters, 1 changing, 0 new, 1 changed" in md
    assert "1 refused" in md
    assert "1. `region=eu`, 2. the rest of the fleet" in md
    assert "cluster `gone` is not registered" in md
    assert "| `prod-a` | 1 | 0 | 1 | 0 | 0 | 1 |  |" in md
    assert (
        '| `zz` | - | 0 | 0 | 0 | 0 | 0 | refused: tenant t may not publish to cluster "zz" |' in md
    )
    assert "<details><summary>prod-a: 1 objects</summary>" in md
    assert "- apply ConfigMap ns/x (manifest)" in md
    assert "values: `${cluster.name}` = `prod-a`" in md
    assert "no field-level diff" in md


def test_a_fleet_with_nothing_to_do_says_so_and_exits_0() -> None:
    doc = fleetview.document(
        [ClusterPlan("a", {}, 1, [PlanRow(KEY, "unchanged", "hit")])],
        Targeting("web", []),
        unregistered=[],
        diff=True,
    )
    assert fleetview.exit_code(doc) == 0
    assert "No changes: every cluster already matches" in fleetview.markdown(doc)
