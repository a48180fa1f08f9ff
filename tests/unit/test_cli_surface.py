"""The CLI's local surface: object references, plan rendering, progress lines, the ``up``
context, bundle rows and ``-o json|yaml`` output, table-driven and without a bus."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import types
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
import yaml

from schemas.messages import BundleCounts, BundleStatus
from schemas.messages import BundlePhase as P
from schemas.subjects import ObjectKey
from services.cli import context, lifecycle, objectref, output, progress, table
from services.cli.plan import render as pr
from services.cli.plan.explain import PlanRow
from services.core.diff import Change

ROOT = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


def schema_errors(name: str, value: Any) -> list[str]:
    schema = json.loads((ROOT / "schemas" / "json" / name).read_text())
    instance = json.loads(msgspec.json.encode(value))
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(instance)]


# --- objectref ------------------------------------------------------------------------------------

R = objectref.ObjectRef


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("configmap/ns/name", R("configmap", None, "ns", "name")),
        ("ClusterRole/x", R("ClusterRole", None, "", "x")),
        ("deployment.apps/ns/web", R("deployment", "apps", "ns", "web")),
        ("ClusterRole.rbac/admin", R("ClusterRole", "rbac", "", "admin")),
        ("ConfigMap./ns/cm", R("ConfigMap", "", "ns", "cm")),
        ("ClusterRole/x:y", R("ClusterRole", None, "", "x:y")),
        ("rolebinding/ns/system:a:b", R("rolebinding", None, "ns", "system:a:b")),
    ],
)
def test_parse(text: str, ref: objectref.ObjectRef) -> None:
    assert objectref.parse(text) == ref
    assert str(ref) == text


@pytest.mark.parametrize(
    "text",
    ["configmap", "", "a/b/c/d", "/ns/name", "configmap//name", "configmap/ns/", "configmap/"],
)
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="KIND"):
        objectref.parse(text)


def test_parse_refuses_an_empty_kind() -> None:
    """``.apps/ns/web`` has no KIND."""
    with pytest.raises(ValueError, match="the kind is missing"):
        objectref.parse(".apps/ns/web")


CM = ObjectKey("", "ConfigMap", "ns", "cm")
CM_FOO = ObjectKey("foo.example.com", "ConfigMap", "ns", "cm")
CR = ObjectKey("rbac.authorization.k8s.io", "ClusterRole", "", "x:y")
ING = ObjectKey("networking.k8s.io", "Ingress", "ns", "web")
NP = ObjectKey("networking.k8s.io", "NetworkPolicy", "ns", "deny")
DEP = ObjectKey("apps", "Deployment", "ns", "web")
KNOWN = [CM_FOO, DEP, CM, CR, ING, NP, CM]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("configmap/ns/cm", [CM, CM_FOO]),
        ("CONFIGMAPS/ns/cm", [CM, CM_FOO]),
        ("ConfigMap./ns/cm", [CM]),
        ("configmap.foo/ns/cm", [CM_FOO]),
        ("configmap.fo/ns/cm", []),
        ("ingresses/ns/web", [ING]),
        ("networkpolicies.networking/ns/deny", [NP]),
        ("clusterroles.rbac/x:y", [CR]),
        ("ClusterRole.RBAC.authorization.k8s.io/x:y", [CR]),
        ("ClusterRole.rba/x:y", []),
        ("ClusterRole./x:y", []),
        ("ClusterRole/ns/x:y", []),
        ("configmap/other/cm", []),
        ("configmap/ns/CM", []),
        ("configmap/cm", []),
        ("deploy/ns/web", []),
    ],
)
def test_match(text: str, found: list[ObjectKey]) -> None:
    """KNOWN is unsorted and holds CM twice: what matches comes sorted, once each."""
    assert objectref.match(objectref.parse(text), KNOWN) == found


HINT = "; give KIND.GROUP (KIND. for the core group)"
AMBI = "Ingress.networking.k8s.io, Deployment.apps" + HINT


@pytest.mark.parametrize(
    ("text", "found", "says"),
    [
        ("configmap/ns/cm", [], "no decisions about configmap/ns/cm in cluster c1"),
        (
            "configmap/ns/cm",
            [CM, CM_FOO],
            "configmap/ns/cm is ambiguous in cluster c1: ConfigMap., ConfigMap.foo.example.com"
            + HINT,
        ),
        ("ingress/ns/web", [ING, DEP], "ingress/ns/web is ambiguous in cluster c1: " + AMBI),
    ],
)
def test_explain(text: str, found: list[ObjectKey], says: str) -> None:
    assert objectref.explain(objectref.parse(text), found, "c1") == says


# --- plan_render ----------------------------------------------------------------------------------


def row(action: str, name: str = "web", *, changes: int = 0, reason: str = "manifest") -> PlanRow:
    return PlanRow(
        key=ObjectKey("apps", "Deployment", "ns", name),
        action=action,  # type: ignore[arg-type]
        reason=reason,
        changes=[Change(f"spec.f{i}", i, i + 1) for i in range(changes)],
        api_version="apps/v1",
    )


@pytest.mark.parametrize(
    ("actions", "summary", "changes", "errors", "code"),
    [
        ([], (0, 0, 0, 0, 0), False, False, 0),
        (["unchanged", "unchanged"], (0, 0, 0, 2, 0), False, False, 0),
        (["unchanged", "keep"], (0, 0, 1, 1, 0), False, False, 0),
        (["keep"], (0, 0, 1, 0, 0), False, False, 0),
        (["apply", "unchanged"], (1, 0, 0, 1, 0), True, False, 2),
        (["delete"], (0, 1, 0, 0, 0), True, False, 2),
        (["error"], (0, 0, 0, 0, 1), False, True, 1),
        (["apply", "delete", "keep", "error"], (1, 1, 1, 0, 1), True, True, 1),
    ],
)
def test_document_summary_and_exit_code(
    actions: list[str], summary: tuple[int, ...], changes: bool, errors: bool, code: int
) -> None:
    rows = [row(a, f"o{i}") for i, a in enumerate(actions)]
    doc = pr.document(rows, cluster="c1", bundle="b", force=False)
    s = doc.summary
    assert (s.apply, s.delete, s.keep, s.unchanged, s.error) == summary
    assert (doc.changes, doc.errors) == (changes, errors)
    assert pr.exit_code(doc) == code
    assert [o.name for o in doc.objects] == [f"o{i}" for i in range(len(actions))]
    assert schema_errors("cli-plan.schema.json", doc) == []
    md = pr.markdown(doc)
    assert f"**{pr.summary_line(doc)}**" in md.splitlines()
    quiet = all(a == "unchanged" for a in actions)
    assert ("No changes: the cluster already matches these manifests." in md) is quiet
    assert ("| action |" in md) is not quiet


def test_document_objects_and_changes() -> None:
    changes = [
        Change("data.a", None, "1", added=True),
        Change("data.b", {"x": [1]}, None, removed=True),
        Change("data.c", [1], {"k": True}),
        Change("data.e", None, "y" * 200, added=True),
    ]
    r = PlanRow(ObjectKey("", "ConfigMap", "ns", "cm"), "apply", "drift", changes, ["/d"], "v1")
    doc = pr.document([r], cluster="c1", bundle="team/app", force=True)
    assert (doc.cluster, doc.bundle, doc.force) == ("c1", "team/app", True)
    [o] = doc.objects
    assert msgspec.structs.astuple(o)[:7] == ("v1", "", "ConfigMap", "ns", "cm", "apply", "drift")
    assert o.ignored == ["/d"]
    assert [(c.op, c.path, c.old, c.new) for c in o.changes] == [
        ("add", "data.a", None, "1"),
        ("remove", "data.b", {"x": [1]}, None),
        ("change", "data.c", [1], {"k": True}),
        ("add", "data.e", None, "y" * 200),
    ]
    assert schema_errors("cli-plan.schema.json", doc) == []
    assert pr.markdown(doc).splitlines()[-8:-2] == [
        "```diff",
        "+ data.a: 1",
        "- data.b: {'x': [1]}",
        "! data.c: [1] → {'k': True}",
        "+ data.e: " + "y" * 119 + "…",
        "```",
    ]


@pytest.mark.parametrize("force", [False, True])
def test_markdown_table_and_details(force: bool) -> None:
    rows = [
        row("apply", "web", changes=2),
        row("error", "bad", reason="denied | by webhook\nagain"),
        row("unchanged", "same"),
        PlanRow(ObjectKey("rbac.authorization.k8s.io", "ClusterRole", "", "r"), "delete", "prune"),
    ]
    md = pr.markdown(pr.document(rows, cluster="c", bundle="t/b", force=force))
    lines = md.splitlines()
    assert lines[0] == "### driftbus plan: `t/b` on cluster `c`" + (" (with `--force`)" * force)
    assert "**1 to apply, 1 to delete, 0 kept, 1 unchanged, 1 errors**" in lines
    assert "| apply | Deployment ns/web | manifest | 2 |" in lines
    assert "| error | Deployment ns/bad | denied \\| by webhook again |  |" in lines
    assert "| delete | ClusterRole r | prune |  |" in lines
    assert "same" not in md
    assert md.count("<details>") == 1
    i = lines.index("<details><summary>Deployment ns/web</summary>")
    diff = ["", "```diff", "! spec.f0: 0 → 1", "! spec.f1: 1 → 2", "```", "", "</details>"]
    assert lines[i + 1 : i + 8] == diff
    assert md.endswith("</details>\n")


@pytest.mark.parametrize(
    ("n", "more"),
    [
        (pr.MAX_MARKDOWN_CHANGES, None),
        (pr.MAX_MARKDOWN_CHANGES + 1, "# … 1 more"),
        (pr.MAX_MARKDOWN_CHANGES + 7, "# … 7 more"),
    ],
)
def test_markdown_bounds_the_changes_shown(n: int, more: str | None) -> None:
    md = pr.markdown(pr.document([row("apply", changes=n)], cluster="c", bundle="b", force=False))
    shown = [ln for ln in md.splitlines() if ln.startswith("! spec.")]
    assert len(shown) == min(n, pr.MAX_MARKDOWN_CHANGES)
    assert (more in md.splitlines()) if more else ("more" not in md)


# --- progress -------------------------------------------------------------------------------------


def status(applied: int = 0, ready: int = 0, phase: P = P.RECONCILING, **kw: int) -> BundleStatus:
    counts = BundleCounts(total=3, applied=applied, ready=ready, **kw)
    return BundleStatus(cluster="c", bundle="b", revision="r1", phase=phase, counts=counts)


@pytest.mark.parametrize(
    ("st", "pruned", "to_prune", "text"),
    [
        (status(1, 0), 0, 0, "b@r: Reconciling applied 1/3  ready 0/3"),
        (status(3, 3, P.READY), 0, 0, "b@r: Ready applied 3/3  ready 3/3"),
        (status(2, 1, pruning=1), 1, 2, "b@r: Reconciling applied 2/3  ready 1/3  pruned 1/2"),
        (status(3, 2, failed=1), 0, 0, "b@r: Reconciling applied 3/3  ready 2/3  failed 1"),
        (
            status(3, 2, P.FAILED, failed=2),
            4,
            4,
            "b@r: Failed applied 3/3  ready 2/3  pruned 4/4  failed 2",
        ),
    ],
)
def test_line(st: BundleStatus, pruned: int, to_prune: int, text: str) -> None:
    assert progress.line("b@r", st, pruned, to_prune) == text


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A monotonic clock the test moves (progress.time is replaced, not the time module)."""
    now = [1000.0]
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    return now


def plain(every: float) -> tuple[progress.Progress, io.StringIO]:
    out = io.StringIO()
    return progress.Progress("b@r", tty=False, out=out, every=every), out


def test_plain_progress_is_throttled(clock: list[float]) -> None:
    p, out = plain(every=5.0)
    p.start()
    assert out.getvalue() == "b@r: waiting for the planner …\n"
    p.update(status(1))
    assert out.getvalue().splitlines()[1:] == ["b@r: Reconciling applied 1/3  ready 0/3"]
    p.update(status(1))
    assert len(out.getvalue().splitlines()) == 2
    clock[0] += 4.9
    p.update(status(2))
    p.update(status(3, 1))
    assert len(out.getvalue().splitlines()) == 2
    clock[0] += 0.1  # 5s since the last line printed: the next change is shown
    p.update(status(3, 2))
    assert out.getvalue().splitlines()[2] == "b@r: Reconciling applied 3/3  ready 2/3"
    p.close(status(3, 3, P.READY))
    p.close(status(3, 3, P.READY))
    p.close(None)
    assert out.getvalue().splitlines()[3:] == ["b@r: Ready applied 3/3  ready 3/3"]


def test_plain_progress_every_zero_and_prunes(clock: list[float]) -> None:
    p, out = plain(every=0)
    p.start()
    for st in (status(3, 3, pruning=2), status(3, 3, pruning=3), status(3, 3, pruning=3)):
        p.update(st)
    p.update(status(3, 3, pruning=1))
    p.close(status(3, 3, P.READY, pruning=0))
    assert out.getvalue().splitlines()[1:] == [
        "b@r: Reconciling applied 3/3  ready 3/3  pruned 0/2",
        "b@r: Reconciling applied 3/3  ready 3/3  pruned 0/3",
        "b@r: Reconciling applied 3/3  ready 3/3  pruned 2/3",
        "b@r: Ready applied 3/3  ready 3/3  pruned 3/3",
    ]


@pytest.mark.parametrize(("now", "started"), [(1.0, True), (1000.0, True), (1.0, False)])
def test_plain_progress_shows_the_first_status_at_once(
    clock: list[float], now: float, started: bool
) -> None:
    """Also right after ``start``'s waiting line, whatever the monotonic clock reads (a young
    host, or a large ``every``)."""
    clock[0] = now
    p, out = plain(every=5.0)
    if started:
        p.start()
    p.update(status(1))
    assert out.getvalue().splitlines()[-1] == "b@r: Reconciling applied 1/3  ready 0/3"
    assert len(out.getvalue().splitlines()) == 1 + started


def test_terminal_progress_draws_bars() -> None:
    out = io.StringIO()
    p = progress.Progress("b@r", tty=True, out=out, every=0)
    p.start()
    p.update(status(1, pruning=2))
    p.update(status(3, 3, P.READY, pruning=0))
    p.close(status(3, 3, P.READY))
    text = out.getvalue()
    assert "waiting for the planner" in text
    assert "pruned" in text


# --- context --------------------------------------------------------------------------------------


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    p = tmp_path / "up" / "context.json"
    monkeypatch.setenv(context.CONTEXT_ENV, str(p))
    monkeypatch.delenv("NATS_URL", raising=False)
    return p


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_write_then_read(ctx: Path) -> None:
    assert context.path() == ctx
    assert context.read() is None
    assert context.nats_url(None) is None
    info = {"pid": os.getpid(), "nats_url": "nats://127.0.0.1:4333", "cluster": "dev"}
    assert context.write(info) == ctx
    assert context.read() == info
    assert not ctx.with_suffix(".tmp").exists()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (lambda: json.dumps({"pid": dead_pid()}), "is not running"),
        (lambda: json.dumps({"pid": 2**22 + 12345}), "is not running"),
        (lambda: json.dumps({"pid": "1"}), "is not running"),
        (lambda: json.dumps({"nats_url": "nats://x"}), "is not running"),
        (lambda: "{not json", "cannot be read"),
        (lambda: json.dumps([os.getpid()]), "is not a JSON object"),
        (lambda: "null", "is not a JSON object"),
    ],
    ids=["exited", "no-such-pid", "pid-str", "no-pid", "invalid", "list", "null"],
)
def test_read_a_stale_context(ctx: Path, content: Any, says: str) -> None:
    ctx.parent.mkdir(parents=True)
    ctx.write_text(content())
    with pytest.raises(context.StaleContext, match=says) as e:
        context.read()
    assert str(ctx) in str(e.value)
    with pytest.raises(context.StaleContext):
        context.nats_url(None)


@pytest.mark.parametrize("pid", [0, -1])
def test_read_a_context_with_an_impossible_pid(ctx: Path, pid: int) -> None:
    """os.kill(0 or -1, 0) would signal a group: such a pid is never a running stack."""
    context.write({"pid": pid, "nats_url": "nats://x"})
    with pytest.raises(context.StaleContext):
        context.read()


@pytest.mark.parametrize(
    ("content", "pid", "removed"),
    [({"pid": "mine"}, "mine", True), ({"pid": "mine"}, 12345678, False), ([1], "mine", False)],
)
def test_remove_only_its_own(ctx: Path, content: Any, pid: Any, removed: bool) -> None:
    mine = os.getpid()
    context.write({"pid": mine} if isinstance(content, dict) else content)
    context.remove(mine if pid == "mine" else pid)
    assert ctx.exists() is not removed
    ctx.unlink(missing_ok=True)
    context.remove(mine)  # nothing to remove: no error


@pytest.mark.parametrize(
    ("flag", "env", "in_context", "want"),
    [
        ("nats://flag:1", None, "nats://ctx:3", "nats://flag:1"),
        ("nats://flag:1", "nats://env:2", "nats://ctx:3", "nats://flag:1"),
        (None, "nats://env:2", "nats://ctx:3", None),
        (None, None, "nats://ctx:3", "nats://ctx:3"),
        ("", None, "nats://ctx:3", "nats://ctx:3"),
        (None, None, None, None),
    ],
)
def test_nats_url(
    ctx: Path, monkeypatch: Any, flag: Any, env: Any, in_context: Any, want: Any
) -> None:
    context.write({"pid": os.getpid()} | ({"nats_url": in_context} if in_context else {}))
    if env is not None:
        monkeypatch.setenv("NATS_URL", env)
    assert context.nats_url(flag) == want


@pytest.mark.parametrize("explicit", [None, ""])
def test_path_honours_xdg(tmp_path: Path, monkeypatch: Any, explicit: str | None) -> None:
    if explicit is None:
        monkeypatch.delenv(context.CONTEXT_ENV, raising=False)
    else:
        monkeypatch.setenv(context.CONTEXT_ENV, explicit)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert context.path() == tmp_path / "driftbus" / "context.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert context.path() == Path.home() / ".config" / "driftbus" / "context.json"


# --- lifecycle ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ago", "text"),
    [
        (None, ""),
        (0, "0s"),
        (42.9, "42s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h"),
        (86399, "23h"),
        (3 * 86400 + 7200, "3d"),
        (-30, "0s"),
    ],
)
def test_age(ago: float | None, text: str) -> None:
    since = None if ago is None else NOW - dt.timedelta(seconds=ago)
    assert table.age(since, NOW) == text


COLUMNS = ["bundle", "phase", "revision", "age", "ready", "notes"]


def bundle_status(**kw: Any) -> BundleStatus:
    counts = BundleCounts(total=5, applied=4, ready=3, failed=1)
    return BundleStatus(
        "c1", "team/app", "sha256-" + "0123456789" * 4, P.DEGRADED, counts, "1 failed", **kw
    )


@pytest.mark.parametrize(
    ("kw", "notes"),
    [
        ({}, ""),
        ({"suspended": True}, "suspended"),
        ({"rollback_of": "rev-2"}, "rollback of rev-2"),
        ({"depends_on": ["base", "team/db"]}, "after base,team/db"),
        (
            {"suspended": True, "rollback_of": "rev-2", "depends_on": ["base"]},
            "suspended; rollback of rev-2; after base",
        ),
    ],
)
def test_bundle_and_table_rows(kw: dict[str, Any], notes: str) -> None:
    published, at = NOW - dt.timedelta(minutes=7, seconds=30), NOW - dt.timedelta(seconds=5)
    st = bundle_status(published_at=published, at=at, **kw)
    r = lifecycle.bundle_row(st, NOW)
    assert (r.cluster, r.bundle, r.phase, r.revision) == ("c1", "team/app", "Degraded", st.revision)
    assert (r.objects, r.applied, r.ready, r.failed, r.message) == (5, 4, 3, 1, "1 failed")
    assert (r.published_at, r.updated_at, r.age_seconds) == (published, at, 450.0)
    assert (r.suspended, r.rollback_of) == (bool(kw.get("suspended")), kw.get("rollback_of"))
    assert r.depends_on == kw.get("depends_on", [])
    cells = ["team/app", "Degraded", st.revision[:24], "7m", "3/5", notes]
    assert lifecycle.table_row(st, NOW) == dict(zip(COLUMNS, cells, strict=True))
    assert schema_errors("cli-bundles.schema.json", [r]) == []


def test_bundle_row_of_an_unpublished_status() -> None:
    st = bundle_status()
    r = lifecycle.bundle_row(st, NOW)
    assert (r.published_at, r.age_seconds, r.updated_at, r.rollback_of) == (None, None, None, None)
    assert lifecycle.table_row(st, NOW)["age"] == ""
    assert schema_errors("cli-bundles.schema.json", [r]) == []


# --- output ---------------------------------------------------------------------------------------

ROW = lifecycle.bundle_row(
    bundle_status(published_at=NOW - dt.timedelta(seconds=90), at=NOW, depends_on=["base"]), NOW
)


@pytest.mark.parametrize(
    ("value", "times"),
    [
        ([ROW], ["2024-05-01T11:58:30Z", "2024-05-01T12:00:00Z"]),
        (ROW, ["2024-05-01T11:58:30Z", "2024-05-01T12:00:00Z"]),
        ([], []),
        (
            {"at": NOW.replace(microsecond=5), "s": "yes", "x": [None, 1.5]},
            ["2024-05-01T12:00:00.000005Z"],
        ),
    ],
)
def test_dump_json_and_yaml_agree(
    value: Any, times: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The same data either way, times as RFC 3339 strings (YAML quotes them: no timestamps)."""
    output.dump(value, "json")
    as_json = json.loads(capsys.readouterr().out)
    output.dump(value, "yaml")
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    assert as_json == as_yaml == json.loads(msgspec.json.encode(value))
    text = json.dumps(as_json)
    assert all(f'"{t}"' in text for t in times)
